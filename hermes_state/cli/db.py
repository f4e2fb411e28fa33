"""``hermes-state db``: Alembic migrations of the configured database (upgrade, check, ...)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from sqlalchemy.engine import URL

from .. import schema
from ..engine import describe, is_sqlite, resolve_url
from ..errors import InvalidInputError
from . import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_REFUSED,
    Output,
    add_json_option,
    add_option,
    database_url,
    positive_int,
    repeated,
)

#: What a person types on a terminal to let a downgrade drop rows.
CONFIRMATION: Final = "yes"


def register(commands: Any) -> None:
    db = commands.add_parser("db", help="migrate and inspect the database schema")
    actions = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)

    upgrade = actions.add_parser(
        "upgrade",
        help="migrate up to REVISION (default: head)",
        description="Migrate up to REVISION. An SQLite file must be new or a hermes state "
        "database (of any vintage) and pass `PRAGMA quick_check`; anything else is refused "
        "untouched.",
    )
    upgrade.add_argument("revision", nargs="?", default="head", metavar="REVISION")
    add_option(
        upgrade,
        "--adopt-foreign",
        env="HERMES_STATE_ADOPT_FOREIGN",
        flag=True,
        help="add hermes tables to another application's SQLite file, on purpose",
    )
    _add_sql_option(upgrade, "REVISION or FROM:TO; from base when FROM is not given")
    upgrade.set_defaults(command_function=run_upgrade)

    downgrade = actions.add_parser(
        "downgrade",
        help="migrate down to REVISION ('base': nothing)",
        description="Migrate down to REVISION. A downgrade that drops tables or columns "
        "holding rows lists them with their row counts and proceeds only with --yes, or when "
        f"'{CONFIRMATION}' is typed on a terminal.",
    )
    downgrade.add_argument("revision", metavar="REVISION")
    add_option(
        downgrade,
        "--yes",
        env="HERMES_STATE_DOWNGRADE_YES",
        flag=True,
        help="drop tables and columns holding rows without asking",
    )
    add_option(
        downgrade,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="list what the downgrade would drop, with row counts; change nothing",
    )
    _add_sql_option(downgrade, "as FROM:TO, e.g. head:base")
    add_json_option(downgrade)
    downgrade.set_defaults(command_function=run_downgrade)

    current = actions.add_parser("current", help="print the database's revision")
    add_json_option(current)
    current.set_defaults(command_function=run_current)

    history = actions.add_parser("history", help="list the revisions, the current one marked")
    add_json_option(history)
    history.set_defaults(command_function=run_history)

    copy = actions.add_parser(
        "copy",
        help="copy every table of primary data to another database (promotion)",
        description="Copy every table and column of the database to the one at --to (at head "
        "revision), creating the tables and columns it lacks; FTS indexes and bookkeeping "
        "tables are derived and left behind (the summary names them). Source rows the target "
        "cannot take (NULL in a NOT NULL column, too long, wrong type) refuse the copy before "
        "anything is written; --fill supplies values for NULLs. Idempotent: rows already there "
        "and identical are skipped; rows that differ stop the copy before anything is written "
        "unless --force. Streams in batches and commits each, so an interrupted copy resumes "
        "when re-run.",
    )
    add_option(copy, "--to", env="HERMES_STATE_COPY_TO", metavar="URL", help="target database")
    add_option(
        copy,
        "--force",
        env="HERMES_STATE_COPY_FORCE",
        flag=True,
        help="overwrite target rows that differ",
    )
    add_option(
        copy,
        "--fill",
        env="HERMES_STATE_COPY_FILL",
        repeatable=True,
        metavar="TABLE.COLUMN=VALUE",
        help="value for NULLs of a source column the target requires (NOT NULL); "
        "repeatable; env: comma-separated",
    )
    add_option(
        copy,
        "--batch-size",
        env="HERMES_STATE_COPY_BATCH_SIZE",
        kind=positive_int,
        default=2000,
        metavar="N",
        help="rows per batch (default 2000)",
    )
    add_json_option(copy)
    copy.set_defaults(command_function=run_copy)

    check = actions.add_parser(
        "check", help="compare the database with the models; exit 1 on any difference"
    )
    add_json_option(check)
    check.set_defaults(command_function=run_check)


def _add_sql_option(parser: argparse.ArgumentParser, revisions: str) -> None:
    add_option(
        parser,
        "--sql",
        env="HERMES_STATE_SQL",
        flag=True,
        help="print the DDL for the URL's database kind without connecting to it "
        f"(REVISION {revisions})",
    )


def _print_sql(args: argparse.Namespace, out: Output, direction: str) -> int:
    out.stdout.write(schema.offline_sql(resolve_url(args.url), direction, args.revision))
    return EXIT_OK


def _report_migration(out: Output, url: URL, direction: str, before: str | None) -> None:
    after = schema.revision_of(url, allow_foreign=True)
    where = describe(url)
    if before == after:
        out.line(f"{where} is already at {after or 'base'}")
    else:
        out.line(f"{where}: {direction}d from {before or 'base'} to {after or 'base'}")


def run_upgrade(args: argparse.Namespace, out: Output) -> int:
    if args.sql:
        return _print_sql(args, out, "upgrade")
    url = database_url(args)
    before = schema.revision_of(url, allow_foreign=args.adopt_foreign)
    schema.upgrade(url, args.revision, adopt_foreign=args.adopt_foreign)
    _report_migration(out, url, "upgrade", before)
    return EXIT_OK


def run_downgrade(args: argparse.Namespace, out: Output) -> int:
    if args.sql:
        return _print_sql(args, out, "downgrade")
    url = database_url(args, must_exist=True)
    where = describe(url)
    before, losses = schema.downgrade_losses(url, args.revision)
    holding = [loss for loss in losses if loss.rows]
    document = {
        "database": where,
        "from": before,
        "to": args.revision,
        "drops": [
            {"table": loss.table, "column": loss.column, "rows": loss.rows} for loss in losses
        ],
        "dry_run": args.dry_run,
        "done": False,
    }
    if losses:
        out.line(f"downgrading {where} from {before} to {args.revision} drops:")
        for loss in losses:
            out.line(f"  {loss}")
    if args.dry_run:
        out.json(document)
        if not losses:
            out.line(f"downgrading {where} to {args.revision} drops nothing")
        return EXIT_OK
    if holding and not args.yes and not _confirmed(out, sum(loss.rows for loss in holding)):
        out.json(document)
        out.error(
            f"not downgraded: it would drop data from {where} (listed above). Re-run with "
            "--yes (HERMES_STATE_DOWNGRADE_YES=1) to drop it, or --dry-run to only list it"
        )
        return EXIT_REFUSED
    schema.downgrade(url, args.revision)
    document["done"] = True
    out.json(document)
    _report_migration(out, url, "downgrade", before)
    return EXIT_OK


def _confirmed(out: Output, rows: int) -> bool:
    """A typed confirmation, asked only of a person at a terminal."""
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        return False
    print(
        f"This drops {rows} row(s) or values for good. Type '{CONFIRMATION}' to go on: ",
        end="",
        file=out.stderr,
        flush=True,
    )
    return stdin.readline().strip() == CONFIRMATION


def run_current(args: argparse.Namespace, out: Output) -> int:
    url = database_url(args, must_exist=True)
    revision = schema.revision_of(url)
    is_head = revision == schema.HEAD_REVISION
    out.json(
        {
            "database": describe(url),
            "revision": revision,
            "head": schema.HEAD_REVISION,
            "is_head": is_head,
        }
    )
    out.line(
        f"{revision or schema.NO_REVISION}"
        f"{' (head)' if is_head else f' (head is {schema.HEAD_REVISION})'}"
    )
    if not is_head and not out.as_json:
        out.error(f"run `{schema.upgrade_command(url)}` to bring it to head")
    return EXIT_OK


def run_history(args: argparse.Namespace, out: Output) -> int:
    url = resolve_url(args.url)
    exists = not (is_sqlite(url) and url.database and not Path(url.database).exists())
    entries = schema.history(url if exists else None)
    out.json(
        [
            {
                "revision": entry.revision,
                "down_revision": entry.down_revision,
                "message": entry.message,
                "current": entry.is_current,
                "head": entry.is_head,
            }
            for entry in entries
        ]
    )
    for entry in entries:
        marks = [
            word for word, on in (("current", entry.is_current), ("head", entry.is_head)) if on
        ]
        marker = "*" if entry.is_current else " "
        suffix = f" ({', '.join(marks)})" if marks else ""
        out.line(f"{marker} {entry.revision}{suffix}  {entry.message}")
    return EXIT_OK


def run_check(args: argparse.Namespace, out: Output) -> int:
    url = database_url(args, must_exist=True)
    found = schema.compare(url)
    out.json(
        {
            "database": describe(url),
            "in_sync": not found.drifts,
            "differences": [{"kind": drift.kind, "detail": drift.detail} for drift in found.drifts],
            "adopted": [{"kind": drift.kind, "detail": drift.detail} for drift in found.adopted],
        }
    )
    if found.adopted:
        out.line("adopted (legacy columns that predate hermes-state, kept as they were):")
        for drift in found.adopted:
            out.line(f"  {drift}")
    if not found.drifts:
        out.line(f"{describe(url)} matches the models at {schema.HEAD_REVISION}")
        return EXIT_OK
    out.line(f"{describe(url)} differs from the models:")
    for drift in found.drifts:
        out.line(f"  {drift}")
    if any(drift.kind == schema.DAMAGE for drift in found.drifts):
        return EXIT_BAD_INPUT
    if any(drift.kind == "revision" for drift in found.drifts):
        out.line(f"  run `{schema.upgrade_command(url)}` to bring it to head")
    return EXIT_REFUSED


def run_copy(args: argparse.Namespace, out: Output) -> int:
    from ..promotion import Fill, copy_database

    if not args.to:
        raise InvalidInputError("db copy needs --to URL (or HERMES_STATE_COPY_TO)")
    fills = [Fill.parse(given) for given in repeated(args, "fill")]
    source = database_url(args, must_exist=True)
    progress = _progress_bar(out.stderr) if out.stderr.isatty() and not out.as_json else None
    report = copy_database(
        source,
        resolve_url(args.to),
        force=args.force,
        batch_size=args.batch_size,
        progress=progress,
        fills=fills,
    )
    out.json(
        {
            "source": report.source,
            "target": report.target,
            "tables": [
                {
                    "table": table.table,
                    "source_rows": table.source_rows,
                    "copied": table.copied,
                    "identical": table.identical,
                    "overwritten": table.overwritten,
                    "target_rows": table.target_rows,
                    "created": table.created,
                    "added_columns": table.added_columns,
                }
                for table in report.tables
            ],
            "skipped": [{"table": skip.table, "reason": skip.reason} for skip in report.skipped],
        }
    )
    out.line(f"copied {report.source} -> {report.target}")
    width = max([15, *(len(table.table) for table in report.tables)])
    for table in report.tables:
        shaped = ""
        if table.created:
            shaped = "; table created"
        elif table.added_columns:
            shaped = f"; columns added: {', '.join(table.added_columns)}"
        out.line(
            f"  {table.table:<{width}} {table.source_rows:>9} rows: {table.copied} copied, "
            f"{table.identical} already there, {table.overwritten} overwritten "
            f"(target now {table.target_rows}){shaped}"
        )
    if report.skipped:
        out.line("not copied (derived or bookkeeping):")
        for skip in report.skipped:
            out.line(f"  {skip.table}: {skip.reason}")
    return EXIT_OK


def _progress_bar(stream: Any) -> Any:
    def show(table: str, done: int, total: int) -> None:
        share = done / total if total else 1.0
        filled = int(share * 30)
        bar = "#" * filled + "-" * (30 - filled)
        end = "\n" if done >= total else ""
        print(f"\r{table:<15} [{bar}] {done:>9}/{total}", end=end, file=stream, flush=True)

    return show
