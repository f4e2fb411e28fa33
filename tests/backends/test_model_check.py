"""Model check: random histories of handoff operations never make the database diverge.

A hypothesis state machine drives request / retry / claim / complete / fail (with and without
``only_states``) / renew / reclaim (stale, expired, all) / clock advances / gateway restarts over
a few sessions and several stores that share one injected clock: owner stores with leases of
different lengths, two stores of the *same* owner (a gateway and its next life, each with its
own claim ledger), an owner without leases, and one store without an owner. A plain-Python
model of the state machine predicts every return value; after every step the database must
equal the model: ``get_handoff_state`` of every id, the owner / attempt / lease / time columns,
the pending listing, and the audit trail (one event per successful transition, with its
from/to states, time, actor, attempt and detail).

A second machine (``RaceMachine``) lets two or three of those stores act on one row at the same
moment, from threads released together: the answers and the database must match the model
applied in some order of those calls.

SQLite, PostgreSQL and MariaDB each get one fresh database per test; examples reuse it, emptying
the tables first.
The default run is small. The long run is opt-in:

    pytest -m slow tests/backends/test_model_check.py
"""

from __future__ import annotations

import copy
import itertools
import threading
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.plans import STRANDED_ERROR
from tests.conftest import database_at_head, empty_tables
from tests.support.digest import sync_url
from tests.support.stores import HandClock

START = 1_000_000.0
INITIAL = ("s0", "s1")
LATE = "late"  # created by a rule, so requests on it are refused until then
GHOST = "ghost"  # never exists
ALL_IDS = (*INITIAL, LATE, GHOST)
ERROR_LIMIT = 500
RACE_WAIT = 60.0  # seconds; a safety net against a hung racing call, never a synchronisation tool

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"


@dataclass(frozen=True)
class Gateway:
    """How one of the machine's stores is configured."""

    name: str
    owner: str | None
    lease: float | None

    @property
    def actor(self) -> str:
        return self.owner or "api"


GATEWAYS = (
    Gateway("a", "gw-a", 10.0),
    Gateway("a-next-life", "gw-a", 10.0),  # same owner, its own (empty) claim ledger
    Gateway("b", "gw-b", 4.0),
    Gateway("c", "gw-c", None),  # an owner without leases: stamped and fenced, never expiring
    Gateway("solo", None, None),  # no owner: the only gateway of its database
)
OWNED = tuple(gateway for gateway in GATEWAYS if gateway.owner is not None)

ERRORS = (
    "delivery failed: 403",
    "x" * (ERROR_LIMIT + 137),  # stored truncated
    "ünïcödé 🚀 '; DROP TABLE sessions; --",
    "nul \x00 byte",  # stored with U+FFFD instead of the NUL
    "",
)
PLATFORMS = ("telegram", "discord", "ünï-chat")


def clean(error: str) -> str:
    return error[:ERROR_LIMIT].replace("\x00", "\ufffd")


@dataclass
class Row:
    """The model of one session's handoff columns."""

    started_at: float
    state: str | None = None
    platform: str | None = None
    error: str | None = None
    owner: str | None = None
    attempt: int = 0
    lease: float | None = None
    requested_at: float | None = None
    claimed_at: float | None = None
    finished_at: float | None = None

    def public(self) -> dict[str, Any]:
        return {"state": self.state, "platform": self.platform, "error": self.error}

    def columns(self) -> dict[str, Any]:
        return {
            "handoff_state": self.state,
            "handoff_platform": self.platform,
            "handoff_error": self.error,
            "handoff_owner": self.owner,
            "handoff_attempt": self.attempt,
            "handoff_lease_expires_at": self.lease,
            "handoff_requested_at": self.requested_at,
            "handoff_claimed_at": self.claimed_at,
            "handoff_finished_at": self.finished_at,
            "started_at": self.started_at,
        }


SELECT_SESSIONS = text(
    "SELECT id, handoff_state, handoff_platform, handoff_error, handoff_owner, handoff_attempt, "
    "handoff_lease_expires_at, handoff_requested_at, handoff_claimed_at, handoff_finished_at, "
    "started_at FROM sessions"
)
SELECT_EVENTS = text(
    "SELECT session_id, from_state, to_state, at, actor, attempt, detail "
    "FROM handoff_events ORDER BY id"
)
Event = tuple[str, str | None, str, float, str | None, int | None, str | None]


