"""What the servo node and the simulated drive share: DSDL, transports, UDRAL message helpers, registers.

Both applications (``servo_node`` and ``sim_plant_node``) import from here; neither imports the other, and the
numerics (``sim_plant``, ``servo_node.otg``) never import this package::

    dsdl/             our uavcan / zubax / reg.udral definitions and their content-keyed compiled cache
    transport/        pycyphal transports from the uavcan.* registers, plus CAN over UDP multicast (udpmc)
    udral.py          UDRAL dynamics types by joint kind: build and read Planar/Linear(Ts) messages
    registers.py      validated registers: RegisterSpec tables and a registry that refuses bad writes
    joint_registers.py  the sim.* registers of a simulated joint, derived from sim_plant.JointParams

Nothing is imported or compiled here: ``transport``, ``udral``, ``registers`` and ``joint_registers`` need
generated DSDL types (``pycyphal.application`` imports the ``uavcan`` namespace), so an entry point calls
:func:`cyphal_common.dsdl.ensure_compiled` before importing them.
"""
