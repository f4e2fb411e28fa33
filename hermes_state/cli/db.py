"""``hermes-state db``: Alembic migrations of the configured database (upgrade, check, ...)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TextIO

from sqlalchemy.engine import URL

from .. import drift, schema
from ..engine import describe, is_sqlite, resolve_url
from ..errors import InvalidInputError
from . import db_retention
from .common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_REFUSED,
    Output,
    Result,
    Table,
    add_option,
    command,
    database_url,
    group,
    refuse_damaged,
    repeated,
    upgrade_as_typed,
    whole_number,
)
from .db_backup import configure as configure_backup_and_restore

#: What a person types on a terminal to let a downgrade drop rows.
CONFIRMATION: Final = "yes"


def register(commands: Any) -> None:
    actions = group(commands, "db", help="migrate and inspect the database schema")
    for configure in (
        configure_upgrade,
        configure_downgrade,
        configure_current,
        configure_history,
        configure_copy,
        configure_check,
    ):
        configure(actions)
    configure_backup_and_restore(actions)
    db_retention.configure(actions)  # prune, vacuum


def configure_upgrade(actions: Any) -> None:
    parser = command(
        actions,
        "upgrade",
        run_upgrade,
        help="migrate up to REVISION (default: head)",
        description="Migrate up to REVISION. An SQLite file must be new or a hermes state "
        "database (of any vintage) and pass `PRAGMA quick_check`; anything else is refused "
        "untouched.",
    )
    parser.add_argument("revision", nargs="?", default="head", metavar="REVISION")
    add_option(
        parser,
        "--adopt-foreign",
        env="HERMES_STATE_ADOPT_FOREIGN",
        flag=True,
        help="add hermes tables to another application's SQLite file, on purpose",
    )
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="say what the upgrade would do: from and to which revision, each migration and "
        "what it would add, whether the file would be created or adopted; change nothing "
        "(--sql, when given, wins: it does not even connect)",
    )
    _add_sql_option(parser, "REVISION or FROM:TO; from base when FROM is not given")


def _add_sql_option(parser: argparse.ArgumentParser, revisions: str) -> None:
    add_option(
        parser,
        "--sql",
        env="HERMES_STATE_SQL",
        flag=True,
        help="print the DDL for the URL's database kind without connecting to it "
        f"(REVISION {revisions})",
    )


def _offline_sql(args: argparse.Namespace, direction: str) -> Result:
    sql = schema.offline_sql(resolve_url(args.url), direction, args.revision)
    return Result({"direction": direction, "revision": args.revision, "sql": sql}, [sql.rstrip()])


def _migrated(url: URL, direction: str, before: str | None, document: dict[str, Any]) -> Result:
    after = schema.revision_of(url, allow_foreign=True)
    where = describe(url)
    document.update({"database": where, "direction": direction, "from": before, "to": after})
    was, now = before or schema.NO_REVISION, after or schema.NO_REVISION
    if before == after:
        return Result(document, [f"{where} is already at {now}"])
    return Result(document, [f"{where}: {direction}d from {was} to {now}"])


def run_upgrade(args: argparse.Namespace, out: Output) -> Result:
    if args.sql:
        return _offline_sql(args, "upgrade")
    url = database_url(args)
    if args.dry_run:
        return _upgrade_rehearsed(url, args)
    before = schema.revision_of(url, allow_foreign=args.adopt_foreign)
    schema.upgrade(url, args.revision, adopt_foreign=args.adopt_foreign)
    return _migrated(url, "upgrade", before, {"dry_run": False})


def _upgrade_rehearsed(url: URL, args: argparse.Namespace) -> Result:
    from ..upgrade_plan import Start, plan_upgrade

    plan = plan_upgrade(url, args.revision, adopt_foreign=args.adopt_foreign)
    where, count = plan.database, len(plan.steps)
    was, now = plan.before or schema.NO_REVISION, plan.after or schema.NO_REVISION
    head = " (head)" if plan.after == schema.HEAD_REVISION else ""
    span = f"from {was} to {now}{head}, in {count} migration{'s' if count != 1 else ''}"
    document = {
        "database": where,
        "direction": "upgrade",
        "dry_run": True,
        "start": plan.start.value,
        "from": plan.before,
        "to": plan.after,
        "migrations": [
            {
                "revision": step.revision,
                "message": step.message,
                "changes": [
                    {
                        "action": change.action,
                        "table": change.table,
                        "name": change.name,
                        "columns": list(change.columns),
                    }
                    for change in step.changes
                ],
            }
            for step in plan.steps
        ],
    }
    if not plan.steps:
        return Result(
            document, [f"dry run: {where} is already at {now}{head}; nothing would change"]
        )
    opening = {
        Start.CREATE: f"would create {where} and migrate it {span}:",
        Start.NEW: f"would create the tables in the empty database {where}, {span}:",
        Start.ADOPT: f"would adopt {where} in place (a hermes state database without a "
        f"revision: every table, column and row is kept), {span}, adding only:",
        Start.ADOPT_FOREIGN: f"would add hermes tables to {where}, another application's "
        f"database (--adopt-foreign), {span}, adding only:",
        Start.MIGRATE: f"would migrate {where} {span}:",
    }[plan.start]
    lines: list[str | Table] = [f"dry run: {opening}"]
    for step in plan.steps:
        lines.append(f"  {step.revision}  {step.message}")
        lines += [f"    {change}" for change in step.changes] or ["    (no change)"]
    return Result(document, lines)


def configure_downgrade(actions: Any) -> None:
    parser = command(
        actions,
        "downgrade",
        run_downgrade,
        help="migrate down to REVISION ('base': nothing)",
        description="Migrate down to REVISION. A downgrade that drops tables or columns "
        "holding rows lists them with their row counts and proceeds only with --yes, or when "
        f"'{CONFIRMATION}' is typed on a terminal.",
    )
    parser.add_argument("revision", metavar="REVISION")
    add_option(
        parser,
        "--yes",
        env="HERMES_STATE_DOWNGRADE_YES",
        flag=True,
        help="drop tables and columns holding rows without asking",
    )
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="list what the downgrade would drop, with row counts; change nothing",
    )
    _add_sql_option(parser, "as FROM:TO, e.g. head:base")


def run_downgrade(args: argparse.Namespace, out: Output) -> Result:
    if args.sql:
        return _offline_sql(args, "downgrade")
    url = database_url(args, must_exist=True)
    where = describe(url)
    before, losses = schema.downgrade_losses(url, args.revision)
    holding = [loss for loss in losses if loss.rows]
    document: dict[str, Any] = {
        "database": where,
        "from": before,
        "to": args.revision,
        "drops": [
            {"table": loss.table, "column": loss.column, "rows": loss.rows} for loss in losses
        ],
        "dry_run": args.dry_run,
        "done": False,
    }
    listing: list[str | Table] = []
    if losses:
        listing.append(f"downgrading {where} from {before} to {args.revision} drops:")
        listing += [f"  {loss}" for loss in losses]
    if args.dry_run:
        if not losses:
            listing.append(f"downgrading {where} to {args.revision} drops nothing")
        return Result(document, listing)
    if holding and not args.yes:
        out.emit(Result(document, listing))  # the list first: it is what a person confirms
        if not _confirmed(out, sum(loss.rows for loss in holding)):
            return Result(
                document,
                [],
                EXIT_REFUSED,
                error=f"not downgraded: it would drop data from {where} (listed above). Re-run "
                "with --yes (HERMES_STATE_DOWNGRADE_YES=1) to drop it, or --dry-run to only "
                "list it",
            )
        listing = []
    schema.downgrade(url, args.revision)
    document["done"] = True
    done = _migrated(url, "downgrade", before, document)
    return Result(done.document, [*listing, *done.text])


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


def configure_current(actions: Any) -> None:
    command(
        actions,
        "current",
        run_current,
        help="print the database's revision ('not adopted (upstream schema N)' for an upstream "
        "file db upgrade has not adopted; a damaged file is named, exit 2)",
    )


def run_current(args: argparse.Namespace, out: Output) -> Result:
    url = database_url(args, must_exist=True)
    if is_sqlite(url):
        refuse_damaged(url)
    revision = schema.revision_of(url)
    is_head = revision == schema.HEAD_REVISION
    document: dict[str, Any] = {
        "database": describe(url),
        "revision": revision,
        "head": schema.HEAD_REVISION,
        "is_head": is_head,
    }
    shown = revision or schema.NO_REVISION
    if (
        revision is None
        and is_sqlite(url)
        and schema.look_at_sqlite_file(url).kind is schema.FileKind.HERMES
    ):
        upstream = schema.upstream_schema_of(url)
        document["adopted"] = False
        document["upstream_schema"] = upstream
        shown = f"not adopted (upstream schema {upstream if upstream is not None else 'unknown'})"
    suffix = " (head)" if is_head else f" (head is {schema.HEAD_REVISION})"
    hint = None if is_head or out.as_json else f"run `{upgrade_as_typed(args)}` to bring it to head"
    if hint is not None:
        print(hint, file=out.stderr)
    return Result(document, [f"{shown}{suffix}"])


def configure_history(actions: Any) -> None:
    command(actions, "history", run_history, help="list the revisions, the current one marked")


def run_history(args: argparse.Namespace, out: Output) -> Result:
    url = database_url(args)
    exists = not (is_sqlite(url) and url.database and not Path(url.database).exists())
    entries = schema.history(url if exists else None)
    document = [
        {
            "revision": entry.revision,
            "down_revision": entry.down_revision,
            "message": entry.message,
            "current": entry.is_current,
            "head": entry.is_head,
        }
        for entry in entries
    ]
    lines: list[str | Table] = []
    for entry in entries:
        marks = [
            word for word, on in (("current", entry.is_current), ("head", entry.is_head)) if on
        ]
        marker = "*" if entry.is_current else " "
        suffix = f" ({', '.join(marks)})" if marks else ""
        lines.append(f"{marker} {entry.revision}{suffix}  {entry.message}")
    return Result(document, lines)


def configure_check(actions: Any) -> None:
    command(
        actions,
        "check",
        run_check,
        help="compare the database with the models; exit 1 on any difference",
    )


def run_check(args: argparse.Namespace, out: Output) -> Result:
    url = database_url(args, must_exist=True)
    found = drift.compare(url)
    document = {
        "database": describe(url),
        "in_sync": not found.drifts,
        "differences": [{"kind": d.kind, "detail": d.detail} for d in found.drifts],
        "adopted": [{"kind": d.kind, "detail": d.detail} for d in found.adopted],
    }
    lines: list[str | Table] = []
    if found.adopted:
        lines.append("adopted (legacy columns that predate hermes-state, kept as they were):")
        lines += [f"  {difference}" for difference in found.adopted]
    if not found.drifts:
        lines.append(f"{describe(url)} matches the models at {schema.HEAD_REVISION}")
        return Result(document, lines)
    lines.append(f"{describe(url)} differs from the models:")
    lines += [f"  {difference}" for difference in found.drifts]
    if any(difference.kind == drift.DAMAGE for difference in found.drifts):
        return Result(document, lines, code=EXIT_BAD_INPUT)
    if any(difference.kind == "revision" for difference in found.drifts):
        lines.append(f"  run `{upgrade_as_typed(args)}` to bring it to head")
    return Result(document, lines, code=EXIT_REFUSED)


def configure_copy(actions: Any) -> None:
    parser = command(
        actions,
        "copy",
        run_copy,
        help="copy every table of primary data to another database (promotion)",
        description="Copy every table and column of the database to the one at --to (at head "
        "revision), creating the tables and columns it lacks; FTS indexes and bookkeeping "
        "tables are derived and left behind (the summary names them). Source rows the target "
        "cannot take (NULL in a NOT NULL column, too long, wrong type) refuse the copy before "
        "anything is written; --fill supplies values for NULLs. Idempotent: rows already there "
        "and identical are skipped; rows that differ stop the copy before anything is written "
        "unless --force. Streams in batches and commits each, so an interrupted copy resumes "
        "when re-run. On a terminal a progress line shows each table's rate and time left.",
    )
    add_option(parser, "--to", env="HERMES_STATE_COPY_TO", metavar="URL", help="target database")
    add_option(
        parser,
        "--force",
        env="HERMES_STATE_COPY_FORCE",
        flag=True,
        help="overwrite target rows that differ",
    )
    add_option(
        parser,
        "--fill",
        env="HERMES_STATE_COPY_FILL",
        repeatable=True,
        metavar="TABLE.COLUMN=VALUE",
        help="value for NULLs of a source column the target requires (NOT NULL); "
        "repeatable; env: comma-separated",
    )
    add_option(
        parser,
        "--batch-size",
        env="HERMES_STATE_COPY_BATCH_SIZE",
        kind=whole_number(1, 100_000),
        default=2000,
        metavar="N",
        help="rows per batch (1 up to 100000; default 2000)",
    )
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="run the pre-flight only: per table the rows that would be copied, those already "
        "there and those that differ, what is left behind and why, the --fill counts, what "
        "would refuse the copy, and each database's state; change nothing",
    )


def run_copy(args: argparse.Namespace, out: Output) -> Result:
    from ..promotion import Fill, copy_database

    if not args.to or not args.to.strip():
        raise InvalidInputError("db copy needs --to URL (or HERMES_STATE_COPY_TO)")
    out.typed_urls.append(args.to)
    fills = [Fill.parse(given) for given in repeated(args, "fill")]
    source = database_url(args, must_exist=True)
    if args.dry_run:
        return _copy_rehearsed(source, resolve_url(args.to), fills, args)
    report = copy_database(
        source,
        resolve_url(args.to),
        force=args.force,
        batch_size=args.batch_size,
        progress=progress_line(out.stderr) if out.live else None,
        fills=fills,
    )
    document = {
        "source": report.source,
        "target": report.target,
        "dry_run": False,
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
        "skipped": [
            {"table": skip.table, "reason": skip.reason, "derived": skip.derived}
            for skip in report.skipped
        ],
        "fts_rebuilt": report.fts_rebuilt,
    }
    table = Table(
        [
            "TABLE",
            "SOURCE ROWS",
            "COPIED",
            "ALREADY THERE",
            "OVERWRITTEN",
            "TARGET ROWS",
            "SCHEMA CHANGE",
        ],
        [
            (
                t.table,
                t.source_rows,
                t.copied,
                t.identical,
                t.overwritten,
                t.target_rows,
                _shape(t.created, t.added_columns),
            )
            for t in report.tables
        ],
    )
    lines: list[str | Table] = [f"copied {report.source} -> {report.target}", table]
    if report.fts_rebuilt:
        lines.append("full-text index rebuilt from the copied messages")
    lines += _not_copied(report.skipped)
    return Result(document, lines, EXIT_OK)


def _not_copied(skipped: list[Any]) -> list[str | Table]:
    """The source tables left behind that the target does not rebuild or keep by itself.

    Derived ones (the full-text index, SQLite's counters, hermes-state's bookkeeping) are in
    the JSON document only: listing them on every run says nothing."""
    kept = [(skip.table, skip.reason) for skip in skipped if not skip.derived]
    if not kept:
        return []
    return [
        "not copied (no table the models know, and not derived):",
        Table(["TABLE", "REASON"], kept),
    ]


def _copy_rehearsed(source: URL, target: URL, fills: list[Any], args: argparse.Namespace) -> Result:
    from ..promotion import SideState, plan_copy

    plan = plan_copy(source, target, force=args.force, batch_size=args.batch_size, fills=fills)

    def side(state: SideState) -> dict[str, Any]:
        return {
            "database": state.database,
            "revision": state.revision,
            "exists": state.exists,
            "upgraded_first": state.upgraded_first,
            "state": str(state),
        }

    refusal = plan.refusal
    document = {
        "source": side(plan.source),
        "target": side(plan.target),
        "dry_run": True,
        "force": plan.force,
        "would_copy": refusal is None,
        "refusal": refusal,
        "tables": [
            {
                "table": t.table,
                "source_rows": t.source_rows,
                "new": t.new,
                "identical": t.identical,
                "differing": t.differing,
                "target_rows": t.target_rows,
                "created": t.created,
                "added_columns": t.added_columns,
            }
            for t in plan.tables
        ],
        "skipped": [
            {"table": skip.table, "reason": skip.reason, "derived": skip.derived}
            for skip in plan.skipped
        ],
        "fills": [
            {
                "table": f.fill.table,
                "column": f.fill.column,
                "value": f.fill.value,
                "nulls": f.nulls,
            }
            for f in plan.fills
        ],
        "problems": plan.problems,
        "conflicts": plan.conflicts,
    }
    pair = f"{plan.source.database} -> {plan.target.database}"
    verdict = f"would copy {pair}" if refusal is None else f"would refuse to copy {pair}"
    lines: list[str | Table] = [
        f"dry run: {verdict}",
        f"source: {plan.source}",
        f"target: {plan.target}",
        Table(
            [
                "TABLE",
                "SOURCE ROWS",
                "NEW",
                "ALREADY THERE",
                "DIFFERENT",
                "TARGET ROWS",
                "SCHEMA CHANGE",
            ],
            [
                (
                    t.table,
                    t.source_rows,
                    t.new,
                    t.identical,
                    t.differing,
                    t.target_rows,
                    _shape(t.created, t.added_columns, planned=True),
                )
                for t in plan.tables
            ],
        ),
    ]
    differing = sum(t.differing for t in plan.tables)
    if differing:
        lines.append(
            f"{differing} row(s) differ from the target's: "
            + (
                "--force would overwrite them"
                if plan.force
                else "they refuse the copy without --force"
            )
        )
    lines += [f"--fill {f.fill} would fill {f.nulls} NULL(s)" for f in plan.fills]
    lines += [f"refused: {problem}" for problem in plan.problems]
    lines += _not_copied(plan.skipped)
    if refusal is not None:
        return Result(document, lines, EXIT_REFUSED, error=f"the copy would be refused: {refusal}")
    return Result(document, lines)


def _shape(created: bool, added_columns: list[str], *, planned: bool = False) -> str | None:
    """What the copy changed in a target table's shape, for the summary's last column."""
    if created:
        return "table to create" if planned else "table created"
    if added_columns:
        return f"columns {'to add' if planned else 'added'}: {', '.join(added_columns)}"
    return None


def progress_line(
    stream: TextIO, clock: Callable[[], float] = time.monotonic
) -> Callable[[str, int, int], None]:
    """A progress callback drawing one line per table: bar, rows, rate and time left."""
    # The first report of a table (after its first batch) starts its clock.
    started: dict[str, tuple[float, int]] = {}

    def show(table: str, done: int, total: int) -> None:
        now = clock()
        began, first = started.setdefault(table, (now, done))
        share = done / total if total else 1.0
        filled = int(share * 30)
        bar = "#" * filled + "-" * (30 - filled)
        elapsed = now - began
        rate = (done - first) / elapsed if elapsed > 0 else 0.0
        left = f"{(total - done) / rate:.0f} s left" if rate > 0 and done < total else ""
        speed = f"{rate:,.0f} rows/s" if rate > 0 else ""
        end = "\n" if done >= total else ""
        print(
            f"\r\x1b[K{table:<15} [{bar}] {done:>9}/{total}  {speed}  {left}".rstrip(),
            end=end,
            file=stream,
            flush=True,
        )

    return show