class Model(RuleBasedStateMachine):
    """Drives real stores and the model side by side; set ``url`` and ``checker`` first."""

    url: ClassVar[URL]
    checker: ClassVar[Engine]
    # The first failure of a run, as it happened: a race cannot be replayed (its interleaving
    # is the threads'), so hypothesis may end up reporting only that its replay went otherwise.
    failures: ClassVar[list[str]]

    def __init__(self) -> None:
        super().__init__()
        empty_tables(self.checker)
        self.clock = HandClock(START)  # every store of one example reads it; only rules move it
        self.stores: dict[str, SessionDB] = {}
        self.ledgers: dict[str, dict[str, int]] = {}
        for gateway in GATEWAYS:
            self._open(gateway)
        self.rows: dict[str, Row] = {}
        self.events: list[Event] = []
        for index, session_id in enumerate(INITIAL):
            started = START + index
            assert self.db(GATEWAYS[-1]).create_session(session_id, "cli", started_at=started)
            self.rows[session_id] = Row(started_at=started)

    def _open(self, gateway: Gateway) -> None:
        self.stores[gateway.name] = SessionDB(
            url=self.url, clock=self.clock, owner=gateway.owner, lease_seconds=gateway.lease
        )
        self.ledgers[gateway.name] = {}  # the model of the store's claim ledger

    def teardown(self) -> None:
        for store in self.stores.values():
            store.close()

    def db(self, gateway: Gateway) -> SessionDB:
        return self.stores[gateway.name]

    @property
    def now(self) -> float:
        return self.clock.now

    def record(
        self, gateway: Gateway, session_id: str, to_state: str, detail: str | None = None
    ) -> None:
        """The audit event of a transition, taken before the model row changes state."""
        row = self.rows[session_id]
        event = (session_id, row.state, to_state, self.now, gateway.actor, row.attempt, detail)
        self.events.append(event)

    def fenced_ok(self, gateway: Gateway, session_id: str) -> bool:
        """May ``gateway`` finish this running row? (Fence NONE, OWNER or CLAIM.)"""
        row = self.rows[session_id]
        if gateway.owner is None:
            return True
        claimed = self.ledgers[gateway.name].get(session_id)
        return row.owner == gateway.owner and (claimed is None or claimed == row.attempt)

    def finish(self, row: Row, state: str, error: str | None) -> None:
        row.state = state
        row.error = error
        row.finished_at = self.now
        row.lease = None

    # -- the model takes an answer: it must be the one expected, then the model moves --

    def apply_request(self, gateway: Gateway, session_id: str, platform: str, got: bool) -> None:
        row = self.rows.get(session_id)
        expected = row is not None and row.state in (None, COMPLETED, FAILED)
        assert got is expected
        if row is None or not expected:
            return
        self.record(gateway, session_id, PENDING, f"requested for {platform}")
        row.state, row.platform, row.error = PENDING, platform, None
        row.requested_at, row.claimed_at, row.finished_at = self.now, None, None
        row.owner, row.lease = None, None

    def apply_claim(
        self, gateway: Gateway, session_id: str, got: bool, *, may_skip: bool = False
    ) -> None:
        row = self.rows.get(session_id)
        expected = row is not None and row.state == PENDING
        if may_skip and expected and got is False:
            return  # skipped a row another transaction held (SKIP LOCKED): nothing changed
        assert got is expected
        if row is None or not expected:
            return
        row.attempt += 1  # the claim event carries the new attempt
        self.record(gateway, session_id, RUNNING)
        row.state, row.owner, row.claimed_at = RUNNING, gateway.owner, self.now
        leased = gateway.owner is not None and gateway.lease is not None
        row.lease = self.now + gateway.lease if leased and gateway.lease is not None else None
        if gateway.owner is not None:
            self.ledgers[gateway.name][session_id] = row.attempt

    def apply_complete(self, gateway: Gateway, session_id: str, got: bool) -> None:
        row = self.rows.get(session_id)
        expected = row is not None and row.state == RUNNING and self.fenced_ok(gateway, session_id)
        assert got is expected
        if row is None or not expected:
            return  # a refused finish keeps the store's claim fenced on its attempt
        self.ledgers[gateway.name].pop(session_id, None)  # a finished claim is over
        self.record(gateway, session_id, COMPLETED)
        self.finish(row, COMPLETED, None)

    def apply_fail(
        self,
        gateway: Gateway,
        session_id: str,
        error: str,
        only_states: tuple[str, ...] | None,
        result: bool,
    ) -> None:
        row = self.rows.get(session_id)
        allowed = only_states or (PENDING, RUNNING)
        expected = row is not None and (
            (row.state == PENDING and PENDING in allowed)
            or (row.state == RUNNING and RUNNING in allowed and self.fenced_ok(gateway, session_id))
        )
        assert result is expected
        if row is None or not expected:
            return
        self.ledgers[gateway.name].pop(session_id, None)
        self.record(gateway, session_id, FAILED, clean(error))
        self.finish(row, FAILED, clean(error))

    def reclaim_call(self, gateway: Gateway, scope: str) -> Callable[[str], list[str]]:
        db = self.db(gateway)
        return {
            "stale": db.reclaim_stale_running_handoffs,
            "expired": db.reclaim_expired_handoffs,
            "all": db.reclaim_running_handoffs,
        }[scope]

    def apply_reclaim(self, gateway: Gateway, scope: str, error: str, got: list[str]) -> None:
        def takes(row: Row) -> bool:
            if row.state != RUNNING:
                return False
            expired = row.lease is not None and row.lease < self.now
            if scope == "all":
                return True
            if scope == "expired":
                return expired
            mine = gateway.owner is not None and row.owner == gateway.owner
            return row.lease is None or expired or mine

        expected = sorted(session_id for session_id, row in self.rows.items() if takes(row))
        assert got == expected
        for session_id in expected:  # claim ledgers are left alone: their fences now fail
            self.record(gateway, session_id, FAILED, clean(error))
            self.finish(self.rows[session_id], FAILED, clean(error))

    # -- the database equals the model -----------------------------------------------------

    @invariant()
    def database_matches_model(self) -> None:
        reader = self.db(GATEWAYS[0])
        for session_id in ALL_IDS:
            row = self.rows.get(session_id)
            expected = None if row is None else row.public()
            assert reader.get_handoff_state(session_id) == expected, session_id

        with self.checker.connect() as connection:
            stored = {
                values.pop("id"): values
                for values in (dict(r._mapping) for r in connection.execute(SELECT_SESSIONS))
            }
            events: list[Event] = [tuple(r) for r in connection.execute(SELECT_EVENTS)]  # type: ignore[misc]
        assert stored == {session_id: row.columns() for session_id, row in self.rows.items()}

        # One event per successful transition. The events of one multi-row reclaim may be
        # written in any order, so the trail is compared session by session.
        assert len(events) == len(self.events)
        assert by_session(events) == by_session(self.events)

        pending = sorted(
            (row.started_at, session_id)
            for session_id, row in self.rows.items()
            if row.state == PENDING
        )
        assert [row["id"] for row in reader.list_pending_handoffs()] == [i for _, i in pending]
        assert reader.has_pending_handoffs() is bool(pending)


