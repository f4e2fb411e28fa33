"""``hermes-state session``: create sessions from the shell."""

from __future__ import annotations

import argparse
from typing import Any

from . import EXIT_OK, Output, add_json_option, add_option, open_store


def register(commands: Any) -> None:
    session = commands.add_parser("session", help="create sessions")
    actions = session.add_subparsers(dest="session_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a session (an existing one is kept as is)")
    create.add_argument("session_id", metavar="SESSION_ID")
    add_option(
        create,
        "--source",
        env="HERMES_STATE_SOURCE",
        default="cli",
        metavar="SRC",
        help="interface the session started in (default: cli)",
    )
    add_option(create, "--title", env="HERMES_STATE_TITLE", metavar="T", help="a title for people")
    add_json_option(create)
    create.set_defaults(command_function=run_create)


def run_create(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as db:
        existed = db.get_handoff_state(args.session_id) is not None
        db.create_session(args.session_id, args.source, title=args.title)
    out.json({"id": args.session_id, "created": not existed})
    out.line(
        f"session {args.session_id!r} already exists; left unchanged"
        if existed
        else f"created session {args.session_id!r}"
    )
    return EXIT_OK
