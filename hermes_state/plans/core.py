"""The plan and its parts: Step, Outcome, Plan, Ownership, the claim ledger, limits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Executable

from .. import statements
from ..errors import InvalidInputError
from ..statements import Capabilities
from ..validation import require_identifier, require_seconds

T = TypeVar("T")
Row = dict[str, Any]


#: The most rows one call may claim or finish at once.
MAX_BATCH = 10_000

#: ``handoff_stats`` reports failures of the last hour, with its most common errors.
STATS_FAILURE_WINDOW = 3600.0
STATS_TOP_ERRORS = 5

#: The error a reclaimed row gets: the delivery may or may not have happened, so say how to retry.
STRANDED_ERROR = (
    "The gateway stopped while delivering this handoff, so it may or may not have arrived. "
    "Run /handoff again to retry."
)


#: A turn lease lasts at least this long, whatever ``ttl_seconds`` asks (as upstream).
MIN_TURN_LEASE_SECONDS = 0.1
#: How far a lineage walk goes up before it stops (the statements' walk stops there too).
MAX_LINEAGE_DEPTH = statements.MAX_LINEAGE_DEPTH
#: Between two attempts of ``try_acquire_session_turn_lease(..., patience_s=...)``.
LEASE_RETRY_SECONDS = 0.05


def lease_patience(patience_s: float | None) -> Iterator[float]:
    """The pauses between attempts to take a held turn lease: none without patience, else
    every :data:`LEASE_RETRY_SECONDS` until ``patience_s`` seconds have passed."""
    if not patience_s:
        return
    deadline = time.monotonic() + require_seconds("patience_s", patience_s)
    while (remaining := deadline - time.monotonic()) > 0:
        yield min(LEASE_RETRY_SECONDS, remaining)


@dataclass(frozen=True, slots=True)
class Step:
    """One statement to execute with its bind parameters.

    ``wants_lastrowid`` asks for the driver's last inserted row id, for inserts on dialects
    without RETURNING (not every driver has the attribute, so it is read only on request).
    """

    statement: Executable
    params: Mapping[str, Any] = field(default_factory=dict)
    wants_lastrowid: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """What executing a step produced, already fetched, so plans never touch a cursor."""

    rowcount: int
    rows: list[Row]
    lastrowid: int | None = None


Body = Generator[Step, Outcome, T]


class Plan(Generic[T]):
    """A validated unit of work. ``start()`` runs it from the top, which is how retries work.

    The body receives the connected dialect's :class:`Capabilities` first, for the transitions
    whose statements differ per dialect. ``after`` turns the body's result into the caller's,
    and runs only once the transaction committed (it may record what the store now holds).
    """

    __slots__ = ("_after", "_args", "_body", "single_statement", "writes")

    def __init__(
        self,
        body: Callable[..., Body[Any]],
        *args: Any,
        writes: bool,
        after: Callable[[Any], T] | None = None,
        single_statement: bool = True,
    ) -> None:
        self._body = body
        self._args = args
        self._after = after
        self.writes = writes
        #: The body runs at most one statement where ``Capabilities.single_statement`` holds,
        #: so a runner may send it in autocommit: one round trip, no BEGIN or COMMIT. A body
        #: that needs several statements there must say False (the runner refuses a second).
        self.single_statement = single_statement

    def start(self, caps: Capabilities) -> Body[Any]:
        return self._body(caps, *self._args)

    def finish(self, result: Any) -> T:
        """The caller's result, from what the committed body returned."""
        return result if self._after is None else self._after(result)


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who a store claims for, and for how long a claim holds without renewal.

    A store without ownership acts as the only gateway of its database: it reclaims every
    running row and finishes any running row. With ownership, claims are stamped, fenced and
    leased (``lease_seconds`` None: stamped and fenced, never expiring).
    """

    owner: str
    lease_seconds: float | None = None

    @classmethod
    def configure(cls, owner: object, lease_seconds: object) -> Ownership | None:
        """Validated ownership from a store's ``owner``/``lease_seconds`` arguments."""
        if owner is None:
            if lease_seconds is not None:
                raise InvalidInputError("lease_seconds needs an owner: leases belong to someone")
            return None
        lease = None if lease_seconds is None else require_seconds("lease_seconds", lease_seconds)
        if lease is not None and lease <= 0:
            raise InvalidInputError(f"lease_seconds must be positive, not {lease_seconds!r}")
        return cls(require_identifier("owner", owner), lease)

    def lease_until(self, now: float) -> float | None:
        return None if self.lease_seconds is None else now + self.lease_seconds


class ClaimLedger:
    """The attempt number of every row this store claimed and has not finished yet.

    Finishing a row is fenced on it: a gateway whose claim was rescued and handed to another
    attempt gets ``False`` instead of overwriting the newer attempt's outcome.
    """

    def __init__(self) -> None:
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, session_id: str, attempt: int | None) -> bool:
        if attempt is None:
            return False
        with self._lock:
            self._attempts[session_id] = attempt
        return True

    def record_claimed(self, rows: list[Row]) -> list[Row]:
        """Record every row of a claimed batch (its ``id`` and ``handoff_attempt``)."""
        attempts = {row["id"]: int(row["handoff_attempt"]) for row in rows}
        with self._lock:
            self._attempts.update(attempts)
        return rows

    def fence(
        self, session_id: str, ownership: Ownership | None
    ) -> tuple[statements.Fence, dict[str, Any]]:
        if ownership is None:
            return statements.Fence.NONE, {}
        with self._lock:
            attempt = self._attempts.get(session_id)
        if attempt is None:
            return statements.Fence.OWNER, {"owner": ownership.owner}
        return statements.Fence.CLAIM, {"owner": ownership.owner, "attempt": attempt}

    def forget(self, session_id: str, finished: bool) -> bool:
        """After a finish: a finished claim is over; a refused one stays fenced on its attempt,
        so a later complete/fail of the same lost claim cannot hit a newer attempt."""
        if finished:
            with self._lock:
                self._attempts.pop(session_id, None)
        return finished

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._attempts)
