"""Start-up costs: ``import hermes_state`` in a fresh interpreter, and opening a store.

Requirement (design: "importing the package does not import Alembic or the CLI (keep
``import hermes_state`` fast)"; issue 6: "``import hermes_state`` time and the cost of opening
an up-to-date store").

Cases, each alternating its contenders round by round:

* ``fresh interpreter: import`` — ``python -c "import X"`` as a subprocess, wall time. Baseline
  ``import sqlite3``; ``import hermes_state``; for context the bare interpreter (``pass``),
  ``import asyncio`` (the package imports it for ``hermes_state.asyncio.to_thread``),
  ``import sqlalchemy``, and ``from hermes_state import SessionDB`` (loads the store, hence
  SQLAlchemy). The child running ``import hermes_state`` also checks that neither Alembic nor
  the CLI got imported (the benchmark fails otherwise).
* ``fresh interpreter: open + first read`` — the same in a subprocess that opens the database
  and reads one session's handoff state: ``sqlite3`` (baseline) against ``SessionDB``: what a
  short-lived command pays.
* ``open up-to-date store + first read`` — in this process (imports warm): ``sqlite3.connect``,
  the store's pragmas, the ``get_handoff_state`` SELECT, close (baseline) against
  ``SessionDB(path)``, ``get_handoff_state``, ``close()``.
* ``open a store that needs migrating`` (context) — ``SessionDB(path)`` on a file at
  ``0002_handoff_leases`` (one migration behind) and on a new file (every migration), each on
  a fresh copy, then ``get_handoff_state`` and ``close()``; against the same baseline.
"""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hermes_state import SessionDB, schema
from hermes_state.engine import BUSY_TIMEOUT_MS, resolve_url

from . import fixtures
from .common import Batch, BenchmarkError, Result, interleaved, interleaved_counts, summarize

__all__ = ["run"]

NAME: Final = "open_cost"
SESSIONS: Final = 1_000
BEHIND: Final = "0002_handoff_leases"
PROBE: Final = fixtures.session_id(1)

#: The SELECT of ``get_handoff_state`` (see hermes_state.statements.get_handoff_state).
STATE_SQL: Final = (
    "SELECT sessions.handoff_state AS state, sessions.handoff_platform AS platform, "
    "sessions.handoff_error AS error FROM sessions WHERE sessions.id = ?"
)
PRAGMAS: Final = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
)

IMPORT_SQLITE3: Final = "import sqlite3"
IMPORT_PACKAGE: Final = "import hermes_state"
IMPORTS: Final = {
    IMPORT_SQLITE3: "import sqlite3",
    "bare interpreter": "pass",
    IMPORT_PACKAGE: (
        "import sys, hermes_state\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'alembic' "
        "or m.startswith('hermes_state.cli'))\n"
        "if loaded: raise SystemExit(f'import hermes_state loaded {loaded}')"
    ),
    "import asyncio": "import asyncio",
    "import sqlalchemy": "import sqlalchemy",
    "from hermes_state import SessionDB": "from hermes_state import SessionDB",
}


@dataclass(frozen=True, slots=True)
class Settings:
    import_rounds: int
    process_rounds: int
    open_rounds: int
    opens: int
    migrate_rounds: int


FULL: Final = Settings(
    import_rounds=20, process_rounds=12, open_rounds=30, opens=10, migrate_rounds=12
)
QUICK: Final = Settings(import_rounds=5, process_rounds=4, open_rounds=8, opens=5, migrate_rounds=4)


def run(quick: bool) -> list[Result]:
    settings = QUICK if quick else FULL
    folder = fixtures.scratch() / NAME
    path = fixtures.copy_sqlite(fixtures.sqlite_sessions(SESSIONS), folder / "current.db")
    results = _imports(settings)
    results.extend(_fresh_open(settings, path))
    results.extend(_open(settings, path))
    results.extend(_migrating(settings, path, folder))
    return results


# -- fresh interpreters ------------------------------------------------------------------------


