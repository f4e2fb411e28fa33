"""``hermes-state handoff``: request, inspect and repair handoffs; ``--wait`` follows one."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from typing import Any, Final

from ..errors import InvalidInputError
from ..models import HandoffState
from ..repository import STRANDED_ERROR
from ..store import SessionDB
from . import (
    EXIT_OK,
    EXIT_REFUSED,
    Output,
    add_json_option,
    add_option,
    finite_number,
    open_store,
    whole_number,
)

# The waiting CLI's patience (seconds). A request nobody claims within PENDING_PATIENCE is
# failed (only while still pending); a claimed one is never failed by the waiter.
PENDING_PATIENCE: Final = 60.0
RUNNING_PATIENCE: Final = 15 * 60.0
POLL_INTERVAL: Final = 0.5
PROGRESS_INTERVAL: Final = 15.0
UNCLAIMED_ERROR: Final = (
    f"No gateway picked up the handoff within {PENDING_PATIENCE:g} s; the gateway may be down."
)

# Module attributes, so tests can drive time without waiting.
monotonic = time.monotonic
sleep = time.sleep


def register(commands: Any) -> None:
    handoff = commands.add_parser("handoff", help="request, inspect and repair handoffs")
    actions = handoff.add_subparsers(dest="handoff_command", metavar="ACTION", required=True)

    request = actions.add_parser("request", help="ask a gateway to continue SESSION_ID on PLATFORM")
    request.add_argument("session_id", metavar="SESSION_ID")
    request.add_argument("platform", metavar="PLATFORM")
    add_option(
        request,
        "--wait",
        env="HERMES_STATE_WAIT",
        flag=True,
        help=f"follow the handoff: up to {PENDING_PATIENCE:g} s for a gateway to claim it, "
        f"then up to {RUNNING_PATIENCE / 60:g} min for the delivery",
    )
    request.set_defaults(command_function=run_request)

    show = actions.add_parser("show", help="the handoff state of SESSION_ID")
    show.add_argument("session_id", metavar="SESSION_ID")
    add_json_option(show)
    show.set_defaults(command_function=run_show)

    listing = actions.add_parser("list", help="sessions with a handoff, oldest first")
    add_option(
        listing,
        "--state",
        env="HERMES_STATE_LIST_STATE",
        kind=_state_name,
        metavar="STATE",
        help="only this state: " + ", ".join(state.value for state in HandoffState),
    )
    add_option(
        listing,
        "--limit",
        env="HERMES_STATE_LIST_LIMIT",
        kind=whole_number(0),
        default=200,
        metavar="N",
        help="at most this many rows (default 200; 0: all)",
    )
    add_json_option(listing)
    listing.set_defaults(command_function=run_list)

    fail = actions.add_parser("fail", help="mark a pending or running handoff failed")
    fail.add_argument("session_id", metavar="SESSION_ID")
    fail.add_argument("error", metavar="ERROR", help="the reason, shown to the user")
    add_option(
        fail,
        "--only-pending",
        env="HERMES_STATE_ONLY_PENDING",
        flag=True,
        help="refuse when a gateway has already claimed it (what a waiting CLI does)",
    )
    fail.set_defaults(command_function=run_fail)

    reclaim = actions.add_parser(
        "reclaim",
        help="fail running handoffs no live gateway holds (no lease, or an expired one)",
        description="Fail running handoffs whose gateway is gone: rows without a lease or with "
        "an expired lease. A row under a live lease is left to its gateway unless --all.",
    )
    add_option(
        reclaim,
        "--all",
        env="HERMES_STATE_RECLAIM_ALL",
        flag=True,
        help="fail every running handoff, leased or not (only when you know no gateway lives)",
    )
    add_option(
        reclaim,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="list what would be failed and why; change nothing",
    )
    add_json_option(reclaim)
    reclaim.set_defaults(command_function=run_reclaim)

    retry = actions.add_parser("retry", help="request a failed handoff again")
    retry.add_argument("session_id", metavar="SESSION_ID")
    add_option(
        retry,
        "--platform",
        env="HERMES_STATE_RETRY_PLATFORM",
        metavar="PLATFORM",
        help="deliver to this platform instead of the previous one",
    )
    retry.set_defaults(command_function=run_retry)

    history = actions.add_parser("history", help="the audit trail of SESSION_ID, oldest first")
    history.add_argument("session_id", metavar="SESSION_ID")
    add_json_option(history)
    history.set_defaults(command_function=run_history)

    prune = actions.add_parser("prune-events", help="delete audit events older than DAYS")
    add_option(
        prune,
        "--older-than",
        env="HERMES_STATE_PRUNE_OLDER_THAN",
        kind=finite_number("days", allow_zero=False),
        metavar="DAYS",
        help="age in days (> 0; required)",
    )
    add_json_option(prune)
    prune.set_defaults(command_function=run_prune)

    stats = actions.add_parser("stats", help="counts per state, age of the oldest pending")
    add_json_option(stats)
    stats.set_defaults(command_function=run_stats)


def _state_name(text: str) -> str:
    if text not in {state.value for state in HandoffState}:
        names = ", ".join(state.value for state in HandoffState)
        raise argparse.ArgumentTypeError(f"unknown state {text!r}; expected one of {names}")
    return text


def _describe(state: Mapping[str, Any]) -> str:
    text = f"{state['state'] or 'never requested'}"
    if state.get("platform"):
        text += f" (platform {state['platform']})"
    if state.get("error"):
        text += f": {state['error']}"
    return text


def run_request(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as db:
        if db.request_handoff(args.session_id, args.platform):
            out.line(f"handoff of {args.session_id!r} to {args.platform} requested")
            return wait_for_outcome(db, args.session_id, out) if args.wait else EXIT_OK
        state = db.get_handoff_state(args.session_id)
    if state is None:
        out.error(
            f"no session {args.session_id!r}; create it first "
            "(`hermes-state session create SESSION_ID`)"
        )
    else:
        out.error(
            f"a handoff of {args.session_id!r} is already in flight ({_describe(state)}); "
            "wait for it to finish, or fail it with `hermes-state handoff fail`"
        )
    return EXIT_REFUSED


def wait_for_outcome(db: SessionDB, session_id: str, out: Output) -> int:
    """Follow a requested handoff until it completes, fails, or the waiter's patience ends."""
    started = monotonic()
    claimed_at: float | None = None
    last_progress = started
    while True:
        state = db.get_handoff_state(session_id)
        current = state["state"] if state else None
        now = monotonic()
        if current == HandoffState.COMPLETED:
            out.line(f"handoff of {session_id!r} delivered")
            return EXIT_OK
        if current == HandoffState.FAILED:
            out.error(f"handoff of {session_id!r} failed: {state['error'] if state else ''}")
            return EXIT_REFUSED
        if current == HandoffState.PENDING and now - started >= PENDING_PATIENCE:
            if db.fail_handoff(session_id, UNCLAIMED_ERROR, only_states=("pending",)):
                out.error(
                    f"no gateway claimed the handoff within {PENDING_PATIENCE:g} s, so it was "
                    "failed; the gateway may be down (start one with `hermes-state watch`)"
                )
                return EXIT_REFUSED
            continue  # claimed at the last moment: follow the delivery instead
        if current == HandoffState.RUNNING:
            if claimed_at is None:
                claimed_at = last_progress = now
                out.line("a gateway claimed the handoff; delivering...")
            elif now - claimed_at >= RUNNING_PATIENCE:
                out.error(
                    f"still delivering after {RUNNING_PATIENCE / 60:g} min; it is left to the "
                    f"gateway. Check later with `hermes-state handoff show {session_id}`"
                )
                return EXIT_REFUSED
            elif now - last_progress >= PROGRESS_INTERVAL:
                last_progress = now
                out.line(f"still delivering ({now - claimed_at:.0f} s)...")
        elif current not in (HandoffState.PENDING, HandoffState.RUNNING):
            out.error(f"the handoff of {session_id!r} disappeared (state: {current})")
            return EXIT_REFUSED
        sleep(POLL_INTERVAL)


