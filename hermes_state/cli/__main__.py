"""``python -m hermes_state.cli``: the ``hermes-state`` command line."""

import sys

from hermes_state.cli import main

sys.exit(main())
