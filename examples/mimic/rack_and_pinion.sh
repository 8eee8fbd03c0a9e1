#!/bin/sh
# Rack and pinion (SDFormat mimic seed): a linear follower (m) of a rotational leader (rad), multiplier 0.02
# (a pinion of 20 mm pitch radius): follower = 0.02 · (leader − 0) + 0, over UDP on 127.0.0.1.
# Then, from another terminal:
#   eval "$(servo-node dsdl-env)"; export UAVCAN__UDP__IFACE=127.0.0.1 UAVCAN__NODE__ID=126
#   y pub -T 0.1 3721:zubax.telega.ServoCommand '{target: {kinematics: {position: 6.283}}}'   # one turn: 0.1257 m
#   y r 74 sys.mimic
set -e
BIN=${BIN:-$(dirname "$(command -v servo-node)")}
export UAVCAN__UDP__IFACE=${UAVCAN__UDP__IFACE:-127.0.0.1}
# Ctrl-C reaches both nodes as well (one process group): each makes its safe stop, the script waits for them. A TERM
# to the script is forwarded once (a second signal would make a node skip its stop).
trap 'wait; exit' INT
trap 'kill -TERM $L $F 2>/dev/null; wait' TERM
trap 'kill -TERM $L $F 2>/dev/null' EXIT
UAVCAN__NODE__ID=73 UAVCAN__SUB__SETPOINT_SERVO__ID=3721 UAVCAN__PUB__DYNAMICS__ID=3722 \
  UAVCAN__PUB__FEEDBACK__ID=3723 SERVO__DYNAMICS_RATE=200 \
  "$BIN/servo-node" run --registry "${TMPDIR:-/tmp}/rack-leader.db" & L=$!
# The rack: a linear joint (sim.kind linear, m and N); its limits in m/s: 0.02 × the leader's 10 rad/s is 0.2 m/s.
UAVCAN__NODE__ID=74 UAVCAN__SUB__MIMIC_LEADER__ID=3722 UAVCAN__SUB__MIMIC_LEADER_FEEDBACK__ID=3723 \
  UAVCAN__PUB__DYNAMICS__ID=3732 SERVO__MIMIC__MULTIPLIER=0.02 SIM__KIND=linear SERVO__DRIVE__KIND=linear \
  SERVO__PROFILE__VELOCITY="-0.25 0.25" SERVO__PROFILE__ACCELERATION="-2 2" SERVO__PROFILE__JERK=20 \
  "$BIN/servo-node" run --registry "${TMPDIR:-/tmp}/rack-follower.db" & F=$!
wait
