"""``python -m hermes_state``: the ``hermes-state`` command line."""

import sys

from hermes_state.cli import main

sys.exit(main())
