"""Promotion in bounded memory: peak RSS of ``hermes-state db copy`` at 100,000 and 1,000,000.

Requirement (issue 5): "a copy from a SQLite file of 1,000,000 sessions must run in bounded
memory (measure it in ``bench/``)".

The source is an SQLite file of N sessions (one in twenty with a completed handoff), N/2
messages of about 70 characters, and N/10 handoff events. Each contender is a child process,
its peak resident set size measured (see below):

* ``open both, no copy`` (the baseline): a child importing what the command imports (the
  CLI and ``hermes_state.promotion``) and opening both databases as ``copy_database`` does
  (engine, schema check, one count), without copying.
* ``copy N sessions``: ``hermes-state --url SOURCE db copy --to TARGET --json`` (the CLI's
  ``__main__`` run in the child) into an empty target at head, N = 100,000 and 1,000,000
  (quick: 10,000 and 100,000).

The peak is the child's ``VmHWM`` read from ``/proc/self/status`` at exit (``wait4``'s
``ru_maxrss`` is no use here: it keeps the RSS the benchmark process had when it forked).

Targets: another SQLite file, and PostgreSQL when configured (a database of its own per N).
The ratio of the two copies' peaks is the answer (about 1 when memory is bounded); the note
gives rows per second (all three tables, over the child's wall time) and that ratio. Each copy's
JSON report must show every source row copied and the target holding them all. A copy still
running after :attr:`Settings.timeout` seconds is stopped: its row shows the peak so far and
the note how far it got (so a pathologically slow copy is reported, not waited for).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from hermes_state.engine import make_engine, resolve_url

from . import fixtures
from .common import BenchmarkError, Result, Samples, summarize

__all__ = ["run"]

NAME: Final = "copy_memory"
OPEN_ONLY: Final = "open both, no copy"
BASELINE_RUNS: Final = 3
CONTENT: Final = "please continue this conversation on telegram, with the files attached"

#: Prepended to each child's code: at exit, write the process's peak RSS (``VmHWM``: the high
#: water mark of this program's memory; ``wait4``'s ``ru_maxrss`` would include the RSS the
#: benchmark process had when it forked the child) to the file named by :data:`PEAK_ENV`.
PEAK_ENV: Final = "HERMES_BENCH_PEAK_FILE"
REPORT_PEAK: Final = f"""\
import atexit, os

def _report_peak():
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["{PEAK_ENV}"], "w") as out:
        out.write(peak)

atexit.register(_report_peak)
"""
#: The command itself, as ``python -m hermes_state ARGS`` runs it.
RUN_CLI: Final = """\
import runpy, sys
sys.argv = ["hermes-state", *sys.argv[1:]]
runpy.run_module("hermes_state", run_name="__main__", alter_sys=True)
"""
OPEN_BOTH: Final = """\
import sys
from sqlalchemy import text
import hermes_state.cli  # what `hermes-state db copy` imports
import hermes_state.promotion
from hermes_state.engine import is_sqlite, make_engine, resolve_url
from hermes_state.schema import ensure_current

for target in sys.argv[1:]:
    engine = make_engine(resolve_url(target))
    ensure_current(engine, auto_upgrade=is_sqlite(engine.url))
    with engine.connect() as connection:
        connection.execute(text("SELECT count(*) FROM sessions")).scalar_one()
    engine.dispose()
"""


@dataclass(frozen=True, slots=True)
class Settings:
    sizes: tuple[int, int]
    #: A copy still running after this many seconds is stopped and reported as such.
    timeout: float


FULL: Final = Settings(sizes=(100_000, 1_000_000), timeout=150.0)
QUICK: Final = Settings(sizes=(10_000, 100_000), timeout=60.0)


@dataclass(frozen=True, slots=True)
class _Child:
    peak_rss: int
    seconds: float
    stdout: str
    finished: bool = True


def run(quick: bool) -> list[Result]:
    settings = QUICK if quick else FULL
    folder = fixtures.scratch() / NAME
    sources = {size: _source(size, folder) for size in settings.sizes}
    results = _measure(
        "sqlite", sources, lambda size: _sqlite_target(folder, size), settings.timeout
    )
    server = fixtures.pg_server()
    if server is None:
        fixtures.skipping("copy_memory to PostgreSQL")
        return results

    @contextlib.contextmanager
    def pg_target(_size: int) -> Iterator[URL]:
        with fixtures.server_database(server) as url:
            yield url

    results.extend(_measure("postgresql", sources, pg_target, settings.timeout))
    return results


# -- the files ---------------------------------------------------------------------------------


def _source(size: int, folder: Path) -> Path:
    path = fixtures.copy_sqlite(fixtures.sqlite_sessions(size), folder / f"source-{size}.db")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            (
                (fixtures.session_id(2 * n), "user" if n % 2 else "assistant", CONTENT, 1.8e9 + n)
                for n in range(size // 2)
            ),
        )
        connection.executemany(
            "INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, "
            "detail) VALUES (?, 'running', 'completed', ?, 'bench-gateway', 1, NULL)",
            ((fixtures.session_id(10 * n), 1.8e9 + n) for n in range(size // 10)),
        )
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return path


@contextlib.contextmanager
def _sqlite_target(folder: Path, size: int) -> Iterator[URL]:
    path = folder / f"target-{size}.db"
    SessionDB(path).close()  # at head, empty: neither child migrates it
    try:
        yield resolve_url(path)
    finally:
        for leftover in folder.glob(f"target-{size}.db*"):
            leftover.unlink()


def _rows(size: int) -> dict[str, int]:
    return {"sessions": size, "messages": size // 2, "handoff_events": size // 10}


# -- the children ------------------------------------------------------------------------------


def _peak_now(pid: int) -> int:
    """A running process's peak RSS so far (bytes), from ``/proc``."""
    with open(f"/proc/{pid}/status") as status:
        return 1024 * int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))


