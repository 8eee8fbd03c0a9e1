#!/usr/bin/env bash
# `make compose-test`: build the images, bring the compose bench up, check it from inside its own network, and
# tear everything down again, also on failure or Ctrl-C. Unattended; prints "compose-test: N passed, N failed".
#
# Uses a running engine (DOCKER_HOST or the default socket) as it is. Without one, as root on a Debian-like host,
# it installs Debian's docker.io and docker-compose if missing and starts a private dockerd (own socket, data and
# exec roots, no iptables, no default bridge) that it stops by PID at the end, unmounting what it leaves mounted.
# The image builds reach no network: the wheels come from the host's pip (docker/wheelhouse, emptied afterwards),
# and where python:3.11-slim cannot be pulled the base image is made locally (docker/base-image.sh, debootstrap).
#
# Exit status: 0 all checks passed, 1 a check failed, 3 no engine could be had (the reason is printed).
# Environment: BASE_IMAGE (skip the pull/debootstrap), BASE_ROOTFS (a root file system tar that
# `docker/base-image.sh --rootfs` is making or made, its exit status in $BASE_ROOTFS.status: imported instead of a
# debootstrap here), SERVO_SUBNET (the bench network; default a free /24 of the 198.18.0.0/15 test range),
# KEEP_WHEELHOUSE=1, PYTHON (the host Python 3.11 whose pip fills the wheelhouse).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH"  # Debian's docker client first: it matches Debian's dockerd.

run_id="cst$$"
project="cyphalservo$$"
logs="build/compose-test"
servo_image="cyphal-servo:latest"
tester_image="cyphal-servo-tester:latest"
wheelhouse="docker/wheelhouse"
engine_pid="" engine_roots=() compose=() compose_files=(-f docker-compose.yml --profile cia402)  # + the CiA 402 axis
passed=0 failed=0 t_total=$SECONDS
stage_names=() stage_secs=()
mkdir -p "$logs"

say() { printf 'compose-test: %s\n' "$*"; }
loud() { printf '\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n!!! compose-test: %s\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n' "$*" >&2; }
stage() { stage_names+=("$1"); stage_secs+=("$2"); }
verdict() {  # verdict NAME STATUS DETAIL
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); say "PASS $1${3:+: $3}"; else failed=$((failed + 1)); say "FAIL $1${3:+: $3}"; fi
}
dc() { "${compose[@]}" -p "$project" "${compose_files[@]}" "$@"; }
container() { dc ps -a -q "$1" 2>/dev/null | head -1; }