def run_show(args: argparse.Namespace, out: Output) -> int:
    with open_store(args, read_only=True) as db:
        state = db.get_handoff_state(args.session_id)
    if state is None:
        out.error(f"no session {args.session_id!r}")
        return EXIT_REFUSED
    out.json({"id": args.session_id, **state})
    out.line(f"{args.session_id}: {_describe(state)}")
    return EXIT_OK


def run_list(args: argparse.Namespace, out: Output) -> int:
    with open_store(args, read_only=True) as db:
        rows = db.list_handoffs(args.state, limit=args.limit or None)
    out.json(rows)
    for row in rows:
        error = f"  {row['handoff_error']}" if row.get("handoff_error") else ""
        out.line(f"{row['id']}\t{row['handoff_state']}\t{row['handoff_platform'] or '-'}{error}")
    if not rows:
        out.line("no handoffs" + (f" in state {args.state}" if args.state else ""))
    return EXIT_OK


def run_fail(args: argparse.Namespace, out: Output) -> int:
    only_states = ("pending",) if args.only_pending else None
    with open_store(args, must_exist=True) as db:
        if db.fail_handoff(args.session_id, args.error, only_states=only_states):
            out.line(f"handoff of {args.session_id!r} marked failed")
            return EXIT_OK
        state = db.get_handoff_state(args.session_id)
    if state is None:
        out.error(f"no session {args.session_id!r}")
    else:
        allowed = "pending" if args.only_pending else "pending or running"
        out.error(f"the handoff of {args.session_id!r} is not {allowed}: {_describe(state)}")
    return EXIT_REFUSED


