"""Online backup and restore of an SQLite state database, each copy verified before it counts."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sqlalchemy.engine import URL

from .engine import connect_for_reading, describe, resolve_url
from .errors import (
    DatabaseCorruptError,
    ForeignDatabaseError,
    HermesStateError,
    InvalidInputError,
    NotADatabaseError,
    translated,
)
from .schema import FileKind, is_known_revision, look_at_sqlite_file, upstream_schema_of

__all__ = [
    "PAGES_PER_STEP",
    "Copy",
    "ServerRestore",
    "Verified",
    "backup_sqlite",
    "check_destination",
    "dump_command",
    "is_empty_target",
    "restore_onto_server",
    "restore_sqlite",
    "server_counts",
    "verify_sqlite",
]

#: Pages the backup copies per step; between steps writers go on (WAL: they never wait).
PAGES_PER_STEP: Final = 4096
#: A step-wise backup starts over whenever another connection writes between its steps; after
#: this many restarts the rest is copied in one step (one read transaction: still consistent,
#: and in WAL mode writers do not wait for it).
MAX_RESTARTS: Final = 20


@dataclass(frozen=True, slots=True)
class Verified:
    """What a check of a database file found: sound, ours, and what it holds."""

    path: Path
    bytes: int
    revision: str | None  # hermes-state's (Alembic) revision; None for upstream's own file
    upstream_schema: int | None  # the schema_version upstream's code recorded, if any
    sessions: int
    messages: int

    @property
    def described(self) -> str:
        if self.revision is not None:
            return f"revision {self.revision}"
        return f"upstream schema {self.upstream_schema}"


@dataclass(frozen=True, slots=True)
class Copy:
    """A backup or restore that is done: the source as checked, the copy as checked, the time
    it took and how often the online copy started over."""

    source: Verified
    copy: Verified
    seconds: float
    restarts: int


def _count(connection: sqlite3.Connection, table: str) -> int:
    try:
        row = connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()  # noqa: S608
    except sqlite3.OperationalError:
        return 0
    return int(row[0])


def verify_sqlite(path: Path | str) -> Verified:
    """Check an SQLite state database: ``PRAGMA integrity_check`` passes, it is hermes-state's
    at a known revision or upstream's own file, and the project's store opens it and reads its
    sessions. Raises ``NotADatabaseError``, ``ForeignDatabaseError`` or
    ``DatabaseCorruptError`` (all with the path) when it is not such a database."""
    from .store import SessionDB

    file = Path(path)
    url = resolve_url(file)
    if not file.is_file() or file.stat().st_size == 0:
        raise NotADatabaseError(f"{file} is no database (missing or empty)")
    state = look_at_sqlite_file(url)
    if state.kind is FileKind.FOREIGN:
        raise ForeignDatabaseError(f"{file} is another application's SQLite database")
    if state.kind is not FileKind.HERMES:
        raise NotADatabaseError(f"{file} holds no hermes state database (no tables)")
    with translated(str(file)), contextlib.closing(connect_for_reading(str(file))) as raw:
        findings = [str(row[0]) for row in raw.execute("PRAGMA integrity_check(20)")]
        if findings != ["ok"]:
            raise DatabaseCorruptError(f"{file} fails integrity_check: {'; '.join(findings[:3])}")
        sessions = _count(raw, "sessions")
        messages = _count(raw, "messages")
    upstream = upstream_schema_of(url)
    if state.revision is not None and not is_known_revision(state.revision):
        raise HermesStateError(
            f"{file} is at revision {state.revision}, which this hermes-state does not know "
            "(a newer release made it); use that release"
        )
    if state.revision is None and upstream is None:
        raise NotADatabaseError(f"{file} has no revision and no upstream schema version")
    with SessionDB(url=url, read_only=True) as db:  # the store itself must read it
        db.session_count_ge(1)
        db.message_count()
    return Verified(file, file.stat().st_size, state.revision, upstream, sessions, messages)


def check_destination(dest: Path) -> None:
    """A backup's DEST: a new file in an existing folder (bad input otherwise)."""
    if dest.exists() or dest.is_symlink():
        raise InvalidInputError(f"{dest} exists; a backup never replaces a file, choose a new name")
    if not dest.parent.is_dir():
        raise InvalidInputError(f"{dest.parent} is not a folder; create it first")


