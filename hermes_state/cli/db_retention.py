"""``hermes-state db prune`` and ``db vacuum``: retention of old sessions and giving the space
they held back."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

from ..errors import InvalidInputError
from ..plans.retention import AUTO_VACUUM_MIN_FREELIST_RATIO, MAX_PRUNE_BATCH, PRUNE_BATCH
from ..validation import require_identifier
from .common import (
    EXIT_REFUSED,
    Output,
    Result,
    Table,
    add_option,
    command,
    open_store,
    whole_number,
)

#: The longest retention ``db prune --older-than`` takes, in days (100 years).
MAX_DAYS: Final = 36_500
#: How many of the sessions that go a prune lists before it asks.
LISTED: Final = 20
#: What a person types on a terminal to let a prune delete sessions.
CONFIRMATION: Final = "yes"


def configure(actions: Any) -> None:
    configure_prune(actions)
    configure_vacuum(actions)


# -- db prune ------------------------------------------------------------------------------------


def _source(text: str) -> str:
    try:
        return require_identifier("--source", text, max_length=64)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def configure_prune(actions: Any) -> None:
    parser = command(
        actions,
        "prune",
        run_prune,
        help="delete ended sessions inactive for DAYS days, with their messages",
        description="Delete the ended sessions inactive for more than DAYS days (their newest "
        "message or activity, else their start) with their messages, in short batches. "
        "Never deleted: open sessions, pinned ones, a compression segment whose conversation "
        "goes on, a session whose handoff is pending or running, a conversation with a live "
        "turn lease. Lists what goes, with counts, and proceeds only with --yes or when "
        f"'{CONFIRMATION}' is typed on a terminal.",
    )
    add_option(
        parser,
        "--older-than",
        env="HERMES_STATE_DB_PRUNE_OLDER_THAN",
        kind=whole_number(1, MAX_DAYS),
        metavar="DAYS",
        help=f"inactivity in whole days (1 up to {MAX_DAYS}; required)",
        required=True,
    )
    add_option(
        parser,
        "--source",
        env="HERMES_STATE_DB_PRUNE_SOURCE",
        kind=_source,
        metavar="SOURCE",
        help="only sessions of this source (cli, telegram, ...)",
    )
    add_option(
        parser,
        "--batch-size",
        env="HERMES_STATE_DB_PRUNE_BATCH",
        kind=whole_number(1, MAX_PRUNE_BATCH),
        default=PRUNE_BATCH,
        metavar="N",
        help=f"sessions deleted per transaction (1 up to {MAX_PRUNE_BATCH}; default {PRUNE_BATCH})",
    )
    add_option(
        parser,
        "--yes",
        env="HERMES_STATE_DB_PRUNE_YES",
        flag=True,
        help="delete without asking",
    )
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="list what the prune would delete, with counts; change nothing",
    )


def _what(args: argparse.Namespace) -> str:
    scope = f" of source {args.source!r}" if args.source else ""
    return f"ended session(s){scope} inactive for more than {args.older_than} day(s)"


def run_prune(args: argparse.Namespace, out: Output) -> Result:
    if args.older_than is None:
        raise InvalidInputError("db prune needs --older-than DAYS")
    with open_store(args, must_exist=True, read_only=args.dry_run) as db:
        where = db.where
        preview = db.prune_report(
            args.older_than, args.source, dry_run=True, batch_size=args.batch_size, sample=LISTED
        )
        document: dict[str, Any] = {
            "database": where,
            "older_than_days": args.older_than,
            "source": args.source,
            "dry_run": args.dry_run,
            "would_delete": {"sessions": preview["sessions"], "messages": preview["messages"]},
            "listed": preview["sample"],
            "deleted": None,
        }
        count, messages = preview["sessions"], preview["messages"]
        listing: list[str | Table] = [f"{where}: {count} {_what(args)}, with {messages} message(s)"]
        if preview["sample"]:
            more = count - len(preview["sample"])
            listing.append(Table(["SESSION"], [(sid,) for sid in preview["sample"]]))
            if more > 0:
                listing.append(f"... and {more} more")
        if args.dry_run or count == 0:
            if not args.dry_run:
                listing.append("nothing to prune")
            return Result(document, listing)
        if not args.yes:
            if sys.stdin is None or not sys.stdin.isatty():
                return Result(
                    document,
                    listing,
                    EXIT_REFUSED,
                    error=f"not pruned: {count} session(s) would be deleted and this is no "
                    "terminal to confirm on. Re-run with --yes (HERMES_STATE_DB_PRUNE_YES=1) "
                    "to delete them, or --dry-run to only list them",
                )
            out.emit(Result(document, listing))  # the list first: it is what a person confirms
            if not _confirmed(out, count, messages):
                return Result(
                    document, [], EXIT_REFUSED, error="not pruned: the prune was not confirmed"
                )
            listing = []
        done = db.prune_report(args.older_than, args.source, batch_size=args.batch_size)
    document["deleted"] = {key: done[key] for key in ("sessions", "messages", "batches")}
    document["seconds"] = done["seconds"]
    document["longest_batch_seconds"] = done["longest_batch_seconds"]
    listing.append(
        f"deleted {done['sessions']} session(s) and {done['messages']} message(s) in "
        f"{done['batches']} batch(es), {done['seconds']:.1f} s (longest batch "
        f"{done['longest_batch_seconds'] * 1000:.0f} ms); `hermes-state db vacuum` gives the "
        "space back"
    )
    return Result(document, listing)


def _confirmed(out: Output, sessions: int, messages: int) -> bool:
    print(
        f"This deletes {sessions} session(s) and {messages} message(s) for good. "
        f"Type '{CONFIRMATION}' to go on: ",
        end="",
        file=out.stderr,
        flush=True,
    )
    return sys.stdin.readline().strip() == CONFIRMATION


# -- db vacuum -----------------------------------------------------------------------------------


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, not {text!r}")
    return value


def configure_vacuum(actions: Any) -> None:
    parser = command(
        actions,
        "vacuum",
        run_vacuum,
        help="give the space of deleted rows back (SQLite: VACUUM above a free-page share)",
        description="SQLite: rewrite the file (VACUUM) when more than --min-free of its pages "
        "are free, or always with --force; it waits for other writers and briefly blocks "
        "them. PostgreSQL: VACUUM (ANALYZE) of hermes-state's tables; MariaDB/MySQL: "
        "OPTIMIZE TABLE.",
    )
    add_option(
        parser,
        "--force",
        env="HERMES_STATE_VACUUM_FORCE",
        flag=True,
        help="SQLite: vacuum whatever share of the pages is free",
    )
    add_option(
        parser,
        "--min-free",
        env="HERMES_STATE_VACUUM_MIN_FREE",
        kind=_ratio,
        default=AUTO_VACUUM_MIN_FREELIST_RATIO,
        metavar="SHARE",
        help="SQLite: vacuum only above this share of free pages (0 up to 1; default "
        f"{AUTO_VACUUM_MIN_FREELIST_RATIO:g})",
    )
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="print the free-page share and whether it would vacuum; change nothing",
    )


def _server_vacuum(report: dict[str, Any]) -> str:
    return "VACUUM (ANALYZE)" if report["dialect"] == "postgresql" else "OPTIMIZE TABLE"


def _size(size: int) -> str:
    value, unit = (size / 2**20, "MiB") if size >= 2**20 else (size / 2**10, "KiB")
    return f"{value:.1f} {unit}"


def run_vacuum(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, must_exist=True, read_only=args.dry_run) as db:
        where = db.where
        before = db.storage_report()
        sqlite = before["dialect"] == "sqlite"
        document: dict[str, Any] = {
            "database": where,
            "dialect": before["dialect"],
            "before": before,
            "min_free": args.min_free,
            "forced": args.force,
            "vacuumed": False,
            "dry_run": args.dry_run,
            "after": None,
        }
        if sqlite:
            share = before["free_ratio"]
            state = (
                f"{where}: {before['freelist_count']} of {before['page_count']} pages free "
                f"({share:.1%}), {_size(before['bytes'])}"
            )
            if share <= args.min_free and not args.force:
                return Result(
                    document,
                    [state, f"not vacuumed: at most {args.min_free:.0%} free (--force to vacuum)"],
                )
            if args.dry_run:
                return Result(document, [state, "would vacuum (dry run: nothing changed)"])
            out.progress(f"vacuuming {where} ...")
        elif args.dry_run:
            return Result(
                document,
                [f"{where}: would run {_server_vacuum(before)} (dry run: nothing changed)"],
            )
        db.vacuum()
        document["vacuumed"] = True
        document["after"] = after = db.storage_report()
    out.end_progress()
    if not sqlite:
        return Result(document, [f"{where}: ran {_server_vacuum(before)} on hermes-state's tables"])
    return Result(
        document,
        [
            state,
            f"vacuumed: {_size(before['bytes'])} -> {_size(after['bytes'])}, "
            f"{after['freelist_count']} pages free",
        ],
    )