def run_reclaim(args: argparse.Namespace, out: Output) -> int:
    scope = "all" if args.all else "stale"
    with open_store(args, must_exist=True, read_only=args.dry_run) as db:
        if args.dry_run:
            found = db.preview_reclaim(scope)
            out.json({"dry_run": True, "would_reclaim": found})
            out.line(f"a reclaim would fail {len(found)} running handoff(s)")
            for row in found:
                out.line(f"  {row['id']}  owner {row['owner'] or '-'}: {row['reason']}")
            return EXIT_OK
        reclaim = db.reclaim_running_handoffs if args.all else db.reclaim_stale_running_handoffs
        reclaimed = reclaim(STRANDED_ERROR)
    out.json({"reclaimed": reclaimed})
    out.line(f"reclaimed {len(reclaimed)} running handoff(s)")
    for session_id in reclaimed:
        out.line(f"  {session_id}")
    return EXIT_OK


def run_retry(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as db:
        if db.retry_handoff(args.session_id, args.platform):
            requested = db.get_handoff_state(args.session_id) or {}
            platform = requested.get("platform")
            out.line(f"handoff of {args.session_id!r} requested again for {platform}")
            return EXIT_OK
        state = db.get_handoff_state(args.session_id)
    if state is None:
        out.error(f"no session {args.session_id!r}")
    else:
        out.error(
            f"only a failed handoff can be retried; {args.session_id!r} is {_describe(state)}"
        )
    return EXIT_REFUSED


def run_history(args: argparse.Namespace, out: Output) -> int:
    with open_store(args, read_only=True) as db:
        events = db.handoff_history(args.session_id)
        known = events or db.get_handoff_state(args.session_id) is not None
    if not known:
        out.error(f"no session {args.session_id!r}")
        return EXIT_REFUSED
    out.json(events)
    for event in events:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event["at"]))
        detail = f"  {event['detail']}" if event["detail"] else ""
        out.line(
            f"{when}  {event['from_state'] or '-':>9} -> {event['to_state']:<9}"
            f"  by {event['actor'] or '?'}{detail}"
        )
    if not events:
        out.line(f"no recorded handoff events for {args.session_id!r}")
    return EXIT_OK


def run_prune(args: argparse.Namespace, out: Output) -> int:
    if args.older_than is None:
        raise InvalidInputError("prune-events needs --older-than DAYS")
    with open_store(args, must_exist=True) as db:
        deleted = db.prune_handoff_events(args.older_than * 86400)
    out.json({"deleted": deleted})
    out.line(f"deleted {deleted} event(s) older than {args.older_than:g} day(s)")
    return EXIT_OK


def run_stats(args: argparse.Namespace, out: Output) -> int:
    with open_store(args, read_only=True) as db:
        stats = db.handoff_stats()
    out.json(stats)
    for state, count in stats["counts"].items():
        out.line(f"{state:>10}  {count}")
    age = stats["oldest_pending_age_seconds"]
    out.line("oldest pending: " + ("none" if age is None else f"{age:.0f} s ago"))
    for owner in stats["running_by_owner"]:
        out.line(
            f"running under {owner['owner'] or '(no owner)'}: {owner['running']} "
            f"({owner['live_leases']} live lease, {owner['expired_leases']} expired, "
            f"{owner['no_lease']} without)"
        )
    failures = stats["failures_last_hour"]
    out.line(f"failures in the last hour: {failures['count']}")
    for entry in failures["top_errors"]:
        out.line(f"  {entry['count']:>5}  {entry['error']}")
    return EXIT_OK
