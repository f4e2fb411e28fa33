"""Sessions and handoff transitions as sans-IO plans, run alike by the sync and the async stores.

A plan is a generator: it yields a :class:`Step` (a statement from :mod:`hermes_state.statements`
and its parameters), receives the :class:`Outcome`, and finally returns the operation's result.
The stores own connections, transactions and retries and only *drive* plans, so every
transition's logic is written once, here. Inputs are validated when a plan is made, before any
connection is touched, so bad input never opens a transaction.
"""

from __future__ import annotations

from ..errors import UnknownSessionError
from .book import PlanBook
from .claims import ClaimBatch, delivery_holder
from .core import LEASE_RETRY_SECONDS as LEASE_RETRY_SECONDS
from .core import (
    MAX_BATCH,
    MIN_TURN_LEASE_SECONDS,
    STATS_FAILURE_WINDOW,
    STATS_TOP_ERRORS,
    STRANDED_ERROR,
    ClaimLedger,
    Outcome,
    Ownership,
    Plan,
    Step,
    lease_patience,
)
from .core import MAX_LINEAGE_DEPTH as MAX_LINEAGE_DEPTH
from .core import Body as Body
from .core import Row as Row
from .core import T as T
from .transitions import Claim as Claim
from .turn_leases import ATTEMPT, LeaseWait
from .turn_leases import Turn as Turn

__all__ = [
    "ATTEMPT",
    "MAX_BATCH",
    "MIN_TURN_LEASE_SECONDS",
    "STATS_FAILURE_WINDOW",
    "STATS_TOP_ERRORS",
    "STRANDED_ERROR",
    "ClaimBatch",
    "ClaimLedger",
    "LeaseWait",
    "Outcome",
    "Ownership",
    "Plan",
    "PlanBook",
    "Step",
    "UnknownSessionError",
    "delivery_holder",
    "lease_patience",
]
