"""Backend ``udral``: a drive on the Cyphal bus speaking the UDRAL servo interface (:class:`UdralDrive`).

Its numba half is the shared bus link (:mod:`servo_node.drive._remote_link`); the generated UDRAL types are
imported only when a drive is built.
"""

from ._drive import UdralDrive as UdralDrive
