"""``hermes-state session``: create sessions and look at them and their transcripts."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any, Final

from ..transcript import result_tool, tool_calls_of
from .common import (
    EXIT_OK,
    MAX_ROWS,
    STATE_NAMES,
    Output,
    Result,
    Table,
    add_option,
    command,
    group,
    local_time,
    open_store,
    state_name,
    unknown_session,
    whole_number,
)
from .handoff import events_table
from .session_portability import configure as configure_portability
from .session_search import configure_search

#: How many of its latest audit events `session show` prints.
SHOWN_EVENTS: Final = 10


def register(commands: Any) -> None:
    actions = group(commands, "session", help="create sessions and look at them")
    for configure in (configure_create, configure_list, configure_show, configure_messages):
        configure(actions)
    configure_portability(actions)
    configure_search(actions)


def configure_create(actions: Any) -> None:
    parser = command(
        actions, "create", run_create, help="create a session (an existing one is kept as is)"
    )
    parser.add_argument("session_id", metavar="SESSION_ID")
    add_option(
        parser,
        "--source",
        env="HERMES_STATE_SOURCE",
        default="cli",
        metavar="SRC",
        help="interface the session started in (default: cli)",
    )
    add_option(parser, "--title", env="HERMES_STATE_TITLE", metavar="T", help="a title for people")
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="say whether the session would be created; change nothing",
    )


def run_create(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=args.dry_run) as db:
        existed = db.get_session(args.session_id) is not None
        if not args.dry_run:
            db.create_session(args.session_id, args.source, title=args.title)
    prefix = "dry run: would have " if args.dry_run else ""
    document: dict[str, Any] = {"id": args.session_id, "created": not existed}
    if args.dry_run:
        document["dry_run"] = True
    return Result(
        document,
        [
            f"session {args.session_id!r} already exists; left unchanged"
            if existed
            else f"{prefix}created session {args.session_id!r}"
        ],
    )


def _since(text: str) -> float:
    """An epoch-seconds number, an ISO date or time (local time unless it names a zone), or
    an age such as 30m, 12h, 7d."""
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(text[:-1]) * units[text[-1]]
    try:
        value = float(text)
    except ValueError:
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a date (2026-01-31 or 2026-01-31T08:00), an age (30m, 12h, 7d) or "
                f"epoch seconds, not {text!r}"
            ) from None
    if not 0 <= value < 1e11:
        raise argparse.ArgumentTypeError(f"epoch seconds from 0 up to 1e11, not {text!r}")
    return value


def configure_list(actions: Any) -> None:
    parser = command(actions, "list", run_list, help="sessions, newest first")
    add_option(
        parser, "--source", env="HERMES_STATE_LIST_SOURCE", metavar="SRC", help="only this source"
    )
    add_option(
        parser,
        "--handoff-state",
        env="HERMES_STATE_LIST_HANDOFF_STATE",
        kind=state_name,
        metavar="STATE",
        help=f"only sessions whose handoff is in this state: {STATE_NAMES}",
    )
    add_option(
        parser,
        "--since",
        env="HERMES_STATE_LIST_SINCE",
        kind=_since,
        metavar="WHEN",
        help="only sessions started at or after WHEN: a date (2026-01-31), a date and time, "
        "an age (30m, 12h, 7d) or epoch seconds",
    )
    add_option(
        parser,
        "--limit",
        env="HERMES_STATE_SESSION_LIMIT",
        kind=whole_number(0),
        default=50,
        metavar="N",
        help=f"at most this many (0 up to {MAX_ROWS}; default 50; 0: all)",
    )


def run_list(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=True) as db:
        rows = db.list_sessions(
            source=args.source,
            handoff_state=args.handoff_state,
            since=args.since,
            limit=args.limit or None,
        )
    if not rows:
        return Result(rows, ["no sessions match"])
    table = Table(
        ["SESSION", "SOURCE", "STARTED", "HANDOFF", "PLATFORM", "TITLE"],
        [
            (
                row["id"],
                row["source"],
                local_time(row["started_at"]),
                row["handoff_state"],
                row["handoff_platform"],
                row["title"],
            )
            for row in rows
        ],
    )
    return Result(rows, [table])


def configure_show(actions: Any) -> None:
    parser = command(
        actions,
        "show",
        run_show,
        help="a session: its row, its handoff and its latest audit events",
    )
    parser.add_argument("session_id", metavar="SESSION_ID")


def run_show(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=True) as db:
        row = db.get_session(args.session_id)
        if row is None:
            return unknown_session(args.session_id)
        handoff = db.get_handoff_state(args.session_id)
        events = db.handoff_history(args.session_id)[-SHOWN_EVENTS:]
        message_count = db.count_messages(args.session_id)
    document = {
        "session": row,
        "handoff": handoff,
        "messages": message_count,
        "recent_events": events,
    }
    fields = Table(
        ["FIELD", "VALUE"],
        [
            (name, local_time(value) if name.endswith("_at") else value)
            for name, value in row.items()
        ],
    )
    text: list[str | Table] = [fields, f"messages: {message_count}"]
    text.append(events_table(events) if events else "no recorded handoff events")
    return Result(document, text, EXIT_OK)


def configure_messages(actions: Any) -> None:
    parser = command(
        actions,
        "messages",
        run_messages,
        help="the transcript of SESSION_ID (what a handoff carries), oldest first: each "
        "message's id, time and role (a tool result: and its tool), then its content and "
        "each tool call as '-> name(arguments)', indented",
    )
    parser.add_argument("session_id", metavar="SESSION_ID")


def run_messages(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=True) as db:
        if db.get_session(args.session_id) is None:
            return unknown_session(args.session_id)
        messages = db.get_messages(args.session_id)
    if not messages:
        return Result(messages, [f"no messages in {args.session_id!r}"])
    text: list[str | Table] = []
    for message in messages:
        when = local_time(message.get("timestamp"))
        answered = result_tool(message)
        role = f"{message['role']} {answered}" if answered else message["role"]
        text.append(f"#{message['id']}  {when}  {role}")
        body = str(message["content"] or "").splitlines()
        calls = [f"-> {call}" for call in tool_calls_of(message)]
        text += [f"    {line}" for line in [*body, *calls] or [""]]
    return Result(messages, text)
