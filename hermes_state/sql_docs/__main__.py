"""``python -m hermes_state.sql_docs``: rewrite docs/sql/, or with ``--check`` say what is stale."""

import sys

from hermes_state.sql_docs import main

sys.exit(main())
