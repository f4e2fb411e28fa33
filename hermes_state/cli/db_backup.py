"""``hermes-state db backup`` and ``db restore``: verified copies of a state database."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Final

from .. import backup
from ..engine import describe, is_sqlite
from ..errors import (
    DatabaseCorruptError,
    ForeignDatabaseError,
    HermesStateError,
    InvalidInputError,
    NotADatabaseError,
)
from .common import (
    Output,
    Result,
    add_option,
    command,
    database_url,
    whole_number,
)

#: How long a server's dump tool may run (``--run-dump``) before it is stopped.
DUMP_TIMEOUT_SECONDS: Final = 6 * 3600


def configure(actions: Any) -> None:
    configure_backup(actions)
    configure_restore(actions)


def _dry_run_option(parser: argparse.ArgumentParser, what: str) -> None:
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help=f"check the source and the destination, say what {what} would do; write nothing",
    )


def _pages_option(parser: argparse.ArgumentParser) -> None:
    add_option(
        parser,
        "--pages-per-step",
        env="HERMES_STATE_BACKUP_PAGES",
        kind=whole_number(1, 1_000_000),
        default=backup.PAGES_PER_STEP,
        metavar="N",
        help=f"database pages copied per step of the online copy (1 up to 1000000; default "
        f"{backup.PAGES_PER_STEP})",
    )


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return str(count)


def _document(done: backup.Copy) -> dict[str, Any]:
    def one(found: backup.Verified) -> dict[str, Any]:
        return {
            "path": str(found.path),
            "bytes": found.bytes,
            "revision": found.revision,
            "upstream_schema": found.upstream_schema,
            "sessions": found.sessions,
            "messages": found.messages,
        }

    return {
        "source": one(done.source),
        "copy": one(done.copy),
        "integrity_check": "ok",
        "seconds": round(done.seconds, 3),
        "restarts": done.restarts,
    }


def _lines(verb: str, done: backup.Copy) -> list[str | Any]:
    copy = done.copy
    return [
        f"{verb} {done.source.path} to {copy.path}: {_size(copy.bytes)}, {copy.sessions} "
        f"session(s), {copy.messages} message(s), {copy.described}",
        f"integrity_check ok and opened by the store; {done.seconds:.2f} s"
        + (f", the online copy started over {done.restarts} time(s)" if done.restarts else ""),
    ]


def _would(verb: str, found: backup.Verified, onto: Path) -> Result:
    document = {
        "dry_run": True,
        "source": str(found.path),
        "destination": str(onto),
        "bytes": found.bytes,
        "sessions": found.sessions,
        "messages": found.messages,
        "revision": found.revision,
        "upstream_schema": found.upstream_schema,
    }
    return Result(
        document,
        [
            f"dry run: would {verb} {found.path} ({_size(found.bytes)}, {found.sessions} "
            f"session(s), {found.messages} message(s), {found.described}, integrity_check ok) "
            f"to {onto}"
        ],
    )


# -- backup ---------------------------------------------------------------------------------------


def configure_backup(actions: Any) -> None:
    parser = command(
        actions,
        "backup",
        run_backup,
        help="copy the database to a new file, online and verified",
        description="SQLite: copy the database to DEST (a new file) with SQLite's online backup "
        "API, in steps, while gateways and watchers keep writing; the copy is written beside "
        "DEST, passes `PRAGMA integrity_check` and is opened by the store before it takes the "
        "name DEST. An existing DEST is refused. PostgreSQL and MariaDB/MySQL: prints the "
        "pg_dump / mariadb-dump command for the database (password masked), or runs it with "
        "--run-dump.",
    )
    parser.add_argument("dest", metavar="DEST", help="the backup file to create")
    _pages_option(parser)
    _dry_run_option(parser, "the backup")
    add_option(
        parser,
        "--run-dump",
        env="HERMES_STATE_BACKUP_RUN_DUMP",
        flag=True,
        help="servers: run pg_dump / mariadb-dump (found on PATH) instead of printing it",
    )


def run_backup(args: argparse.Namespace, out: Output) -> Result:
    url = database_url(args, must_exist=True)
    dest = Path(args.dest).expanduser()
    if not is_sqlite(url):
        return _server_backup(url, dest, args.run_dump)
    assert url.database is not None
    if args.dry_run:
        backup.check_destination(dest)
        found = backup.verify_sqlite(Path(url.database))
        return _would("back up", found, dest)

    def shown(done: int, total: int) -> None:
        out.progress(f"backup: {done} of {total} pages")

    made = backup.backup_sqlite(Path(url.database), dest, pages=args.pages_per_step, progress=shown)
    return Result(_document(made), _lines("backed up", made))


def _server_backup(url: Any, dest: Path, run: bool) -> Result:
    argv, env, shown = backup.dump_command(url, dest)
    document: dict[str, Any] = {"database": describe(url), "command": shown, "ran": False}
    if not run:
        return Result(
            document,
            [
                f"{describe(url)} is a server database: back it up with its own dump tool,",
                f"  {shown}",
                "(or run this command with --run-dump to have it run here)",
            ],
        )
    if dest.exists():
        raise InvalidInputError(f"{dest} exists; a backup never replaces a file")
    if not dest.parent.is_dir():
        raise InvalidInputError(f"{dest.parent} is not a folder; create it first")
    if shutil.which(argv[0]) is None:
        raise HermesStateError(f"{argv[0]} is not on PATH; install it, or run: {shown}")
    try:
        done = subprocess.run(
            argv,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=DUMP_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        dest.unlink(missing_ok=True)
        raise HermesStateError(f"{argv[0]} ran out of time; nothing was kept") from None
    if done.returncode != 0 or not dest.is_file() or dest.stat().st_size == 0:
        dest.unlink(missing_ok=True)
        said = " ".join(done.stderr.split())[:300]
        raise HermesStateError(f"{argv[0]} failed (exit {done.returncode}): {said}")
    document.update(ran=True, path=str(dest), bytes=dest.stat().st_size)
    return Result(document, [f"{argv[0]} wrote {dest} ({_size(dest.stat().st_size)})"])


# -- restore --------------------------------------------------------------------------------------


def configure_restore(actions: Any) -> None:
    parser = command(
        actions,
        "restore",
        run_restore,
        help="restore a backup onto an absent or empty database",
        description="Restore the SQLite backup SRC onto the database of --url (default: "
        "$HERMES_HOME/state.db), which must be absent or empty: a database holding any session "
        "or message is refused and left as it is. SRC must pass `PRAGMA integrity_check` and "
        "be a hermes-state database at a known revision (or upstream's own state.db); the "
        "restored file is checked the same way. Onto an empty PostgreSQL or MariaDB/MySQL "
        "database the backup's rows are copied as `db copy` copies them (tables created), "
        "and the target's session and message counts compared with the backup's.",
    )
    parser.add_argument("source", metavar="SRC", help="the SQLite backup file to restore")
    _pages_option(parser)
    _dry_run_option(parser, "the restore")


def _checked_source(source: Path) -> None:
    """SRC is refused as bad input naming SRC (not the --url hint of a store's database)."""
    try:
        backup.verify_sqlite(source)
    except (NotADatabaseError, ForeignDatabaseError, DatabaseCorruptError) as exc:
        raise InvalidInputError(f"SRC: {exc}; give a backup of a state database") from None


def run_restore(args: argparse.Namespace, out: Output) -> Result:
    source = Path(args.source).expanduser()
    url = database_url(args)
    _checked_source(source)
    if not is_sqlite(url):
        return _onto_server(url, source, args.dry_run)
    assert url.database is not None
    if args.dry_run:
        target = Path(url.database)
        if target.exists() and not backup.is_empty_target(target):
            raise InvalidInputError(
                f"{target} is not empty; a restore goes onto an absent or empty database only"
            )
        return _would("restore", backup.verify_sqlite(source), target)

    def shown(done: int, total: int) -> None:
        out.progress(f"restore: {done} of {total} pages")

    made = backup.restore_sqlite(
        source, Path(url.database), pages=args.pages_per_step, progress=shown
    )
    return Result(_document(made), _lines("restored", made))


def _onto_server(url: Any, source: Path, dry_run: bool) -> Result:
    if dry_run:
        found = backup.verify_sqlite(source)
        held = backup.server_counts(url)
        if held is not None and held != (0, 0):
            raise InvalidInputError(
                f"{describe(url)} is not empty ({held[0]} sessions, {held[1]} messages); a "
                "restore goes onto an absent or empty database only"
            )
        return _would("restore", found, Path(describe(url)))
    done = backup.restore_onto_server(source, url)
    document = {
        "source": {"path": str(done.source.path), "sessions": done.source.sessions},
        "target": done.target,
        "sessions": done.sessions,
        "messages": done.messages,
        "seconds": round(done.seconds, 3),
    }
    return Result(
        document,
        [
            f"restored {done.source.path} onto {done.target} (by `db copy`): {done.sessions} "
            f"session(s), {done.messages} message(s), the backup's counts; {done.seconds:.2f} s"
        ],
    )