class HandoffMachine(Model):
    """One store acts at a time; choices lean on the model to line up the steps that
    matter."""

    # -- choosing what to act on ------------------------------------------------------------
    #
    # Uniform choices rarely line up the few steps that matter (a claim of a pending row, then
    # a finish by a store of the same owner...). So a rule runs only when some session is in a
    # state it can move (preconditions), and three times in four it picks such a session, and
    # a store that may finish it; the other times any id, for the refusals.

    def any_in(self, *states: str | None) -> bool:
        return any(row.state in states for row in self.rows.values())

    def pick_session(self, data: st.DataObject, *useful_states: str | None) -> str:
        useful = sorted(sid for sid, row in self.rows.items() if row.state in useful_states)
        if useful and data.draw(st.integers(0, 3), label="prefer a useful session"):
            return data.draw(st.sampled_from(useful), label="session_id")
        return data.draw(st.sampled_from(ALL_IDS), label="session_id")

    def pick_gateway(self, data: st.DataObject, session_id: str | None = None) -> Gateway:
        row = self.rows.get(session_id) if session_id is not None else None
        if row is not None and row.state == RUNNING:
            holders = [g for g in GATEWAYS if g.owner is None or g.owner == row.owner]
            if data.draw(st.integers(0, 3), label="prefer a holder"):
                return data.draw(st.sampled_from(holders), label="gateway")
        return data.draw(st.sampled_from(GATEWAYS), label="gateway")

    def pick_finish(self, data: st.DataObject) -> tuple[str, Gateway]:
        """What complete/fail act on: half the time a claim some store remembers (live, or
        stale after a reclaim: the fencing cases), else a running row and one of its holders."""
        remembered = sorted(
            (gateway.name, session_id)
            for gateway in GATEWAYS
            for session_id in self.ledgers[gateway.name]
        )
        if remembered and data.draw(st.booleans(), label="a remembered claim"):
            name, session_id = data.draw(st.sampled_from(remembered), label="claim")
            return session_id, next(g for g in GATEWAYS if g.name == name)
        session_id = self.pick_session(data, PENDING, RUNNING)
        return session_id, self.pick_gateway(data, session_id)

    def can_finish(self) -> bool:
        return self.any_in(PENDING, RUNNING) or any(self.ledgers.values())

    # -- sessions --------------------------------------------------------------------------

    @precondition(lambda self: LATE not in self.rows)
    @rule(gateway=st.sampled_from(GATEWAYS))
    def create_late_session(self, gateway: Gateway) -> None:
        # A second create keeps the first row's values (started_at included).
        assert self.db(gateway).create_session(LATE, "cli", started_at=self.now) == LATE
        self.rows.setdefault(LATE, Row(started_at=self.now))

    # -- transitions -----------------------------------------------------------------------

    @precondition(lambda self: self.any_in(None, COMPLETED, FAILED))
    @rule(data=st.data(), platform=st.sampled_from(PLATFORMS))
    def request(self, data: st.DataObject, platform: str) -> None:
        session_id = self.pick_session(data, None, COMPLETED, FAILED)
        gateway = self.pick_gateway(data)
        self.apply_request(
            gateway, session_id, platform, self.db(gateway).request_handoff(session_id, platform)
        )

    @precondition(lambda self: self.any_in(FAILED))
    @rule(data=st.data(), platform=st.none() | st.sampled_from(PLATFORMS))
    def retry(self, data: st.DataObject, platform: str | None) -> None:
        session_id = self.pick_session(data, FAILED)
        gateway = self.pick_gateway(data)
        row = self.rows.get(session_id)
        expected = row is not None and row.state == FAILED
        assert self.db(gateway).retry_handoff(session_id, platform) is expected
        if row is None or not expected:
            return
        platform = platform if platform is not None else row.platform
        self.record(gateway, session_id, PENDING, f"retry for {platform}")
        row.state, row.platform, row.error = PENDING, platform, None
        row.requested_at, row.claimed_at, row.finished_at = self.now, None, None
        row.owner, row.lease = None, None

    @precondition(lambda self: self.any_in(PENDING))
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        session_id = self.pick_session(data, PENDING)
        gateway = self.pick_gateway(data)
        self.apply_claim(gateway, session_id, self.db(gateway).claim_handoff(session_id))

    @precondition(lambda self: self.can_finish())
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        session_id, gateway = self.pick_finish(data)
        self.apply_complete(gateway, session_id, self.db(gateway).complete_handoff(session_id))

    @precondition(lambda self: self.can_finish())
    @rule(
        data=st.data(),
        error=st.sampled_from(ERRORS),
        only_states=st.sampled_from([None, (PENDING,), (RUNNING,), (PENDING, RUNNING)]),
    )
    def fail(self, data: st.DataObject, error: str, only_states: tuple[str, ...] | None) -> None:
        session_id, gateway = self.pick_finish(data)
        result = self.db(gateway).fail_handoff(session_id, error, only_states=only_states)
        self.apply_fail(gateway, session_id, error, only_states, result)

    @precondition(lambda self: self.any_in(RUNNING))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        running = sorted(sid for sid, row in self.rows.items() if row.state == RUNNING)
        holders = [g for g in GATEWAYS if any(self.rows[s].owner == g.owner for s in running)]
        if holders and data.draw(st.integers(0, 3), label="prefer a holder"):
            gateway = data.draw(st.sampled_from(holders), label="gateway")
        else:
            gateway = data.draw(st.sampled_from(GATEWAYS), label="gateway")
        anything = st.sampled_from(ALL_IDS)
        choices = st.sampled_from(running) | anything if running else anything
        session_ids = data.draw(st.lists(choices, max_size=4), label="session_ids")
        wanted = sorted(set(session_ids))  # renewed in id order, each once
        expected: list[str] = []
        if gateway.owner is not None and gateway.lease is not None:
            for session_id in wanted:
                row = self.rows.get(session_id)
                if row is not None and row.state == RUNNING and row.owner == gateway.owner:
                    expected.append(session_id)
        assert self.db(gateway).renew_handoff_leases(session_ids) == expected
        for session_id in expected:  # a lease, not a transition: no event
            assert gateway.lease is not None
            self.rows[session_id].lease = self.now + gateway.lease

    @precondition(lambda self: self.any_in(RUNNING))
    @rule(
        gateway=st.sampled_from(GATEWAYS),
        scope=st.sampled_from(["stale", "expired", "all"]),
        error=st.sampled_from((STRANDED_ERROR, *ERRORS)),
    )
    def reclaim(self, gateway: Gateway, scope: str, error: str) -> None:
        self.apply_reclaim(gateway, scope, error, self.reclaim_call(gateway, scope)(error))

    # -- time and restarts -----------------------------------------------------------------

    @precondition(lambda self: any(row.lease is not None for row in self.rows.values()))
    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 4.0, 6.0, 10.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.now += seconds

    @precondition(lambda self: any(row.lease is not None for row in self.rows.values()))
    @rule(data=st.data(), past=st.sampled_from([0.0, 0.5, -0.5]))
    def advance_to_a_lease_end(self, data: st.DataObject, past: float) -> None:
        """To the very end of a lease (still live: expiry is strictly after it) or just past."""
        ends = sorted({row.lease for row in self.rows.values() if row.lease is not None})
        target = data.draw(st.sampled_from(ends), label="lease end") + past
        self.clock.now = max(self.now, target)

    @precondition(lambda self: any(self.ledgers.values()))
    @rule(gateway=st.sampled_from(OWNED))
    def restart(self, gateway: Gateway) -> None:
        """The gateway's process starts again: same owner, nothing remembered of its claims."""
        self.stores.pop(gateway.name).close()
        self._open(gateway)


