"""End-to-end drain on PostgreSQL: a real ``hermes-state watch`` against the job queues people pick.

Each system drains the same number of no-op units of work at the same concurrency, in a fresh
database of its own, started by a worker process of its own (its defaults otherwise):

* ``hermes-state watch`` with a no-op ``--handler``, ``--max-concurrency 10``;
* procrastinate's worker (``concurrency=10``, ``wait=False``: it exits once the queue is empty);
* pgqueuer's worker (batch 10, its default, ``concurrency_limit=10``, drain mode).

The time of a drain comes from each system's own event timestamps, written by its database
clock: from the first unit taken (``handoff_events`` ``running`` / procrastinate ``started`` /
pgqueuer ``picked``) to the last one finished (``completed`` / ``succeeded`` / ``successful``),
so process start-up and the seeding of the queue are not counted. Rounds rotate the order of
the systems, and the verdict compares hermes-state with procrastinate, the slowest queue the
issue that asked for this benchmark measured (bar: five times as fast, a ratio of 0.2 or less).

Two figures less moved by the machine's load go in the notes, medians over the rounds: the
database transactions each unit cost (``pg_stat_database`` of the system's own database,
less this process's own polls), and the worker process's CPU time per unit while it drained
(from the first unit it finished to the last; Linux only).

procrastinate and pgqueuer come with the ``bench`` extra (``pip install -e '.[bench]'``); a
system that is not installed is skipped with a line on stderr. ``python -m bench.drain
procrastinate|pgqueuer URL`` is the worker half of each case (the parent starts it).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sqlalchemy.engine import URL

from . import fixtures
from .common import BenchmarkError, Result, Samples, summarize

NAME: Final = "drain"
CONCURRENCY: Final = 10
UNITS: Final = 3000
QUICK_UNITS: Final = 600
ROUNDS: Final = 3
QUICK_ROUNDS: Final = 1
#: Seconds a worker may take to drain the queue before the case is declared broken.
DRAIN_TIMEOUT: Final = 300.0
HERMES: Final = "hermes-state watch"
PROCRASTINATE: Final = "procrastinate worker"
PGQUEUER: Final = "pgqueuer worker"
#: The issue's bar: hermes-state at least five times as fast as procrastinate.
LIMITS: Final = {HERMES: 0.2}
_EPOCH: Final = 1_767_225_600.0


def run(quick: bool) -> list[Result]:
    server = fixtures.pg_server()
    if server is None:
        fixtures.skipping(NAME)
        return []
    systems: dict[str, Callable[[URL, int], Drained]] = {HERMES: _drain_hermes}
    for label, module, drain in (
        (PROCRASTINATE, "procrastinate", _drain_procrastinate),
        (PGQUEUER, "pgqueuer", _drain_pgqueuer),
    ):
        if importlib.util.find_spec(module) is None:
            print(
                f"  {NAME}: {label} skipped ({module} is not installed; pip install -e '.[bench]')",
                file=sys.stderr,
            )
        else:
            systems[label] = drain
    units = QUICK_UNITS if quick else UNITS
    rounds = QUICK_ROUNDS if quick else ROUNDS
    samples: dict[str, Samples] = {label: [] for label in systems}
    drains: dict[str, list[Drained]] = {label: [] for label in systems}
    order = list(systems)
    for round_index in range(rounds):
        shift = round_index % len(order)
        for label in order[shift:] + order[:shift]:
            drained = systems[label](server, units)
            samples[label].append(drained.seconds / units)
            drains[label].append(drained)
            print(f"  {NAME}: {label}: {drained.describe(units)}", file=sys.stderr, flush=True)
    baseline = PROCRASTINATE if PROCRASTINATE in samples else HERMES
    notes = {label: _note(values, units) for label, values in drains.items()}
    return summarize(
        NAME,
        f"{units} no-op units, concurrency {CONCURRENCY}, PostgreSQL",
        samples,
        baseline=baseline,
        ops_per_round=units,
        limits={k: v for k, v in LIMITS.items() if baseline != k},
        notes=notes,
    )


@dataclass(frozen=True)
class Drained:
    """One drain: its span from the system's own timestamps, the database transactions it
    cost, and its worker's CPU seconds per unit while draining (None where not measured)."""

    seconds: float
    transactions: int
    cpu_per_unit: float | None

    def describe(self, units: int) -> str:
        cpu = "" if self.cpu_per_unit is None else f", {self.cpu_per_unit * 1e6:,.0f} µs CPU/unit"
        return (
            f"{units / self.seconds:,.0f}/s, {self.transactions / units:.2f} transactions/unit{cpu}"
        )


