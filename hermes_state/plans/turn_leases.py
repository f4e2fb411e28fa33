"""Bodies of session turn leases: the lineage walk, take, refresh, release, and the wait."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from .. import statements
from ..errors import InvalidInputTypeError, SessionTurnLeaseLostError
from ..statements import Capabilities
from ..validation import require_identifier, require_seconds
from .core import MAX_LINEAGE_DEPTH, MIN_TURN_LEASE_SECONDS, Body, Step

logger = logging.getLogger("hermes_state")

#: A turn lease to give up or refresh: the session and the holder named when it was taken.
Turn = tuple[str, str]


def _conversation(session_id: str) -> Body[str]:
    """The lease key of ``session_id``: the root of its compression lineage (upstream's key)."""
    current, seen = session_id, {session_id}
    for _ in range(MAX_LINEAGE_DEPTH):
        parent = yield Step(statements.lineage_parent(), {"session_id": current})
        if not parent.rows or parent.rows[0]["id"] in seen:
            break
        current = parent.rows[0]["id"]
        seen.add(current)
    return current


def turn_fence(
    session_id: str, holder: object, ttl_seconds: object, now: float
) -> dict[str, Any] | None:
    """The parameters of a transcript write's fence on its turn lease (:func:`_hold_turn`),
    checked; None without a holder (None or empty, as upstream skips the fence then)."""
    ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("turn_lease_ttl_seconds", ttl_seconds))
    if holder is None or holder == "":
        return None
    return {
        "session_id": session_id,
        "lease_holder": require_identifier("turn_lease_holder", holder),
        "now": now,
        "lease_until": now + ttl,
    }


def _hold_turn(turn: Mapping[str, Any]) -> Body[None]:
    """The fence of a transcript write, run in its transaction before it writes: refuse it
    (:class:`SessionTurnLeaseLostError`) unless ``:lease_holder`` holds the conversation's
    lease. Expired but still its own (nobody took it over), the lease is revived until
    ``:lease_until``: an owner whose refresher starved keeps its turn, as upstream's does."""
    session_id = turn["session_id"]
    key = {"conversation": (yield from _conversation(session_id))}
    held = yield Step(statements.turn_lease_holder(), key)
    if not held.rows or held.rows[0]["holder"] != turn["lease_holder"]:
        raise SessionTurnLeaseLostError(
            f"Session turn lease lost; refusing transcript write for {session_id!r}"
        )
    if float(held.rows[0]["expires_at"]) <= turn["now"]:
        yield Step(statements.refresh_turn_lease(), {**turn, **key})