@contextlib.contextmanager
def _temporary_beside(dest: Path) -> Iterator[Path]:
    """A new file beside ``dest`` (so the final link stays on one file system), removed with
    its journal files unless the caller moved it into place."""
    handle, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
    finally:
        for leftover in (temporary, *(Path(f"{temporary}{s}") for s in ("-wal", "-shm"))):
            with contextlib.suppress(OSError):
                leftover.unlink()


Progress = Callable[[int, int], None]


def _online_copy(
    source: Path, target: sqlite3.Connection, pages: int, progress: Progress | None
) -> int:
    """Copy ``source`` into ``target`` with SQLite's backup API, ``pages`` a step; how many
    times the copy started over because another connection wrote."""
    restarts = 0
    last_remaining: int | None = None
    gave_up = False

    def step(_status: int, remaining: int, total: int) -> None:
        nonlocal restarts, last_remaining, gave_up
        if last_remaining is not None and remaining > last_remaining:
            restarts += 1
            if restarts >= MAX_RESTARTS:
                gave_up = True
                raise InterruptedError("the step-wise copy kept starting over")
        last_remaining = remaining
        if progress is not None:
            progress(total - remaining, total)

    with translated(str(source)), contextlib.closing(connect_for_reading(str(source))) as raw:
        try:
            raw.backup(target, pages=pages, progress=step)
        except InterruptedError:
            if not gave_up:
                raise
            raw.backup(target, pages=-1)  # one read transaction: done whatever writes
    return restarts


def _link_into_place(temporary: Path, dest: Path) -> None:
    """Give the finished copy its name; a file that took the name meanwhile is never replaced."""
    try:
        os.link(temporary, dest)
    except FileExistsError:
        raise InvalidInputError(
            f"{dest} appeared while the backup ran; it was left alone"
        ) from None
    except OSError:  # a file system without hard links: create the name exclusively, then move
        with open(dest, "xb"):
            pass
        os.replace(temporary, dest)


def backup_sqlite(
    source: Path | str,
    dest: Path | str,
    *,
    pages: int = PAGES_PER_STEP,
    progress: Progress | None = None,
) -> Copy:
    """Copy a live SQLite state database to ``dest`` (a new file) with the online backup API,
    ``pages`` a step, while other processes keep writing. The copy is written beside ``dest``,
    checked (:func:`verify_sqlite`) and only then given its name; on any failure nothing is
    left behind."""
    started = time.monotonic()
    origin, target = Path(source), Path(dest)
    if pages == 0 or pages < -1:
        raise InvalidInputError(f"pages must be -1 (all at once) or above 0, not {pages}")
    check_destination(target)
    checked = verify_sqlite(origin)
    with _temporary_beside(target) as temporary:
        with translated(str(temporary)), contextlib.closing(sqlite3.connect(temporary)) as copy:
            restarts = _online_copy(origin, copy, pages, progress)
        made = verify_sqlite(temporary)
        _link_into_place(temporary, target)
    return Copy(checked, _renamed(made, target), time.monotonic() - started, restarts)


def _renamed(verified: Verified, path: Path) -> Verified:
    return Verified(
        path,
        verified.bytes,
        verified.revision,
        verified.upstream_schema,
        verified.sessions,
        verified.messages,
    )


def is_empty_target(path: Path) -> bool:
    """Absent, zero bytes, no tables, or a state database holding no session and no message."""
    state = look_at_sqlite_file(resolve_url(path))
    if state.kind is FileKind.NEW:
        return True
    if state.kind is FileKind.FOREIGN:
        return False
    with contextlib.closing(connect_for_reading(str(path))) as raw:
        return _count(raw, "sessions") == 0 and _count(raw, "messages") == 0


def restore_sqlite(
    source: Path | str,
    target: Path | str,
    *,
    pages: int = PAGES_PER_STEP,
    progress: Progress | None = None,
) -> Copy:
    """Restore the backup ``source`` onto the SQLite database ``target``, which must be absent
    or empty (a database with any session or message is refused, nothing written). Both are
    checked with :func:`verify_sqlite`: the source before, the restored file after."""
    started = time.monotonic()
    origin, destination = Path(source), Path(target)
    if destination.is_dir():
        raise InvalidInputError(f"{destination} is a folder; give the path of a database file")
    if not destination.parent.is_dir():
        raise InvalidInputError(f"{destination.parent} is not a folder; create it first")
    checked = verify_sqlite(origin)
    if destination.exists() and not is_empty_target(destination):
        raise InvalidInputError(
            f"{destination} is not empty (it holds sessions or messages, or is another "
            "application's database); a restore goes onto an absent or empty database only"
        )
    if not destination.exists() or destination.stat().st_size == 0:
        if destination.exists():
            destination.unlink()
        with _temporary_beside(destination) as temporary:
            with contextlib.closing(sqlite3.connect(temporary)) as copy:
                restarts = _online_copy(origin, copy, pages, progress)
            verify_sqlite(temporary)
            _link_into_place(temporary, destination)
    else:  # an existing empty database: written through SQLite, which owns its journal
        with translated(str(destination)), contextlib.closing(sqlite3.connect(destination)) as db:
            restarts = _online_copy(origin, db, pages, progress)
    made = verify_sqlite(destination)
    return Copy(checked, made, time.monotonic() - started, restarts)