def _note(drains: list[Drained], units: int) -> str:
    rate = statistics.median(units / drained.seconds for drained in drains)
    transactions = statistics.median(drained.transactions / units for drained in drains)
    note = f"{rate:,.0f} units/s (median round); {transactions:.2f} transactions/unit"
    cpus = [drained.cpu_per_unit for drained in drains if drained.cpu_per_unit is not None]
    if cpus:
        note += f"; worker CPU {statistics.median(cpus) * 1e6:,.0f} µs/unit"
    return note


# -- databases ---------------------------------------------------------------------------------


def _query_one(url: URL, sql: str) -> tuple[Any, ...]:
    import psycopg

    with psycopg.connect(fixtures.pg_conninfo(url)) as connection:
        row = connection.execute(sql).fetchone()
    if row is None:
        raise BenchmarkError(f"no row from {sql!r}")
    return tuple(row)


def _counter(url: URL, sql: str) -> Callable[[], int]:
    """How many units ``sql`` (a count) says are finished, read afresh at each call."""
    return lambda: int(_query_one(url, sql)[0])


def _transactions(url: URL) -> int:
    """Transactions committed or rolled back in the database so far (each of this process's
    queries is one, on a connection of its own)."""
    return int(
        _query_one(
            url,
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()",
        )[0]
    )


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of a running (or not yet reaped) process; Linux only."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _span(url: URL, sql: str, units: int, system: str) -> float:
    """Seconds between the first unit taken and the last one finished, from ``sql``'s
    (taken, finished, first, last) row; checks every unit finished exactly once."""
    taken, finished, first, last = _query_one(url, sql)
    if taken != units or finished != units:
        raise BenchmarkError(f"{system}: {taken} taken and {finished} finished of {units} units")
    return float(last - first)


def _drain(
    command: list[str], url: URL, finished: Callable[[], int], units: int, system: str
) -> tuple[int, float | None]:
    """Run a worker until ``finished()`` reaches ``units`` (then stop it) or it exits by itself.

    Returns the database transactions the worker made (this process's polls taken out) and
    its CPU seconds per unit between the first and the last poll that saw it draining (units
    finished and CPU time read together; start-up and shutdown are not counted). Its output
    goes to a file in the run's scratch folder, shown only when something failed.
    """
    log = fixtures.scratch() / f"{NAME}-{uuid.uuid4().hex[:8]}.log"
    polls = 0
    before = _transactions(url)
    seen: list[tuple[int, float]] = []  # (units finished, the worker's CPU seconds) per poll
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=fixtures.PROJECT_ROOT,
            env=fixtures.child_environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + DRAIN_TIMEOUT
        try:
            count = 0
            while process.poll() is None:
                cpu = _cpu_seconds(process.pid)
                count = finished()
                polls += 1
                if count > 0 and cpu is not None:
                    seen.append((count, cpu))
                if count >= units:
                    break
                if time.monotonic() > deadline:
                    raise BenchmarkError(f"{system} did not drain in {DRAIN_TIMEOUT:g} s")
                time.sleep(0.05)
            if count < units:
                count = finished()
                polls += 1
            if count < units:
                tail = log.read_text(errors="replace")[-2000:]
                raise BenchmarkError(f"{system} exited before draining its queue:\n{tail}")
        finally:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    cpu_per_unit = None
    if len(seen) >= 2 and seen[-1][0] > seen[0][0]:
        cpu_per_unit = (seen[-1][1] - seen[0][1]) / (seen[-1][0] - seen[0][0])
    # The reading before, and every poll, were transactions of this process's own.
    return _transactions(url) - before - 1 - polls, cpu_per_unit


def _worker(system: str, url: URL) -> list[str]:
    """The command of this module's worker half for ``system``."""
    return [sys.executable, "-m", "bench.drain", system, url.render_as_string(False)]


# -- hermes-state ------------------------------------------------------------------------------


def _drain_hermes(server: URL, units: int) -> Drained:
    with fixtures.server_database(server) as url:
        _seed_handoffs(url, units)
        command = [
            *(sys.executable, "-m", "hermes_state.cli", "--url", url.render_as_string(False)),
            *("watch", "--handler", "bench.drain:deliver", "--owner", "bench-drain"),
            *("--max-concurrency", str(CONCURRENCY)),
        ]
        finished = _counter(url, "SELECT count(*) FROM sessions WHERE handoff_state = 'completed'")
        transactions, cpu = _drain(command, url, finished, units, HERMES)
        seconds = _span(
            url,
            "SELECT count(*) FILTER (WHERE to_state = 'running'), "
            "count(*) FILTER (WHERE to_state = 'completed'), "
            "min(at) FILTER (WHERE to_state = 'running'), "
            "max(at) FILTER (WHERE to_state = 'completed') FROM handoff_events",
            units,
            HERMES,
        )
        return Drained(seconds, transactions, cpu)