# ------------------------------------------------------------------------------------------------ teardown
teardown() {
    local t0=$SECONDS
    trap - EXIT INT TERM
    if [ ${#compose[@]} -gt 0 ]; then
        dc --profile test logs --no-color -t >"$logs/containers.log" 2>&1
        dc --profile test down -v --remove-orphans -t 20 >"$logs/down.log" 2>&1 || say "compose down failed (see $logs/down.log)"
    fi
    if [ -n "$engine_pid" ]; then
        kill -TERM "$engine_pid" 2>/dev/null
        for _ in $(seq 150); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$engine_pid" 2>/dev/null && { say "dockerd $engine_pid did not stop: SIGKILL"; kill -KILL "$engine_pid"; }
        wait "$engine_pid" 2>/dev/null
    fi
    local root
    for root in "${engine_roots[@]}"; do  # overlay and netns mounts a dockerd leaves behind, innermost first
        awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r \
            | while read -r m; do umount -l "$m" 2>/dev/null; done
        rm -rf --one-file-system "$root"
    done
    local dir  # the cgroups runc made under ours, in every controller, innermost first
    for dir in /sys/fs/cgroup/*/"$cgroup"; do
        [ -d "$dir" ] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    [ "${KEEP_WHEELHOUSE:-0}" = 1 ] || rm -f "$wheelhouse"/*.whl
    stage down $((SECONDS - t0))
    local line="" i
    for i in "${!stage_names[@]}"; do line+="${stage_names[$i]} ${stage_secs[$i]} s, "; done
    say "stage timings: ${line}total $((SECONDS - t_total)) s"
    echo "compose-test: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ] && exit 0
    [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ] && exit 3
    exit 1
}
trap teardown EXIT
trap 'say interrupted; exit 1' INT TERM

# ------------------------------------------------------------------------------------------------ engine
no_engine() { loud "no container engine: $*"; exit 3; }

# Every container of our engine (builds and nodes) runs in the cgroup CGROUP, whose CPU weight is that of 64 busy
# processes: a host loaded by other work then neither starves the nodes (their drive links time out after 0.5 s)
# nor stretches the builds (cgroup v1 puts each of the host's own processes beside it with weight 1024 each).
cgroup="cyphal-servo-engine.$run_id"
cpu_weight="normal"
start_private_engine() {  # start_private_engine DRIVER: a dockerd of our own; 0 once it answers
    local data="/var/tmp/cyphal-servo-engine.$run_id" exec_root="/run/cyphal-servo-engine.$run_id" parent=()
    mkdir -p "$data" "$exec_root"
    engine_roots+=("$exec_root" "$data")
    if [ -w /sys/fs/cgroup/cpu/cpu.shares ] && mkdir -p "/sys/fs/cgroup/cpu/$cgroup" \
        && echo 65536 >"/sys/fs/cgroup/cpu/$cgroup/cpu.shares"; then
        parent=(--cgroup-parent "/$cgroup") cpu_weight="65536 (cgroup v1 cpu.shares)"
    fi
    export DOCKER_HOST="unix://$exec_root/docker.sock"
    dockerd --data-root "$data" --exec-root "$exec_root" --pidfile "$exec_root/dockerd.pid" -H "$DOCKER_HOST" \
        --iptables=false --ip-masq=false --bridge=none --storage-driver="$1" --containerd-namespace "$run_id" \
        --containerd-plugins-namespace "$run_id-plugins" "${parent[@]}" >"$logs/dockerd-$1.log" 2>&1 &
    engine_pid=$!
    for _ in $(seq 150); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$engine_pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -TERM "$engine_pid" 2>/dev/null; wait "$engine_pid" 2>/dev/null; engine_pid=""
    return 1
}

sweep_stale_engines() {  # a dockerd of an earlier run that was killed before its teardown (SIGKILL, power cut)
    local dir pid
    for dir in /run/cyphal-servo-engine.cst*; do
        [ -d "$dir" ] || continue
        pid=${dir##*.cst}
        kill -0 "$pid" 2>/dev/null && continue  # its run is still going
        say "removing the engine of an earlier run that did not finish ($dir)"
        [ -f "$dir/dockerd.pid" ] && kill -TERM "$(cat "$dir/dockerd.pid")" 2>/dev/null && sleep 5
        engine_roots+=("$dir" "/var/tmp/cyphal-servo-engine.cst$pid")
        find /sys/fs/cgroup/*/"cyphal-servo-engine.cst$pid" -depth -type d -exec rmdir {} + 2>/dev/null
    done
}

t0=$SECONDS
[ "$(id -u)" = 0 ] && sweep_stale_engines
if docker info >/dev/null 2>&1; then
    say "using the running engine ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
else
    [ "$(id -u)" = 0 ] || no_engine "none runs and starting one needs root"
    missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then missing+=(docker-compose); fi
    if [ ${#missing[@]} -gt 0 ]; then
        command -v apt-get >/dev/null || no_engine "dockerd missing and no apt-get to install ${missing[*]}"
        say "installing ${missing[*]}"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
            >"$logs/apt.log" 2>&1 || no_engine "apt-get install ${missing[*]} failed (see $logs/apt.log)"
    fi
    start_private_engine overlay2 || { say "overlay2 failed, trying vfs"; start_private_engine vfs; } \
        || no_engine "dockerd would not start (see $logs/dockerd-*.log)"
    say "started dockerd $engine_pid ($(docker info -f '{{.Driver}}' 2>/dev/null)) on $DOCKER_HOST"
fi
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
stage "engine start" $((SECONDS - t0))

# ------------------------------------------------------------------------------------------------ base image, wheels
make_base_image() {  # make_base_image IMAGE: debootstrapped here, or imported from BASE_ROOTFS once it is made
    if [ -z "${BASE_ROOTFS:-}" ]; then
        docker/base-image.sh "$1"
        return
    fi
    local s=$SECONDS
    while [ ! -f "$BASE_ROOTFS.status" ] && [ $((SECONDS - s)) -lt 600 ]; do sleep 0.5; done
    [ "$(cat "$BASE_ROOTFS.status" 2>/dev/null)" = 0 ] || { cat "$BASE_ROOTFS.log"; return 1; }
    docker/base-image.sh --import "$BASE_ROOTFS" "$1"
}

t0=$SECONDS
base_image=${BASE_IMAGE:-python:3.11-slim}
base_pid=""
if ! docker image inspect "$base_image" >/dev/null 2>&1 && ! timeout 60 docker pull -q "$base_image" >"$logs/pull.log" 2>&1; then
    [ -z "${BASE_IMAGE:-}" ] || { say "BASE_IMAGE=$base_image is neither present nor pullable"; exit 1; }
    base_image="cyphal-servo-base:bookworm"
    if ! docker image inspect "$base_image" >/dev/null 2>&1; then
        if [ -n "${BASE_ROOTFS:-}" ]; then  # made by .ci/run while it installed: import it once it is done
            say "python:3.11-slim cannot be pulled: importing $base_image from $BASE_ROOTFS (debootstrap, started early)"
        else
            say "python:3.11-slim cannot be pulled: making $base_image locally (debootstrap)"
            if ! command -v debootstrap >/dev/null; then
                { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } \
                    >"$logs/apt-debootstrap.log" 2>&1 || { say "cannot install debootstrap"; exit 1; }
            fi
        fi
        (s=$SECONDS; make_base_image "$base_image" >"$logs/base-image.log" 2>&1; rc=$?
         echo "$((SECONDS - s))" >"$logs/base-image.secs"; exit $rc) &
        base_pid=$!
    fi
fi

# The wheels: every runtime dependency of the project, the build tools, yakut; from the host's pip (Python 3.11,
# the image's version). Without such a Python the build falls back to the package index.
py=${PYTHON:-}
for cand in .venv/bin/python python3.11 python3; do
    [ -n "$py" ] && break
    command -v "$cand" >/dev/null && "$cand" -c 'import sys, pip; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null && py=$cand
done
build_net=(--network none --build-arg PIP_NO_INDEX=1)
if [ -n "$py" ]; then
    "$py" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        >"$logs/requirements.txt"
    printf '%s\n' "build>=1.2" "setuptools>=77" "yakut>=0.14" >>"$logs/requirements.txt"
    if ! "$py" -m pip wheel -q -w "$wheelhouse" -r "$logs/requirements.txt" >"$logs/wheelhouse.log" 2>&1; then
        tail -20 "$logs/wheelhouse.log"; say "pip wheel failed"; exit 1
    fi
    stage wheelhouse $((SECONDS - t0))
else
    say "no Python 3.11 with pip on the host: the image build installs from the package index"
    build_net=(--network host)
fi
if [ -n "$base_pid" ]; then
    wait "$base_pid" || { tail -20 "$logs/base-image.log"; say "the local base image failed"; exit 1; }
    cat "$logs/base-image.log"
    stage "base image" "$(cat "$logs/base-image.secs")"
fi
say "base image $base_image"

# ------------------------------------------------------------------------------------------------ build
t0=$SECONDS
for target in runtime tester; do
    image=$servo_image; [ $target = tester ] && image=$tester_image
    if ! docker build "${build_net[@]}" --build-arg BASE_IMAGE="$base_image" --target "$target" -t "$image" . \
        >"$logs/build-$target.log" 2>&1; then
        tail -30 "$logs/build-$target.log"; say "docker build --target $target failed"; exit 1
    fi
done
stage build $((SECONDS - t0))

# ------------------------------------------------------------------------------------------------ up
t0=$SECONDS
if [ -z "${SERVO_SUBNET:-}" ]; then  # a /24 of the benchmarking test range that no route of this host uses
    for _ in $(seq 50); do
        cand="198.18.$((RANDOM % 256)).0/24"
        ip route show match "${cand%/*}" 2>/dev/null | grep -qv '^default' || { SERVO_SUBNET=$cand; break; }
    done
fi
if [ -n "${SERVO_SUBNET:-}" ]; then export SERVO_SUBNET; compose_files+=(-f docker/compose.subnet.yml); fi
export SERVO_IMAGE=$servo_image SERVO_TESTER_IMAGE=$tester_image
dc up -d --no-build >"$logs/up.log" 2>&1; up_rc=$?
unhealthy=""
for svc in drive1 drive2 drive3 servo1 servo2 servo3 servo4 drive4; do
    # The coordinator waited for axes 1-3; nothing waits for axis 4 (drive4 is healthy once servo4 brought it up).
    for _ in $(seq 120); do
        h=$(docker inspect -f '{{.State.Health.Status}}' "$(container $svc)" 2>/dev/null)
        [ "$h" = starting ] || break
        sleep 1
    done
    [ "$h" = healthy ] || unhealthy+=" $svc:${h:-missing}"
done
[ $up_rc -eq 0 ] && [ -z "$unhealthy" ]
verdict "stack up, every node healthy (heartbeat)" $? "subnet ${SERVO_SUBNET:-chosen by the engine}, \
CPU weight ${cpu_weight}${unhealthy:+; not healthy:$unhealthy}"
[ $up_rc -eq 0 ] || { tail -20 "$logs/up.log"; }
stage up $((SECONDS - t0))

# ------------------------------------------------------------------------------------------------ checks
t0=$SECONDS
coord=$(container coord)
coord_rc=$(timeout 180 docker wait "$coord" 2>/dev/null || echo timeout)
docker logs "$coord" >"$logs/coord.log" 2>&1
moves=$(grep -c "arrival spread" "$logs/coord.log")
[ "$coord_rc" = 0 ] && [ "$moves" -ge 1 ] && ! grep -q REJECTED "$logs/coord.log"
verdict "coordinator service: its move sequence" $? "exit $coord_rc, $moves moves ($(grep -o 'arrival spread [0-9.]* ms' "$logs/coord.log" | tr '\n' ' '))"

dc --profile test up -d --no-build tester >>"$logs/up.log" 2>&1
rt=()  # with the compose file's SCHED_FIFO (SERVO_RT_PRIORITY): the checks below the nodes, above the rest
[ "${SERVO_RT_PRIORITY:-0}" -gt 1 ] && rt=(chrt -f $((SERVO_RT_PRIORITY / 2)))
check() {  # check NAME ARGS...: a checks.py verdict from inside the network
    local out; out=$(timeout 180 "${compose[@]}" -p "$project" "${compose_files[@]}" exec -T tester "${rt[@]}" \
        python /opt/checks/checks.py "${@:2}" 2>&1); local rc=$?
    echo "$out" >>"$logs/checks.log"
    verdict "$1" $rc "$(echo "$out" | grep -E '^(PASS|FAIL) ' | tail -1 | cut -d' ' -f3-)"
}
acting_check() {  # acting_check NAME ACTION ARGS...: the check prints READY mid-move, then the host runs ACTION
    local name=$1 action=$2 out="$logs/check-$3.log"; shift 2
    timeout 180 "${compose[@]}" -p "$project" "${compose_files[@]}" exec -T tester "${rt[@]}" \
        python /opt/checks/checks.py "$@" >"$out" 2>&1 & local pid=$!
    # Until READY or the check's end (its own timeout bounds it): a check's start-up (docker exec, Python, its
    # node) took over 30 s beside two CPU hogs, and a fixed 30 s wait then skipped the action (ci36).
    while ! grep -q '^READY' "$out"; do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    grep -q '^READY' "$out" && eval "$action"
    wait $pid; local rc=$?
    cat "$out" >>"$logs/checks.log"
    verdict "$name" $rc "$(grep -E '^(PASS|FAIL) ' "$out" | tail -1 | cut -d' ' -f3-)"
}
check "every axis to its own target (yakut)" move 1.5,-1,2.5
check "coordinated move arrives together (servo-coord)" coordinated 4.5,-3,1.5
check "CiA 402 axis over CANopen to its target and back to rest (yakut)" cia402-move 3
acting_check "drive container killed: its servo reports drive lost and stops" \
    'docker kill "$(container drive2)" >/dev/null' drive-lost 2
stop_gracefully() {  # docker stop -t 20, except that a node still running then gets SIGABRT, not SIGKILL: its
    # Python (PYTHONFAULTHANDLER=1 in the image) prints every thread's stack to the log first
    docker kill -s TERM "$1" >/dev/null
    timeout 20 docker wait "$1" >/dev/null && return
    say "$1 still running 20 s after SIGTERM: SIGABRT for its stacks (in $logs/containers.log)"
    docker kill -s ABRT "$1" >/dev/null; timeout 10 docker wait "$1" >/dev/null || docker kill "$1" >/dev/null
}
stop_secs="" servo1=$(container servo1)
acting_check "docker stop of a servo mid-move: safe stop (drive side)" \
    's=$(date +%s%N); stop_gracefully "$servo1"; d=$((($(date +%s%N) - s) / 100000000)); stop_secs=$((d / 10)).$((d % 10))' \
    safe-stop 1
code=$(docker inspect -f '{{.State.ExitCode}}' "$servo1")
docker logs "$servo1" >"$logs/servo1.log" 2>&1
[ "$code" = 0 ] && grep -q "Safe stop done" "$logs/servo1.log" && grep -q "Servo node closed" "$logs/servo1.log"
verdict "docker stop of a servo: exit 0 after its safe stop (node side)" $? \
    "exit code $code after ${stop_secs:-?} s; $(grep -o 'Safe stop done.*' "$logs/servo1.log" | head -1)"
stops=()  # every node at once, as `compose stop` does (coord has exited), with stacks of any that hangs
for svc in servo2 servo3 drive1 drive3; do stop_gracefully "$(container $svc)" & stops+=($!); done
# servo4 lives in drive4's network namespace (their CAN bus): the servo first, as a controller is switched off
# before the drive it commands
{ stop_gracefully "$(container servo4)"; stop_gracefully "$(container drive4)"; } & stops+=($!)
wait "${stops[@]}"
dc --profile test stop -t 20 >>"$logs/down.log" 2>&1
codes="" bad=""
for svc in drive1 drive3 servo2 servo3 servo4 drive4; do
    c=$(docker inspect -f '{{.State.ExitCode}}' "$(container $svc)" 2>/dev/null); codes+=" $svc:$c"
    [ "$c" = 0 ] || bad+=" $svc:$c"
done
[ -z "$bad" ]
verdict "SIGTERM ends every other node with exit 0" $? "${codes# }"
stage checks $((SECONDS - t0))