def _run_child(
    code: str, arguments: Sequence[str], folder: Path, timeout: float | None = None
) -> _Child:
    """Run ``python -c code arguments``: its peak RSS, wall time and stdout.

    A child still running after ``timeout`` seconds is killed (its peak so far is kept, and
    ``finished`` is False).
    """
    out_path, err_path, peak_path = (folder / f"child.{kind}" for kind in ("out", "err", "peak"))
    peak_path.unlink(missing_ok=True)
    environment = {**fixtures.child_environment(), PEAK_ENV: str(peak_path)}
    command = [sys.executable, "-c", REPORT_PEAK + code, *arguments]
    with out_path.open("w") as out, err_path.open("w") as err:
        started = time.perf_counter()
        process = subprocess.Popen(
            command, stdout=out, stderr=err, cwd=fixtures.PROJECT_ROOT, env=environment
        )
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            peak = _peak_now(process.pid)
            process.kill()
            process.wait()
            return _Child(peak, time.perf_counter() - started, "", finished=False)
        seconds = time.perf_counter() - started
    if process.returncode != 0 or not peak_path.exists():
        tail = err_path.read_text().strip()[-800:]
        raise BenchmarkError(f"child {' '.join(arguments)} exited {process.returncode}: {tail}")
    return _Child(int(peak_path.read_text()) * 1024, seconds, out_path.read_text())


def _url_text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _open_only(source: Path, target: URL, folder: Path) -> _Child:
    return _run_child(OPEN_BOTH, [str(source), _url_text(target)], folder)


def _copy(source: Path, target: URL, size: int, folder: Path, timeout: float) -> _Child:
    arguments = ["--url", str(source), "db", "copy", "--to", _url_text(target), "--json"]
    child = _run_child(RUN_CLI, arguments, folder, timeout)
    if child.finished:
        _check_report(json.loads(child.stdout), _rows(size))
    return child


def _check_report(report: dict[str, Any], expected: dict[str, int]) -> None:
    tables = {table["table"]: table for table in report["tables"]}
    for name, count in expected.items():
        table = tables.get(name)
        if table is None or not (
            table["source_rows"] == table["copied"] == table["target_rows"] == count
        ):
            raise BenchmarkError(f"db copy of {name}: expected {count} rows copied, got {table}")


def _target_rows(url: URL) -> int:
    """Rows in the target's copied tables (after a copy was stopped)."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return sum(
                int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
                for table in ("sessions", "messages", "handoff_events")
            )
    finally:
        engine.dispose()


def _measure(
    backend: str,
    sources: dict[int, Path],
    target: Any,
    timeout: float,
) -> list[Result]:
    folder = fixtures.scratch() / NAME
    small, big = sorted(sources)
    samples: dict[str, Samples] = {OPEN_ONLY: []}
    notes: dict[str, str] = {OPEN_ONLY: f"{BASELINE_RUNS} runs"}
    peaks: dict[int, int] = {}
    for size in (small, big):
        rows = sum(_rows(size).values())
        label = f"copy {size:,} sessions"
        with target(size) as url:
            if size == small:
                for _ in range(BASELINE_RUNS):
                    samples[OPEN_ONLY].append(_open_only(sources[size], url, folder).peak_rss)
            child = _copy(sources[size], url, size, folder, timeout)
            if child.finished:
                rate = rows / child.seconds
                notes[label] = f"{rows:,} rows in {child.seconds:.1f} s: {rate:,.0f} rows/s"
            else:
                done = _target_rows(url)
                print(f"  {label} -> {backend}: stopped after {timeout:g} s", file=sys.stderr)
                notes[label] = (
                    f"STOPPED after {child.seconds:.0f} s with {done:,} of {rows:,} rows copied "
                    f"({done / child.seconds:,.0f} rows/s); peak so far"
                )
        samples[label] = [child.peak_rss]
        peaks[size] = child.peak_rss
    growth = peaks[big] / peaks[small]
    notes[f"copy {big:,} sessions"] += f"; peak {growth:.2f}x the {small:,}-session copy's"
    return summarize(
        NAME,
        f"peak RSS of `hermes-state db copy` [sqlite -> {backend}]",
        samples,
        baseline=OPEN_ONLY,
        ops_per_round=1,
        unit="B",
        notes=notes,
    )
