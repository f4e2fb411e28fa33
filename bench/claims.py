"""Claims per second with 1, 2 and 4 claiming processes, each row claimed exactly once.

Requirement (issue 4, issue 6): claims stay exactly-once with several gateways, and their
throughput is measured on SQLite and on PostgreSQL (when configured).

:attr:`Settings.rows` rows (per backend) are made pending, among :data:`IDLE_SESSIONS` other
sessions; then 1, 2 or 4 worker processes, each with its own ``SessionDB`` (an owner and a
lease, as a gateway has), claim until nothing is pending. Each worker does what a watcher does:
list the pending rows, oldest first, and try to claim each (``claim_handoff``, a
compare-and-swap; a lost race returns False), again until the listing is empty. So with several
workers most attempts are lost races, as between real gateways serving one backlog.

For context, ``4 processes, spread starts``: the same workers, each starting at its own share
of the listing (worker i of k at i/k of it) and listing again after a lost race, so their
attempts rarely collide: about what a ``FOR UPDATE SKIP LOCKED`` claim of the next row would
give.

The workers are started once per backend (spawned, so their start-up is not measured) and
told to go at once; a round's time runs from the first "go" to the last worker's answer.
Process counts alternate round by round. After every round the benchmark fails loudly unless
every row was claimed exactly once: no id reported by two workers, every row ``running``
under the owner that reported it with attempt 1, and exactly one ``pending -> running``
event per row in the audit trail, by that owner.

The table gives time per claim (wall time / rows) with ratios against 1 process; the note
gives claims per second and the lost attempts.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.engine import make_engine, resolve_url

from . import fixtures
from .common import BenchmarkError, Result, Samples, summarize

__all__ = ["run"]

NAME: Final = "claims"
PROCESSES: Final = (1, 2, 4)
#: (processes, spread): the watcher's order, and for context 4 workers that each start
#: claiming at their own share of the listing (as a SKIP LOCKED claim would spread them).
CONTENDERS: Final = (*((count, False) for count in PROCESSES), (max(PROCESSES), True))
IDLE_SESSIONS: Final = 10_000
SOURCE: Final = "bench-claims"
LEASE_SECONDS: Final = 300.0


@dataclass(frozen=True, slots=True)
class Settings:
    #: Rows claimed per round, per backend (a PostgreSQL claim costs ten times an SQLite one).
    rows: dict[str, int]
    rounds: int


FULL: Final = Settings(rows={"sqlite": 2_000, "postgresql": 600}, rounds=3)
QUICK: Final = Settings(rows={"sqlite": 400, "postgresql": 200}, rounds=1)


def run(quick: bool) -> list[Result]:
    settings = QUICK if quick else FULL
    path = fixtures.copy_sqlite(
        fixtures.sqlite_sessions(IDLE_SESSIONS), fixtures.scratch() / NAME / "claims.db"
    )
    results = _measure("sqlite", resolve_url(path), settings)
    server = fixtures.pg_server()
    if server is None:
        fixtures.skipping("claims on PostgreSQL")
        return results
    with fixtures.server_database(server) as url:
        fixtures.pg_load_sessions(url, IDLE_SESSIONS)
        results.extend(_measure("postgresql", url, settings))
    return results


# -- the workers -------------------------------------------------------------------------------


def _worker(url: str, owner: str, channel: Connection) -> None:
    """A claiming process: on each "go", claim until nothing is pending; report what it won."""
    store = SessionDB(url, owner=owner, lease_seconds=LEASE_SECONDS)
    try:
        store.has_pending_handoffs()  # connect before the clock starts
        channel.send("ready")
        while (message := channel.recv()) != "stop":
            _go, index, count, spread = message
            won: list[str] = []
            lost = 0
            while rows := store.list_pending_handoffs():
                if spread:  # start at this worker's share of the listing, not at its head
                    start = len(rows) * index // count
                    rows = rows[start:] + rows[:start]
                for row in rows:
                    if store.claim_handoff(row["id"]):
                        won.append(row["id"])
                    else:
                        lost += 1
                        if spread:
                            break  # the listing is stale: list again
            channel.send((won, lost))
    finally:
        store.close()


@dataclass
class _Worker:
    owner: str
    process: multiprocessing.process.BaseProcess
    channel: Connection


@contextlib.contextmanager
def _workers(url: URL, count: int) -> Iterator[list[_Worker]]:
    context = multiprocessing.get_context("spawn")
    workers: list[_Worker] = []
    try:
        for index in range(count):
            owner = f"bench-claimer-{index}"
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_worker,
                args=(url.render_as_string(hide_password=False), owner, theirs),
                daemon=True,
            )
            process.start()
            theirs.close()
            workers.append(_Worker(owner, process, ours))
        for worker in workers:
            if not worker.channel.poll(120) or worker.channel.recv() != "ready":
                raise BenchmarkError(f"claiming process {worker.owner} did not start")
        yield workers
    finally:
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.channel.send("stop")
        for worker in workers:
            worker.process.join(30)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()


# -- the rows ----------------------------------------------------------------------------------


def _ids(rows: int) -> list[str]:
    return fixtures.session_ids(range(IDLE_SESSIONS, IDLE_SESSIONS + rows))


def _create_rows(engine: Engine, ids: Sequence[str]) -> None:
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO sessions (id, source, started_at, handoff_attempt) "
                f"VALUES (:id, '{SOURCE}', :started_at, 0)"
            ),
            [{"id": session_id, "started_at": 1.8e9 + n} for n, session_id in enumerate(ids)],
        )


def _reset(engine: Engine) -> None:
    """Every benchmark row pending again, as if just requested; the audit trail emptied."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE sessions SET handoff_state = 'pending', handoff_platform = 'telegram', "
                "handoff_requested_at = started_at, handoff_claimed_at = NULL, "
                "handoff_finished_at = NULL, handoff_owner = NULL, "
                "handoff_lease_expires_at = NULL, handoff_attempt = 0, handoff_error = NULL "
                f"WHERE source = '{SOURCE}'"
            )
        )
        connection.execute(text("DELETE FROM handoff_events"))


