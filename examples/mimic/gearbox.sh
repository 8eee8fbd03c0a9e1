#!/bin/sh
# Gearbox (SDFormat mimic seed): the follower turns 5× the leader, over UDP on 127.0.0.1.
#   follower = 5 · (leader − 0) + 0
# Run from a checkout (or with servo-node on PATH); Ctrl-C ends both nodes (each stops safely).
# Then, from another terminal, command the leader and watch both:
#   eval "$(servo-node dsdl-env)"; export UAVCAN__UDP__IFACE=127.0.0.1 UAVCAN__NODE__ID=126
#   y pub -T 0.1 3701:zubax.telega.ServoCommand '{target: {kinematics: {position: 1.0}}, profile_velocity_reverse_forward: [-1, 1], profile_deceleration_acceleration: [-5, 5], profile_jerk: 50}'
# (5 × those limits stays within the follower's own: 10 rad/s, 50 rad/s², 500 rad/s³; a leader beyond them makes
# the follower lag, flagged in sys.mimic, and catch up.) When y pub ends, the leader's deadman stops it and the
# follower stops with it ("the leader disengaged"); the next command engages both again.
#   y r 72 sys.mimic          # leader, target, relation error, lag, why it stopped
set -e
BIN=${BIN:-$(dirname "$(command -v servo-node)")}
export UAVCAN__UDP__IFACE=${UAVCAN__UDP__IFACE:-127.0.0.1}
# Ctrl-C reaches both nodes as well (one process group): each makes its safe stop, the script waits for them. A TERM
# to the script is forwarded once (a second signal would make a node skip its stop).
trap 'wait; exit' INT
trap 'kill -TERM $L $F 2>/dev/null; wait' TERM
trap 'kill -TERM $L $F 2>/dev/null' EXIT
# The leader: an ordinary servo publishing dynamics (its state on feedback).
UAVCAN__NODE__ID=71 UAVCAN__SUB__SETPOINT_SERVO__ID=3701 UAVCAN__PUB__DYNAMICS__ID=3702 \
  UAVCAN__PUB__FEEDBACK__ID=3703 SERVO__DYNAMICS_RATE=200 \
  "$BIN/servo-node" run --registry "${TMPDIR:-/tmp}/gearbox-leader.db" & L=$!
# The follower: 5× the leader, within its own limits (±10 rad/s: the leader may move up to 2 rad/s).
UAVCAN__NODE__ID=72 UAVCAN__SUB__MIMIC_LEADER__ID=3702 UAVCAN__SUB__MIMIC_LEADER_FEEDBACK__ID=3703 \
  UAVCAN__PUB__DYNAMICS__ID=3712 SERVO__MIMIC__MULTIPLIER=5 \
  "$BIN/servo-node" run --registry "${TMPDIR:-/tmp}/gearbox-follower.db" & F=$!
wait