def _seed_handoffs(url: URL, units: int) -> None:
    """``units`` sessions, each with a pending handoff requested in id order."""
    import psycopg

    with psycopg.connect(fixtures.pg_conninfo(url)) as connection:
        with (
            connection.cursor() as cursor,
            cursor.copy(
                "COPY sessions (id, source, started_at, handoff_state, handoff_platform, "
                "handoff_requested_at, handoff_attempt) FROM STDIN"
            ) as copy,
        ):
            for index in range(units):
                at = _EPOCH + index
                copy.write_row(
                    (fixtures.session_id(index), "bench", at, "pending", "telegram", at, 0)
                )
        connection.commit()
    with psycopg.connect(fixtures.pg_conninfo(url), autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE sessions")


async def deliver(_row: Mapping[str, Any], _profile: str | None) -> None:
    """The no-op delivery ``watch --handler bench.drain:deliver`` calls."""


# -- procrastinate -----------------------------------------------------------------------------


def _procrastinate_app(url: URL) -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=fixtures.pg_conninfo(url))
    )

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app


def _drain_procrastinate(server: URL, units: int) -> Drained:
    with fixtures.server_database(server, at_head=False) as url:
        app = _procrastinate_app(url)
        with app.open():
            app.schema_manager.apply_schema()
            app.tasks["noop"].batch_defer(*({} for _ in range(units)))
        finished = _counter(
            url, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        )
        transactions, cpu = _drain(
            _worker("procrastinate", url), url, finished, units, PROCRASTINATE
        )
        seconds = _span(
            url,
            "SELECT count(*) FILTER (WHERE type = 'started'), "
            "count(*) FILTER (WHERE type = 'succeeded'), "
            "extract(epoch FROM min(at) FILTER (WHERE type = 'started')), "
            "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')) "
            "FROM procrastinate_events",
            units,
            PROCRASTINATE,
        )
        return Drained(seconds, transactions, cpu)


def _work_procrastinate(url: URL) -> None:
    _procrastinate_app(url).run_worker(concurrency=CONCURRENCY, wait=False)


# -- pgqueuer ----------------------------------------------------------------------------------


async def _pgqueuer_connect(url: URL) -> Any:
    import asyncpg

    return await asyncpg.connect(fixtures.pg_conninfo(url))


def _drain_pgqueuer(server: URL, units: int) -> Drained:
    with fixtures.server_database(server, at_head=False) as url:
        asyncio.run(_seed_pgqueuer(url, units))
        finished = _counter(url, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
        transactions, cpu = _drain(_worker("pgqueuer", url), url, finished, units, PGQUEUER)
        seconds = _span(
            url,
            "SELECT count(*) FILTER (WHERE status = 'picked'), "
            "count(*) FILTER (WHERE status = 'successful'), "
            "extract(epoch FROM min(created) FILTER (WHERE status = 'picked')), "
            "extract(epoch FROM max(created) FILTER (WHERE status = 'successful')) "
            "FROM pgqueuer_log",
            units,
            PGQUEUER,
        )
        return Drained(seconds, transactions, cpu)


async def _seed_pgqueuer(url: URL, units: int) -> None:
    from pgqueuer import AsyncpgDriver, Queries

    connection = await _pgqueuer_connect(url)
    try:
        queries = Queries(AsyncpgDriver(connection))
        await queries.install()
        await queries.enqueue(["noop"] * units, [None] * units, [0] * units)
    finally:
        await connection.close()


async def _work_pgqueuer(url: URL) -> None:
    from pgqueuer import AsyncpgDriver, PgQueuer
    from pgqueuer.domain.types import QueueExecutionMode

    connection = await _pgqueuer_connect(url)
    try:
        queuer = PgQueuer(AsyncpgDriver(connection))

        @queuer.entrypoint("noop", concurrency_limit=CONCURRENCY)
        async def noop(_job: Any) -> None:
            return None

        await queuer.run(mode=QueueExecutionMode.drain)
    finally:
        await connection.close()


def main(argv: Sequence[str] | None = None) -> int:
    from hermes_state.engine import resolve_url

    system, raw_url = argv if argv is not None else sys.argv[1:]
    url = resolve_url(raw_url)
    if system == "procrastinate":
        _work_procrastinate(url)
    elif system == "pgqueuer":
        asyncio.run(_work_pgqueuer(url))
    else:
        raise SystemExit(f"unknown system {system!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