def _python(code: str) -> Batch:
    command = [sys.executable, "-c", code]
    environment = fixtures.child_environment()

    def batch() -> None:
        done = subprocess.run(
            command,
            cwd=fixtures.PROJECT_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise BenchmarkError(f"python -c {code!r} failed: {done.stderr.strip()[-500:]}")

    return batch


def _imports(settings: Settings) -> list[Result]:
    samples = interleaved(
        {"import": {name: _python(code) for name, code in IMPORTS.items()}},
        rounds=settings.import_rounds,
        warmup=1,
        ops_per_round=1,
    )["import"]
    return summarize(
        NAME, "fresh interpreter: import", samples, baseline=IMPORT_SQLITE3, ops_per_round=1
    )


def _fresh_open(settings: Settings, path: Path) -> list[Result]:
    raw = (
        "import sqlite3\n"
        f"connection = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        + "".join(f"connection.execute({pragma!r})\n" for pragma in PRAGMAS)
        + f"row = connection.execute({STATE_SQL!r}, ({PROBE!r},)).fetchone()\n"
        "connection.close()\n"
        "assert row is not None\n"
    )
    store = (
        "from hermes_state import SessionDB\n"
        f"with SessionDB({str(path)!r}) as store:\n"
        f"    assert store.get_handoff_state({PROBE!r}) is not None\n"
    )
    contenders = {"sqlite3": _python(raw), "SessionDB": _python(store)}
    samples = interleaved(
        {"open": contenders}, rounds=settings.process_rounds, warmup=1, ops_per_round=1
    )["open"]
    return summarize(
        NAME,
        f"fresh interpreter: open + first read ({SESSIONS:,} sessions)",
        samples,
        baseline="sqlite3",
        ops_per_round=1,
    )


# -- in this process ---------------------------------------------------------------------------


def _raw_open(path: Path) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in PRAGMAS:
            connection.execute(pragma)
        row = connection.execute(STATE_SQL, (PROBE,)).fetchone()
    finally:
        connection.close()
    if row is None:
        raise BenchmarkError(f"sqlite3 did not find {PROBE} in {path}")


def _store_open(path: Path) -> None:
    with SessionDB(path) as store:
        if store.get_handoff_state(PROBE) is None:
            raise BenchmarkError(f"SessionDB did not find {PROBE} in {path}")


def _repeat(open_one: Callable[[Path], None], paths: Callable[[], Path], count: int) -> Batch:
    def batch() -> None:
        for _ in range(count):
            open_one(paths())

    return batch


def _open(settings: Settings, path: Path) -> list[Result]:
    samples = interleaved_counts(
        {
            "sqlite3": (_repeat(_raw_open, lambda: path, settings.opens), settings.opens),
            "SessionDB": (_repeat(_store_open, lambda: path, settings.opens), settings.opens),
        },
        rounds=settings.open_rounds,
        warmup=2,
    )
    return summarize(
        NAME,
        f"open up-to-date store + first read ({SESSIONS:,} sessions)",
        samples,
        baseline="sqlite3",
        ops_per_round=settings.opens,
    )


def _copies(template: Path, folder: Path, stem: str) -> Callable[[], Path]:
    """Each call: a fresh copy of ``template`` (copied before the clock starts: see below)."""
    counter = itertools.count()

    def next_copy() -> Path:
        return fixtures.copy_sqlite(template, folder / f"{stem}-{next(counter)}.db")

    return next_copy


def _prepared(make: Callable[[], Path], count: int) -> Iterator[Path]:
    """``count`` files made up front, handed out one by one."""
    return iter([make() for _ in range(count)])


def _migrating(settings: Settings, path: Path, folder: Path) -> list[Result]:
    behind = folder / "behind.db"
    schema.upgrade(resolve_url(behind), BEHIND)
    connection = sqlite3.connect(behind, isolation_level=None)
    try:
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, 'bench', ?)",
            ((fixtures.session_id(n), 1.8e9 + n) for n in range(SESSIONS)),
        )
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    rounds = settings.migrate_rounds + 1
    behind_copies = _prepared(_copies(behind, folder / "behind", "copy"), rounds)
    new_files = iter([folder / "new" / f"new-{n}.db" for n in range(rounds)])
    (folder / "new").mkdir(parents=True, exist_ok=True)

    def new_store() -> None:
        with SessionDB(next(new_files)) as store:
            if store.get_handoff_state(PROBE) is not None:
                raise BenchmarkError("a new database holds a session")

    samples = interleaved(
        {
            "migrate": {
                "sqlite3": lambda: _raw_open(path),
                f"SessionDB, file at {BEHIND}": lambda: _store_open(next(behind_copies)),
                "SessionDB, new file": new_store,
            }
        },
        rounds=settings.migrate_rounds,
        warmup=1,
        ops_per_round=1,
    )["migrate"]
    return summarize(
        NAME,
        "open a store that needs migrating + first read",
        samples,
        baseline="sqlite3",
        ops_per_round=1,
    )