@dataclass(frozen=True)
class Op:
    """One store's call in a race, and how the model takes its answer."""

    label: str
    call: Callable[[], Any]
    apply: Callable[[Any], None]


def run_together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread, all released at once; their answers, in order."""
    start = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            start.wait(RACE_WAIT)
            answers[index] = calls[index]()
        except BaseException as exc:
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_WAIT)
    assert not any(thread.is_alive() for thread in threads), "a racing call hung"
    if errors:
        raise errors[0]
    return answers


class RaceMachine(Model):
    """Two or three stores act on one row at the same moment, each in its own thread, released
    together by a barrier. Whatever order the database serialised them in, the answers and
    the database must be those of the model applied in *some* order: each order is tried on
    a copy of the model until one explains every answer and the database as it now is.

    Its draws never read the model: which order won is up to the threads, so the model differs
    from one run of the same draws to the next, and hypothesis needs the same draws to make
    the same choices.

    A claim skips a row another transaction has locked (SKIP LOCKED) and answers False. On
    MariaDB, InnoDB briefly locks a row a transition only examines, even one it then refuses
    (a request of a pending row, a completion of one), so there a claim that loses to nobody
    is one more outcome the model accepts: the row stays pending for the watcher's next tick.
    PostgreSQL locks only the rows a condition selects, and SQLite queues writers, so on
    those a claim of a pending row in a race must win unless some order explains the loss.
    """

    @property
    def skips_refused_rows(self) -> bool:
        return self.url.get_backend_name() == "mysql"

    def draw_op(self, data: st.DataObject, session_id: str, gateway: Gateway) -> Op:
        kind = data.draw(
            st.sampled_from(["request", "claim", "complete", "fail", "reclaim"]), label="op"
        )
        db = self.db(gateway)
        if kind == "request":
            platform = data.draw(st.sampled_from(PLATFORMS), label="platform")
            return Op(
                f"{gateway.name} requests {session_id} for {platform}",
                lambda: db.request_handoff(session_id, platform),
                lambda got: self.apply_request(gateway, session_id, platform, got),
            )
        if kind == "claim":
            return Op(
                f"{gateway.name} claims {session_id}",
                lambda: db.claim_handoff(session_id),
                lambda got: self.apply_claim(
                    gateway, session_id, got, may_skip=self.skips_refused_rows
                ),
            )
        if kind == "complete":
            return Op(
                f"{gateway.name} completes {session_id}",
                lambda: db.complete_handoff(session_id),
                lambda got: self.apply_complete(gateway, session_id, got),
            )
        if kind == "fail":
            error = data.draw(st.sampled_from(ERRORS), label="error")
            only = data.draw(st.sampled_from([None, (PENDING,), (RUNNING,)]), label="only_states")
            return Op(
                f"{gateway.name} fails {session_id} (only_states={only})",
                lambda: db.fail_handoff(session_id, error, only_states=only),
                lambda got: self.apply_fail(gateway, session_id, error, only, got),
            )
        scope = data.draw(st.sampled_from(["stale", "expired", "all"]), label="scope")
        method = self.reclaim_call(gateway, scope)
        return Op(
            f"{gateway.name} reclaims ({scope})",
            lambda: method(STRANDED_ERROR),
            lambda got: self.apply_reclaim(gateway, scope, STRANDED_ERROR, got),
        )

    @rule(data=st.data(), session_id=st.sampled_from(INITIAL), count=st.integers(2, 3))
    def race(self, data: st.DataObject, session_id: str, count: int) -> None:
        # Distinct stores: a store racing itself on one row (its claim and its own finish at
        # once) fences the finish on what its ledger held when the finish was asked for, which
        # the claim may change before the finish runs; a refused finish there is safe but is
        # no order of the model, and no gateway does it (it finishes what it has claimed).
        racers = data.draw(st.permutations(GATEWAYS), label="gateways")[:count]
        ops = [self.draw_op(data, session_id, gateway) for gateway in racers]
        try:
            self.explain(ops, run_together([op.call for op in ops]))
        except BaseException:
            self.failures.append(traceback.format_exc())
            raise

    def explain(self, ops: list[Op], answers: list[Any]) -> None:
        count = len(ops)
        saved = copy.deepcopy((self.rows, self.events, self.ledgers))
        for order in itertools.permutations(range(count)):
            try:
                for index in order:
                    ops[index].apply(answers[index])
                self.database_matches_model()
            except AssertionError:
                self.rows, self.events, self.ledgers = copy.deepcopy(saved)
                continue
            return
        raise AssertionError(
            "no order of these concurrent calls explains their answers and the database: "
            + "; ".join(
                f"{op.label} -> {answer!r}" for op, answer in zip(ops, answers, strict=True)
            )
        )

    @rule(seconds=st.sampled_from([1.0, 4.0, 10.0, 11.0]))
    def pass_time(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule(gateway=st.sampled_from(OWNED))
    def restart(self, gateway: Gateway) -> None:
        self.stores.pop(gateway.name).close()
        self._open(gateway)


def by_session(events: list[Event]) -> dict[str, list[Event]]:
    grouped: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        grouped[event[0]].append(event)
    return dict(grouped)


# -- running it ---------------------------------------------------------------------------------


def run_model_check(
    backend: str,
    folder: Path,
    examples: int,
    steps: int,
    machine: type[Model] = HandoffMachine,
) -> None:
    with database_at_head(backend, folder) as url:
        checker = create_engine(sync_url(url))

        class Machine(machine):  # type: ignore[valid-type,misc]
            pass

        Machine.url = url
        Machine.checker = checker
        Machine.failures = []
        try:
            run_state_machine_as_test(
                Machine,
                settings=settings(
                    max_examples=examples,
                    stateful_step_count=steps,
                    deadline=None,
                    database=None,  # no .hypothesis folder; a failure prints its reproduction
                    print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow],
                ),
            )
        except Flaky:
            if Machine.failures:
                pytest.fail(f"a race failed; its replay went otherwise:\n{Machine.failures[0]}")
            raise
        finally:
            checker.dispose()


BACKENDS = ["sqlite", "postgresql", "mysql"]
#: The default run's examples, kept few for its time; the opt-in ``slow`` variants below run
#: twenty times as many (and longer histories).
DEFAULT_EXAMPLES = {"sqlite": 30, "postgresql": 8, "mysql": 6}
LONG_EXAMPLES = {"sqlite": 600, "postgresql": 150, "mysql": 150}
DEFAULT_RACE_EXAMPLES = {"sqlite": 30, "postgresql": 10, "mysql": 6}


@pytest.mark.parametrize("backend", BACKENDS)
def test_database_never_diverges_from_the_model(backend: str, tmp_path: Path) -> None:
    run_model_check(backend, tmp_path, DEFAULT_EXAMPLES[backend], steps=50)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_database_never_diverges_from_the_model_long(backend: str, tmp_path: Path) -> None:
    run_model_check(backend, tmp_path, LONG_EXAMPLES[backend], steps=80)


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_stores_never_diverge_from_some_order_of_the_model(
    backend: str, tmp_path: Path
) -> None:
    run_model_check(
        backend, tmp_path, DEFAULT_RACE_EXAMPLES[backend], steps=20, machine=RaceMachine
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_stores_never_diverge_long(backend: str, tmp_path: Path) -> None:
    run_model_check(backend, tmp_path, LONG_EXAMPLES[backend], steps=50, machine=RaceMachine)
