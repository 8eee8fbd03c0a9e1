"""Mimic against latency: relation error at constant leader velocity, with and without latency compensation.

A leader ``servo-node`` moves at constant velocity; a relay (this process's node) forwards its ``dynamics`` and
``feedback`` after an added delay (0, 5, 10, 20 ms) to two followers, one with ``servo.mimic.compensation`` on and
one off. The error |follower − m·(leader − ref) − off| comes from the leader's original and the followers'
timestamped ``dynamics`` compared at equal times; m·v·L (L: the measured one-way latency of the relayed stream)
is what an uncompensated follower should show. Run inside a private network namespace::

    ip netns exec NS python bench/mimic.py
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cyphal_common import dsdl

LEADER, RELAY, COMP, PLAIN = 81, 82, 83, 84
SP, DYN, FB, DYN_R, FB_R, DYN_C, DYN_P = 3801, 3802, 3803, 3804, 3805, 3806, 3807
M, OFF, REF, V_L = 5.0, 0.3, 0.1, 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latencies", default="0,5,10,20", help="added one-way latencies [ms]")
    ap.add_argument("--window", type=float, default=2.0, help="measurement window per latency [s]")
    args = ap.parse_args()
    dsdl.ensure_compiled()
    from tests.mimic.recorder import Recorder
    from tests.procs import BIN, BusThread, base_env, popen, stop, wait_for

    class Relay(BusThread):
        """Forwards the leader's dynamics and feedback after ``delay`` seconds (message unchanged, stamp kept)."""

        def __init__(self) -> None:
            super().__init__("relay")
            self.delay = 0.0
            self._presentation = self._run(self._open())

        async def _open(self) -> Any:
            import pycyphal.presentation
            import zubax.physics.dynamics
            import zubax.service.actuator

            from cyphal_common.transport import make_transport

            pres = pycyphal.presentation.Presentation(
                make_transport({"uavcan.node.id": RELAY, "uavcan.udp.iface": "127.0.0.1"})
            )
            loop = asyncio.get_running_loop()
            routes = [
                (zubax.physics.dynamics.DoF3rdTs_1_0, DYN, DYN_R),
                (zubax.service.actuator.Feedback_1_0, FB, FB_R),
            ]
            for dtype, src, dst in routes:
                pub = pres.make_publisher(dtype, dst)

                async def forward(msg: Any, _meta: Any, pub: Any = pub) -> None:
                    if self.delay <= 0:
                        await pub.publish(msg)
                    else:
                        loop.call_later(self.delay, lambda: loop.create_task(pub.publish(msg)))

                pres.make_subscriber(dtype, src).receive_in_background(forward)
            return pres

    tmp = Path(tempfile.mkdtemp(prefix="mimic-bench-"))
    bus = {"UAVCAN__UDP__IFACE": "127.0.0.1"}
    rows = []
    with ExitStack() as stack:
        relay = Relay()
        stack.callback(relay.close)
        rec = Recorder(bus, [DYN, DYN_C, DYN_P, DYN_R], node_id=85)
        stack.callback(rec.close)
        env = base_env(**bus, UAVCAN__NODE__ID=str(LEADER), UAVCAN__SUB__SETPOINT_SERVO__ID=str(SP),
                       UAVCAN__PUB__DYNAMICS__ID=str(DYN), UAVCAN__PUB__FEEDBACK__ID=str(FB),
                       SERVO__DYNAMICS_RATE="200", SERVO__DEADMAN_TIMEOUT="1")
        procs = [stack.enter_context(popen([str(BIN / "servo-node"), "run", "--registry", str(tmp / "l.db")], env))]
        for node_id, dyn, comp in ((COMP, DYN_C, "1"), (PLAIN, DYN_P, "0")):
            env = base_env(**bus, UAVCAN__NODE__ID=str(node_id), UAVCAN__SUB__MIMIC_LEADER__ID=str(DYN_R),
                           UAVCAN__SUB__MIMIC_LEADER_FEEDBACK__ID=str(FB_R), UAVCAN__PUB__DYNAMICS__ID=str(dyn),
                           SERVO__DYNAMICS_RATE="500", SERVO__DEADMAN_TIMEOUT="1", SERVO__MIMIC__MULTIPLIER=str(M),
                           SERVO__MIMIC__OFFSET=str(OFF), SERVO__MIMIC__REFERENCE=str(REF),
                           SERVO__MIMIC__COMPENSATION=comp, SERVO__PROFILE__VELOCITY="-10 10",
                           SERVO__PROFILE__ACCELERATION="-40 40", SERVO__PROFILE__JERK="400")
            cmd = [str(BIN / "servo-node"), "run", "--registry", str(tmp / f"{node_id}.db")]
            procs.append(stack.enter_context(popen(cmd, env)))
        # The leader moves once both followers are up: they gear in from near the relation, not from far behind.
        try:
            wait_for(lambda: all(len(rec.series(i)) > 0 for i in (0, 1, 2)), 180, what="all three nodes up")
        except AssertionError:
            for p in procs:
                print(p.args, stop(p)[-3000:], file=sys.stderr)
            raise
        pub_env = {k: v for k, v in base_env(**bus).items() if not k.startswith(("SERVO__", "SIM__"))}
        pub_env["UAVCAN__NODE__ID"] = "86"
        stack.enter_context(popen([str(BIN / "y"), "pub", "-T", "0.05", f"{SP}:zubax.telega.ServoCommand",
                                   f"{{target: {{kinematics: {{position: .inf, velocity: {V_L}}}}}}}"], pub_env))
        try:
            def following() -> bool:
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a node exited")
                return all(abs(rec.latest(i)[2] - M * V_L) < 1e-3 for i in (1, 2))

            wait_for(following, 180, what="both following")
        except (AssertionError, RuntimeError):
            for p in procs:
                print(p.args, stop(p)[-3000:], file=sys.stderr)
            raise
        for ms in (float(x) for x in args.latencies.split(",")):
            relay.delay = ms * 1e-3
            time.sleep(1.0 + args.window)  # Settle after the change, then measure.
            lead = rec.series(0)
            relayed = rec.series(3)
            t_end = min(rec.latest(1)[0], rec.latest(2)[0], lead[-1, 0])
            lat = relayed[relayed[:, 0] > t_end - args.window]
            latency = float(np.median(lat[:, 4] - lat[:, 0]))
            errs = []
            for i in (1, 2):
                f = rec.series(i)
                f = f[(f[:, 0] > t_end - args.window) & (f[:, 0] <= t_end)]
                err = f[:, 1] - (M * (np.interp(f[:, 0], lead[:, 0], lead[:, 1]) - REF) + OFF)
                errs.append((float(np.median(np.abs(err))), float(np.percentile(np.abs(err), 95))))
            rows.append((ms, latency * 1e3, M * V_L * latency, *errs[0], *errs[1]))
            print(f"added {ms:g} ms done", file=sys.stderr)
    print(f"relation error at constant leader velocity (m {M:g}, v_L {V_L:g}), median / p95 over {args.window:g} s")
    print("| added latency | measured L | m·v·L | compensated | uncompensated |")
    print("|---|---|---|---|---|")
    for ms, lat_ms, mvl, c50, c95, p50, p95 in rows:
        print(f"| {ms:g} ms | {lat_ms:.2f} ms | {mvl:.2e} | {c50:.2e} / {c95:.2e} | {p50:.2e} / {p95:.2e} |")


if __name__ == "__main__":
    main()