@dataclass(frozen=True, slots=True)
class ServerRestore:
    """A restore onto a server database: the backup as checked, the target's counts after."""

    source: Verified
    target: str
    sessions: int
    messages: int
    seconds: float


def server_counts(url: URL) -> tuple[int, int] | None:
    """The sessions and messages of a server database (None: it has no ``sessions`` table)."""
    from sqlalchemy import inspect, text

    from .engine import make_engine

    engine = make_engine(url)
    try:
        with translated(describe(url)), engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            if "sessions" not in tables:
                return None
            sessions = connection.execute(text("SELECT COUNT(*) FROM sessions")).scalar_one()
            messages = 0
            if "messages" in tables:
                messages = connection.execute(text("SELECT COUNT(*) FROM messages")).scalar_one()
            return int(sessions), int(messages)
    finally:
        engine.dispose()


def restore_onto_server(source: Path | str, url: URL) -> ServerRestore:
    """Restore the SQLite backup ``source`` onto the PostgreSQL or MariaDB/MySQL database
    ``url``, which must be empty (no tables, or none of its sessions and messages): the backup
    is checked as :func:`verify_sqlite` checks it, its rows copied by ``db copy``'s
    :func:`~hermes_state.promotion.copy_database` (the tables created, all or nothing per
    batch; a failed copy leaves rows to remove with ``db downgrade base``), then the target's
    counts compared with the backup's."""
    from .promotion import copy_database

    started = time.monotonic()
    checked = verify_sqlite(source)
    before = server_counts(url)
    if before is not None and before != (0, 0):
        raise InvalidInputError(
            f"{describe(url)} is not empty ({before[0]} sessions, {before[1]} messages); a "
            "restore goes onto an absent or empty database only"
        )
    copy_database(resolve_url(Path(source)), url)
    after = server_counts(url) or (0, 0)
    if after != (checked.sessions, checked.messages):
        raise HermesStateError(
            f"{describe(url)} holds {after[0]} sessions and {after[1]} messages after the "
            f"restore, the backup {checked.sessions} and {checked.messages}"
        )
    return ServerRestore(checked, describe(url), after[0], after[1], time.monotonic() - started)


def _masked(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def dump_command(url: URL, dest: Path) -> tuple[list[str], dict[str, str], str]:
    """The server's own dump tool for ``url`` into ``dest``: its argv (no password in it), the
    environment that carries the password, and the command as shown (password masked)."""
    backend = url.get_backend_name()
    password = url.password or ""
    if backend == "postgresql":
        plain = URL.create(
            "postgresql", url.username, None, url.host, url.port, url.database, url.query
        )
        target = plain.render_as_string(hide_password=False)
        argv = ["pg_dump", "--format=custom", "--no-owner", f"--file={dest}", f"--dbname={target}"]
        env = {"PGPASSWORD": str(password)} if password else {}
        prefix = "PGPASSWORD=*** " if password else ""
        return argv, env, prefix + shlex.join(argv)
    if backend in ("mysql", "mariadb"):
        tool = "mariadb-dump" if shutil.which("mariadb-dump") else "mysqldump"
        argv = [tool, "--single-transaction", "--routines", "--triggers", f"--result-file={dest}"]
        if url.host:
            argv.append(f"--host={url.host}")
        if url.port:
            argv.append(f"--port={url.port}")
        if url.username:
            argv.append(f"--user={url.username}")
        argv.append(str(url.database or ""))
        env = {"MYSQL_PWD": str(password)} if password else {}
        prefix = "MYSQL_PWD=*** " if password else ""
        return argv, env, prefix + shlex.join(argv)
    raise InvalidInputError(f"no dump tool is known for {_masked(url)}")
