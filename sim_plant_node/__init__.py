"""``sim-plant``: one simulated joint as its own Cyphal node, a drive speaking the UDRAL servo interface.

Lets the servo node (or yakut) drive a Webots-semantics joint over a real bus instead of hardware. Node name
``io.github.cyphal_servo.sim_plant``; heartbeat, GetInfo and the register services as pycyphal provides; the
heartbeat mode is INITIALIZATION while the numba kernels compile/load, then OPERATIONAL (said at once).

Ports (UDRAL service ``servo``; each is configured by its ``uavcan.{pub,sub}.<name>.id`` register, e.g. env
``UAVCAN__SUB__SERVO__SETPOINT__ID=1200``; an unset port, ID 65535, is simply off):

=====================  ====  ===================================================================================
``servo.setpoint``     sub   ``reg.udral.physics.dynamics.rotation.Planar.0.1`` (``sim.kind`` rotational) or
                             ``…translation.Linear.0.1`` (linear); interpreted as below.
``servo.readiness``    sub   ``reg.udral.service.common.Readiness.0.1``; only ENGAGED applies setpoints.
``servo.dynamics``     pub   ``…rotation.PlanarTs.0.1`` / ``…translation.LinearTs.0.1`` at ``sim.publish_rate``:
                             position, velocity, acceleration and the motor's torque/force; the timestamp is the
                             host's monotonic clock in µs (shared by every process on the host).
``servo.feedback``     pub   ``reg.udral.service.actuator.common.Feedback.0.1`` at ``sim.publish_rate``: effective
                             readiness and health; demand_factor_pct = |motor force| / available motor force in
                             percent, negative while the force opposes the motion.
``servo.status``       pub   ``reg.udral.service.actuator.common.Status.0.1`` at 1 Hz: temperatures NaN (not
                             simulated), error_count = rejected setpoints since the last transition to ENGAGED.
=====================  ====  ===================================================================================

Semantics. The joint is *engaged* while the latest readiness is ENGAGED and both a readiness message and a
setpoint arrived within ``CONTROL_TIMEOUT_S`` (1 s); otherwise it is passive: the motor is off (Webots
``set_force(0)``), the joint coasts under spring, damper and static friction. Without a readiness port the
joint is never engaged. Leaving ENGAGED:

* by readiness (the controller publishes STANDBY/SLEEP): passive at once, the controller's decision;
* by the control timeout (the controller is gone: killed, stopped, cut off): a *quick stop* first, as a real
  drive's CiA 402 quick stop on a communication loss. The motor, at full ``max_force``, drives the joint's velocity
  controller along a ramp from the velocity at that moment to 0 at ``sim.quick_stop_deceleration`` (a constant-
  deceleration ramp, the joint's own ``sim.acceleration`` limit lifted meanwhile), then goes passive once the
  ramp has ended and |v| ≤ 1e-3, or at the latest after |v₀| / min(deceleration, max_force / inertia) + 0.5 s (a
  load stronger than the motor must not keep it powered). Meanwhile the feedback reports STANDBY and the health
  is ADVISORY. ENGAGED readiness with a valid setpoint ends the quick stop and applies that setpoint.

Setpoint fields set to NaN are unset:

* position finite → position control ``set_position(p)``, ``set_velocity(|v|)`` (NaN: ``max_velocity``);
* position NaN, velocity finite → velocity control ``set_position(+inf)``, ``set_velocity(v)`` (signed);
* in both, a finite torque/force is the motor force limit ``set_motor_force(min(|f|, max_force))`` (NaN: max_force);
* only torque/force finite → force control ``set_force(f)`` (clipped to ±``max_force``);
* everything NaN → no change (but it counts as a setpoint for the control timeout);
* any infinite field → the setpoint is rejected: counted, health ADVISORY for 1 s, and it does not count for the
  control timeout (a controller sending only garbage is a silent one).

A position setpoint is followed the Webots way: ``Vc = P·(Pt − q)`` (``sim.control_p``) clipped to the velocity
limit, so a target streamed along a moving trajectory is followed with a lag of v/P (1 rad at 10 rad/s with the
default P = 10) — no velocity feed-forward, as UDRAL gives a position setpoint none (the velocity field is a
limit). The servo node therefore commands this drive by velocity (or torque) and compensates the bus delay itself;
``bench/drive_side.py`` measures why even a drive-side interpolating position loop would not track better through
UDRAL (``docs/transports.md``, "Over the bus").

The acceleration field is ignored (the joint's acceleration limit is the ``sim.acceleration`` register). On
engaging, the latest valid setpoint is applied; if there was none the joint stays passive until one arrives.

Registers (all persisted in the register file; environment form ``SIM__MAX_FORCE=20`` etc., read at startup):
the joint's ``sim.*`` registers of :mod:`cyphal_common.joint_registers` (the same table the servo node's
embedded joint uses: ``sim.kind``, ``sim.inertia``, ``sim.max_velocity``, ``sim.max_force``, ``sim.control_p``,
``sim.acceleration``, ``sim.position``, ``sim.min_position``/``sim.max_position``, ``sim.min_stop``/
``sim.max_stop``, ``sim.spring_constant``, ``sim.damping_constant``, ``sim.static_friction``) plus

========================  =========  =============================================================================
``sim.step_rate``         real64     Physics stepping rate [Hz], > 0. Default 1000.
``sim.publish_rate``      real64     Rate of ``servo.dynamics`` and ``servo.feedback`` [Hz], > 0. Default 100.
``sim.quick_stop_``       real64     Deceleration of the quick stop on a control timeout [rad/s² or m/s²], > 0.
``deceleration``                     Default 50. The motor's force may allow less: max_force / inertia.
========================  =========  =============================================================================

Invalid values stop the node at startup with an error naming the register (exit status 2); a write that breaks
a register's constraint is refused (the old value stays).

Stepping: a dedicated thread (:class:`sim_plant_node._plant.Plant`) wakes at absolute deadlines of
``sim.step_rate`` and steps the joint by the *measured* monotonic time since its previous step, so simulated time
equals wall time however late the wake-up (the kernel sub-steps internally and releases the GIL); a lock guards
the joint. The asyncio side only issues commands and samples.

``sim-plant --arm`` serves the coupled 3-DOF arm instead (:mod:`sim_plant_node._arm_app`): three such drives on
one node, ports ``base.setpoint``, ``shoulder.setpoint``, ``elbow.setpoint`` etc., one coupled plant
(:mod:`sim_plant.arm_motors`) stepped by ``_arm_plant``. ``sim-plant arm-step`` is an offline figure
(:mod:`sim_plant_node._arm_step`).

Modules: ``_plant`` (setpoint interpretation and the stepping thread; no pycyphal), ``_app`` (registers, ports,
:func:`~sim_plant_node._app.run`), ``_main`` (the command line: compiles the DSDL, then imports ``_app``). The
numerics are :mod:`sim_plant`; the Cyphal plumbing shared with the servo node is :mod:`cyphal_common`.
"""

from ._main import main as main

