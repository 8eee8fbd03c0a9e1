"""``python -m servo_node.coord`` is the ``servo-coord`` command."""

import sys

from ._cmd import main

sys.exit(main())
