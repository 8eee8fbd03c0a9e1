#!/bin/sh
# Container entrypoint:
# - UAVCAN__UDP__IFACE=auto (or unset, with no CAN iface): this container's own address, so a compose network
#   needs no fixed addresses;
# - CYPHAL_SERVO_RT_PRIORITY=N (1..99): run the command under SCHED_FIFO N, as a servo and its drive are deployed
#   (needs an rtprio limit >= N: compose `ulimits: rtprio`); not permitted: said once, and it runs without;
# - a first word that is no command is a servo-node subcommand (`run`, `demo`, ...);
# then exec the command, which so gets the signals (docker stop) itself.
set -e
if [ "${UAVCAN__UDP__IFACE:-auto}" = auto ] && [ -z "${UAVCAN__CAN__IFACE:-}" ]; then
    UAVCAN__UDP__IFACE=$(hostname -i | cut -d' ' -f1)
    export UAVCAN__UDP__IFACE
fi
if [ $# -eq 0 ] || ! command -v "$1" >/dev/null 2>&1; then
    set -- servo-node "$@"
fi
prio=${CYPHAL_SERVO_RT_PRIORITY:-0}
if [ "$prio" != 0 ]; then
    if chrt -f "$prio" true 2>/dev/null; then
        set -- chrt -f "$prio" "$@"
    else
        echo "cyphal-servo-entrypoint: SCHED_FIFO $prio not permitted (rtprio limit $(ulimit -r)): normal scheduling" >&2
    fi
fi
exec "$@"
