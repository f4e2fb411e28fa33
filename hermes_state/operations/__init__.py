"""The store's operations, generated from the one declaration of the surface
(:class:`hermes_state.surface.Store`) by ``python tools/generate_operations.py``: do not edit
its modules; change the declaration and run that command (a test fails while they are stale).

``SyncOperations`` (``sync``) and ``AsyncOperations`` (``awaited``) run each operation's plan
(``PlanBook`` builds it) through the store's own ``_run``; ``AsyncStore`` (``protocol``) is the
asyncio Protocol.
"""

from .awaited import AsyncOperations
from .protocol import AsyncStore
from .sync import SyncOperations

__all__ = ["AsyncOperations", "AsyncStore", "SyncOperations"]