def _acquire_turn(caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    conversation = yield from _conversation(params["session_id"])
    return (yield from _take_turn(caps, conversation, params))


def _take_turn(caps: Capabilities, conversation: str, params: Mapping[str, Any]) -> Body[bool]:
    """Take ``conversation``'s lease for ``:lease_holder`` unless someone else holds it live:
    True when the holder holds it now."""
    key = {"conversation": conversation}
    yield Step(statements.expire_turn_lease(), {**key, "now": params["now"]})
    yield Step(statements.insert_turn_lease(caps.name), {**params, **key})
    holder = yield Step(statements.turn_lease_holder(), key)
    return bool(holder.rows) and holder.rows[0]["holder"] == params["lease_holder"]


def _refresh_turn(_caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    key = {"conversation": (yield from _conversation(params["session_id"]))}
    refreshed = yield Step(statements.refresh_turn_lease(), {**params, **key})
    return refreshed.rowcount > 0


def _release_turn(_caps: Capabilities, params: Mapping[str, Any]) -> Body[None]:
    key = {"conversation": (yield from _conversation(params["session_id"]))}
    yield Step(statements.release_turn_lease(), {**params, **key})


def _refresh_turns(
    caps: Capabilities, turns: list[Turn], params: Mapping[str, Any]
) -> Body[list[str]]:
    if caps.single_statement:
        arrays = {
            **params,
            "ids": [session_id for session_id, _holder in turns],
            "holders": [holder for _session_id, holder in turns],
        }
        outcome = yield Step(statements.refresh_turn_leases(), arrays)
        return sorted(row["id"] for row in outcome.rows)
    kept = []
    for session_id, holder in turns:
        turn = {**params, "session_id": session_id, "lease_holder": holder}
        if (yield from _refresh_turn(caps, turn)):
            kept.append(session_id)
    return sorted(kept)


def _release_turns(caps: Capabilities, turns: list[Turn]) -> Body[None]:
    if caps.single_statement:
        arrays = {
            "release_ids": [session_id for session_id, _holder in turns],
            "release_holders": [holder for _session_id, holder in turns],
        }
        yield Step(statements.release_turn_leases(), arrays)
        return
    for session_id, holder in turns:
        yield from _release_turn(caps, {"session_id": session_id, "lease_holder": holder})


def _live_turn(_caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    key = {"conversation": (yield from _conversation(params["session_id"])), "now": params["now"]}
    live = yield Step(statements.live_turn_lease(), key)
    return bool(live.rows)


#: What a lease wait yields to ask for one attempt (the driver sends back True when it took
#: the lease, False when another holder has it, None when the database was busy); any other
#: value it yields is a number of seconds to sleep.
ATTEMPT = None
#: After a busy database, the next attempt comes this soon (seconds, drawn at random).
BUSY_RETRY_SECONDS = (0.02, 0.15)


def _non_negative(name: str, value: object) -> float:
    seconds = require_seconds(name, value)
    return max(0.0, seconds)


def _callback(name: str, value: object) -> Callable[..., object] | None:
    if value is not None and not callable(value):
        raise InvalidInputTypeError(f"{name} must be callable or None, not {type(value).__name__}")
    return value


def _quietly(callback: Callable[..., object] | None, *args: Any) -> object:
    """Call a caller's callback; what it raises is logged, never raised into the wait."""
    if callback is None:
        return None
    try:
        return callback(*args)
    except Exception:
        logger.debug("a turn-lease wait callback raised", exc_info=True)
        return None


@dataclass(frozen=True, slots=True)
class LeaseWait:
    """The schedule of upstream's blocking ``acquire_session_turn_lease``, without I/O: the
    stores drive :meth:`run` (sleeping and attempting each their own way)."""

    wait_seconds: float
    poll_interval_seconds: float
    notice_interval: float
    notice_backoff: float
    notice_cap: float
    on_wait: Callable[..., object] | None
    should_abort: Callable[..., object] | None
    on_contended: Callable[..., object] | None

    @classmethod
    def configure(
        cls,
        *,
        wait_seconds: object,
        poll_interval_seconds: object,
        wait_notice_interval_seconds: object,
        wait_notice_backoff: object,
        wait_notice_max_interval_seconds: object,
        on_wait: object,
        should_abort: object,
        on_contended: object,
        acquire_patience_s: object,
    ) -> LeaseWait:
        _non_negative("acquire_patience_s", acquire_patience_s)  # checked; see the docstring
        return cls(
            wait_seconds=_non_negative("wait_seconds", wait_seconds),
            poll_interval_seconds=_non_negative("poll_interval_seconds", poll_interval_seconds),
            notice_interval=_non_negative(
                "wait_notice_interval_seconds", wait_notice_interval_seconds
            ),
            notice_backoff=_non_negative("wait_notice_backoff", wait_notice_backoff),
            notice_cap=_non_negative(
                "wait_notice_max_interval_seconds", wait_notice_max_interval_seconds
            ),
            on_wait=_callback("on_wait", on_wait),
            should_abort=_callback("should_abort", should_abort),
            on_contended=_callback("on_contended", on_contended),
        )

    def notice_gaps(self) -> Generator[float, None, None]:
        """The seconds between two ``on_wait`` notices: the interval (at most the cap, when
        there is one), then each gap ``backoff`` times the last, never above the cap."""
        interval, cap = self.notice_interval, self.notice_cap
        gap = min(interval, cap) if cap > 0 else interval
        while True:
            yield gap
            if self.notice_backoff > 1:
                gap = gap * self.notice_backoff
                if cap > 0:
                    gap = min(gap, cap)

    def run(
        self, clock: Callable[[], float] = time.monotonic
    ) -> Generator[float | None, bool | None, bool]:
        """Attempt until the lease is taken (True), the wait is over or ``should_abort()``
        says so (False). ``on_wait(elapsed)`` is told on the first miss and then at each
        notice gap; a busy database calls ``on_contended()`` instead and is retried soon."""
        deadline = clock() + self.wait_seconds
        gaps = self.notice_gaps()
        waiting_since: float | None = None
        next_notice = 0.0
        while True:
            if _quietly(self.should_abort):
                return False
            taken = yield ATTEMPT
            if taken:
                return True
            now = clock()
            if taken is None:  # busy: no holder to wait for, so no notice and no poll sleep
                _quietly(self.on_contended)
                yield random.uniform(*BUSY_RETRY_SECONDS)
                if clock() >= deadline:
                    return False
                continue
            remaining = deadline - now
            if remaining <= 0:
                return False
            if waiting_since is None:
                waiting_since = next_notice = now
            if now >= next_notice:
                _quietly(self.on_wait, max(0.0, now - waiting_since))
                next_notice = now if self.notice_interval <= 0 else next_notice + next(gaps)
            yield min(max(0.01, self.poll_interval_seconds), remaining)
