"""cyphal-servo: a Cyphal node that turns setpoints into jerk-limited motion of a servo drive."""
