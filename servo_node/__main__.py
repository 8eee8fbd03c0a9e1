"""``python -m servo_node`` is the ``servo-node`` command."""

import sys

from .cli import main

sys.exit(main())
