"""``python -m sim_plant_node``: the ``sim-plant`` command."""

import sys

from . import main

sys.exit(main())
