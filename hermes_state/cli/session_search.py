"""``hermes-state session search``: the messages matching a query, as ``search_messages``
finds them (the engine of the database's backend)."""

from __future__ import annotations

import argparse
from typing import Any, Final

from .common import (
    Output,
    Result,
    Table,
    add_option,
    command,
    local_time,
    open_store,
    repeated,
    whole_number,
)

#: The most hits one search prints.
MAX_HITS: Final = 500
#: A snippet is shown on one line, cut to this many characters.
SNIPPET_CHARS: Final = 100


def configure_search(actions: Any) -> None:
    parser = command(
        actions,
        "search",
        run_search,
        help='messages matching QUERY (words, "a phrase", AND/OR/NOT, prefix*; CJK text '
        "too), the best match first: each hit's message id, session, role, time and snippet",
    )
    parser.add_argument("query", metavar="QUERY")
    add_option(
        parser,
        "--source",
        env="HERMES_STATE_SEARCH_SOURCE",
        repeatable=True,
        metavar="SRC",
        help="only sessions of this source (repeat for several)",
    )
    add_option(
        parser,
        "--role",
        env="HERMES_STATE_SEARCH_ROLE",
        repeatable=True,
        metavar="ROLE",
        help="only messages of this role: user, assistant, tool, ... (repeat for several)",
    )
    add_option(
        parser,
        "--sort",
        env="HERMES_STATE_SEARCH_SORT",
        kind=_sort,
        metavar="ORDER",
        help="relevance (default), newest or oldest",
    )
    add_option(
        parser,
        "--limit",
        env="HERMES_STATE_SEARCH_LIMIT",
        kind=whole_number(1, MAX_HITS),
        default=20,
        metavar="N",
        help=f"at most this many hits (1 up to {MAX_HITS}; default 20)",
    )


def _sort(text: str) -> str | None:
    order = text.strip().lower()
    if order not in ("relevance", "newest", "oldest"):
        raise argparse.ArgumentTypeError(f"expected relevance, newest or oldest, not {text!r}")
    return None if order == "relevance" else order


def _one_line(text: object) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 3] + "..."


def run_search(args: argparse.Namespace, out: Output) -> Result:
    sources = repeated(args, "source")
    roles = repeated(args, "role")
    with open_store(args, read_only=True) as db:
        hits = db.search_messages(
            args.query,
            source_filter=sources or None,
            role_filter=roles or None,
            limit=args.limit,
            sort=args.sort,
        )
    if not hits:
        return Result(hits, [f"no messages match {args.query!r}"])
    table = Table(
        ["MESSAGE", "SESSION", "SOURCE", "ROLE", "TIME", "SNIPPET"],
        [
            (
                hit["id"],
                hit["session_id"],
                hit["source"],
                hit["role"],
                local_time(hit["timestamp"]),
                _one_line(hit["snippet"]),
            )
            for hit in hits
        ],
    )
    return Result(hits, [table])