def _verify(engine: Engine, ids: Sequence[str], replies: dict[str, list[str]]) -> None:
    """Every row claimed exactly once, by the worker that says it won it; fail loudly if not."""
    claims = Counter(session_id for won in replies.values() for session_id in won)
    twice = sorted(session_id for session_id, count in claims.items() if count > 1)
    if twice:
        raise BenchmarkError(f"{len(twice)} row(s) claimed by two workers, e.g. {twice[:5]}")
    missing = sorted(set(ids) - set(claims))
    if missing or len(claims) != len(ids):
        raise BenchmarkError(f"{len(missing)} row(s) never claimed, e.g. {missing[:5]}")
    winner = {session_id: owner for owner, won in replies.items() for session_id in won}
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT id, handoff_state, handoff_owner, handoff_attempt FROM sessions "
                "WHERE source = :source"
            ),
            {"source": SOURCE},
        ).all()
        events = connection.execute(
            text(
                "SELECT session_id, actor FROM handoff_events "
                "WHERE from_state = 'pending' AND to_state = 'running'"
            )
        ).all()
    wrong = [row for row in rows if tuple(row[1:]) != ("running", winner.get(row[0]), 1)]
    if wrong or len(rows) != len(ids):
        raise BenchmarkError(f"{len(wrong)} row(s) not running under their claimer: {wrong[:5]}")
    per_row = Counter(session_id for session_id, _actor in events)
    bad_events = sorted(
        {session_id for session_id, count in per_row.items() if count != 1}
        | {session_id for session_id, actor in events if actor != winner.get(session_id)}
        | (set(ids) - set(per_row))
    )
    if bad_events:
        raise BenchmarkError(
            f"the audit trail does not show exactly one claim by the winner for "
            f"{len(bad_events)} row(s), e.g. {bad_events[:5]}"
        )


# -- one backend -------------------------------------------------------------------------------


def _label(count: int, spread: bool = False) -> str:
    name = f"{count} process" if count == 1 else f"{count} processes"
    return f"{name}, spread starts" if spread else name


def _measure(backend: str, url: URL, settings: Settings) -> list[Result]:
    ids = _ids(settings.rows[backend])
    engine = make_engine(url)
    try:
        _create_rows(engine, ids)
        samples: dict[str, Samples] = {_label(*contender): [] for contender in CONTENDERS}
        lost: dict[str, list[int]] = {_label(*contender): [] for contender in CONTENDERS}
        with _workers(url, max(PROCESSES)) as workers:
            for index in range(settings.rounds):
                shift = index % len(CONTENDERS)
                for count, spread in CONTENDERS[shift:] + CONTENDERS[:shift]:
                    _reset(engine)
                    chosen = workers[:count]
                    name = _label(count, spread)
                    started = time.perf_counter()
                    for position, worker in enumerate(chosen):
                        worker.channel.send(("go", position, count, spread))
                    answers: dict[str, Any] = {
                        worker.owner: worker.channel.recv() for worker in chosen
                    }
                    elapsed = time.perf_counter() - started
                    replies = {owner: won for owner, (won, _lost) in answers.items()}
                    _verify(engine, ids, replies)
                    samples[name].append(elapsed / len(ids))
                    lost[name].append(sum(n for _won, n in answers.values()))
    finally:
        engine.dispose()
    notes = {
        name: f"{1 / statistics.median(values):,.0f} claims/s; "
        f"{statistics.median(lost[name]):,.0f} lost races per {len(ids):,} claims"
        for name, values in samples.items()
    }
    return summarize(
        NAME,
        f"{len(ids):,} pending rows claimed exactly once [{backend}]",
        samples,
        baseline=_label(1),
        ops_per_round=len(ids),
        notes=notes,
    )
