"""``hermes-state handoff``: request, follow, inspect and repair handoffs."""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from ..errors import InvalidInputError
from ..models import HandoffState
from ..plans import STRANDED_ERROR
from ..store import SessionDB
from .common import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_TIMED_OUT,
    MAX_ROWS,
    MAX_SECONDS,
    STATE_NAMES,
    Output,
    Result,
    Table,
    add_option,
    command,
    finite_number,
    group,
    local_time,
    open_store,
    state_name,
    unknown_session,
    whole_number,
)

# The waiter's patience (seconds), unless --pending-timeout / --running-timeout say otherwise.
PENDING_PATIENCE: Final = 60.0
RUNNING_PATIENCE: Final = 15 * 60.0
POLL_INTERVAL: Final = 0.5
WITHDRAWN_ERROR: Final = (
    "Withdrawn by the requester (Ctrl-C while waiting) before a gateway claimed it."
)
TIMEOUT = finite_number("seconds", allow_zero=False)

# Module attributes, so tests can drive time without waiting.
monotonic = time.monotonic
sleep = time.sleep


def register(commands: Any) -> None:
    actions = group(commands, "handoff", help="request, follow, inspect and repair handoffs")
    for configure in (
        configure_request,
        configure_wait,
        configure_show,
        configure_list,
        configure_fail,
        configure_reclaim,
        configure_retry,
        configure_history,
        configure_prune,
        configure_stats,
    ):
        configure(actions)


# -- shared pieces -----------------------------------------------------------------------------


def _describe(state: Mapping[str, Any]) -> str:
    text = f"{state['state'] or 'never requested'}"
    if state.get("platform"):
        text += f" (platform {state['platform']})"
    if state.get("error"):
        text += f": {state['error']}"
    return text


def _dry_run_option(parser: argparse.ArgumentParser, what: str) -> None:
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help=f"say what {what} would do; change nothing",
    )


def _wait_options(parser: argparse.ArgumentParser, *, with_wait: bool) -> None:
    if with_wait:
        add_option(
            parser,
            "--wait",
            env="HERMES_STATE_WAIT",
            flag=True,
            help="follow the handoff until it is delivered or failed (see `handoff wait`)",
        )
    add_option(
        parser,
        "--pending-timeout",
        env="HERMES_STATE_PENDING_TIMEOUT",
        kind=TIMEOUT,
        default=PENDING_PATIENCE,
        metavar="S",
        help=f"seconds to wait for a gateway to claim it, then fail it if still pending "
        f"(above 0 up to {MAX_SECONDS:g}; default {PENDING_PATIENCE:g})",
    )
    add_option(
        parser,
        "--running-timeout",
        env="HERMES_STATE_RUNNING_TIMEOUT",
        kind=TIMEOUT,
        default=RUNNING_PATIENCE,
        metavar="S",
        help=f"seconds to follow a claimed delivery before leaving it to its gateway "
        f"(above 0 up to {MAX_SECONDS:g}; default {RUNNING_PATIENCE:g})",
    )


# -- request -----------------------------------------------------------------------------------


def configure_request(actions: Any) -> None:
    parser = command(
        actions,
        "request",
        run_request,
        help="ask a gateway to continue SESSION_ID on PLATFORM",
        description="Request a handoff of SESSION_ID to PLATFORM. With --wait, follow it: "
        "Ctrl-C while no gateway has claimed it withdraws the request; after a claim it "
        "leaves the delivery to its gateway. Exit 0 delivered (or requested, without --wait), "
        "1 refused or failed, 3 timed out, 130 interrupted.",
    )
    parser.add_argument("session_id", metavar="SESSION_ID")
    parser.add_argument("platform", metavar="PLATFORM")
    _wait_options(parser, with_wait=True)
    _dry_run_option(parser, "the request")


def run_request(args: argparse.Namespace, out: Output) -> Result:
    # Ctrl-C is caught from before the request, so one pressed while it commits withdraws it.
    interrupted = Interrupted()
    with (
        open_store(args, read_only=args.dry_run) as db,
        interrupted.caught(args.wait and not args.dry_run),
    ):
        if args.dry_run:
            state = db.get_handoff_state(args.session_id)
            if state is None:
                return _no_session_to_request(args.session_id)
            would = state["state"] in (None, HandoffState.COMPLETED, HandoffState.FAILED)
            return _would(args.session_id, would, "request", state)
        if db.request_handoff(args.session_id, args.platform):
            if args.wait:
                return follow(db, args.session_id, args, out, interrupted, withdraw=True)
            return Result(
                {"id": args.session_id, "requested": True, "platform": args.platform},
                [f"handoff of {args.session_id!r} to {args.platform} requested"],
            )
        state = db.get_handoff_state(args.session_id)
    if state is None:
        return _no_session_to_request(args.session_id)
    return Result(
        {"id": args.session_id, "requested": False, **state},
        code=EXIT_REFUSED,
        error=f"a handoff of {args.session_id!r} is already in flight ({_describe(state)}); "
        "wait for it with `hermes-state handoff wait`, or fail it with `hermes-state handoff fail`",
    )


def _no_session_to_request(session_id: str) -> Result:
    return Result(
        {"id": session_id, "requested": False, "error": "unknown session"},
        code=EXIT_REFUSED,
        error=f"no session {session_id!r}; create it first "
        "(`hermes-state session create SESSION_ID`)",
    )


def _would(session_id: str, would: bool, action: str, state: Mapping[str, Any]) -> Result:
    verdict = f"would {action}" if would else f"would refuse to {action}"
    return Result(
        {"id": session_id, "dry_run": True, f"would_{action}": would, **state},
        [f"dry run: {verdict} the handoff of {session_id!r}, now {_describe(state)}"],
    )


# -- wait --------------------------------------------------------------------------------------


def configure_wait(actions: Any) -> None:
    parser = command(
        actions,
        "wait",
        run_wait,
        help="follow the handoff of SESSION_ID until it is delivered or failed",
        description="Follow an existing handoff request. On a terminal a status line shows its "
        "phase and elapsed time. A request no gateway claims within --pending-timeout is "
        "failed (only while still pending); a claimed one is never failed by the waiter. "
        "Ctrl-C stops following and leaves the request as it is. Exit 0 delivered, 1 failed, "
        "3 timed out, 130 interrupted.",
    )
    parser.add_argument("session_id", metavar="SESSION_ID")
    _wait_options(parser, with_wait=False)


def run_wait(args: argparse.Namespace, out: Output) -> Result:
    interrupted = Interrupted()
    # Writable: a request no gateway claims in time is failed (a compare-and-swap on
    # pending). must_exist: following a session never creates a database.
    with open_store(args, must_exist=True) as db, interrupted.caught(True):
        return follow(db, args.session_id, args, out, interrupted, withdraw=False)


class Interrupted:
    """Turns SIGINT into a flag the waiting loop reads between two polls, so that Ctrl-C
    never lands in the middle of a database call."""

    def __init__(self) -> None:
        self.seen = False

    @contextmanager
    def caught(self, active: bool) -> Iterator[None]:
        """While inside, SIGINT sets :attr:`seen` (when ``active``; else it stays Python's)."""

        def note(_signum: int, _frame: object) -> None:
            self.seen = True

        if not active:
            yield
            return
        try:
            previous = signal.signal(signal.SIGINT, note)
        except ValueError:  # not the main thread: Ctrl-C cannot reach this waiter anyway
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def follow(
    db: SessionDB,
    session_id: str,
    args: argparse.Namespace,
    out: Output,
    interrupted: Interrupted,
    *,
    withdraw: bool,
) -> Result:
    """Follow a handoff to its outcome: waiting for a gateway -> claimed by OWNER -> delivered
    or failed; bounded by the two timeouts. Once ``interrupted`` (Ctrl-C), a still-pending
    request is withdrawn when ``withdraw``, and anything else is left as it stands."""
    started = monotonic()
    claimed_at: float | None = None
    while True:
        row = db.get_session(session_id)
        if row is None:
            return unknown_session(session_id)
        now = monotonic()
        current = row["handoff_state"]
        document = {
            "id": session_id,
            "state": current,
            "platform": row["handoff_platform"],
            "owner": row["handoff_owner"],
            "error": row["handoff_error"],
            "waited_seconds": round(now - started, 3),
        }
        if current == HandoffState.COMPLETED:
            return Result(
                {**document, "outcome": "delivered"},
                [f"handoff of {session_id!r} delivered to {row['handoff_platform']}"],
            )
        if current == HandoffState.FAILED:
            return Result(
                {**document, "outcome": "failed"},
                code=EXIT_REFUSED,
                error=f"handoff of {session_id!r} failed: {row['handoff_error']}",
            )
        if current is None:
            return Result(
                {**document, "outcome": "not_requested"},
                code=EXIT_REFUSED,
                error=f"{session_id!r} has no handoff to wait for; request one with "
                "`hermes-state handoff request`",
            )
        if interrupted.seen:
            return _interrupted(db, session_id, document, withdraw)
        if current == HandoffState.PENDING:
            if now - started >= args.pending_timeout:
                error = (
                    f"No gateway picked up the handoff within {args.pending_timeout:g} s; "
                    "the gateway may be down."
                )
                if db.fail_handoff(session_id, error, only_states=("pending",)):
                    return Result(
                        {**document, "state": "failed", "error": error, "outcome": "timed_out"},
                        code=EXIT_TIMED_OUT,
                        error=f"no gateway claimed the handoff of {session_id!r} within "
                        f"{args.pending_timeout:g} s, so it was failed; start one with "
                        "`hermes-state watch`",
                    )
                continue  # claimed at the last moment: follow the delivery instead
            out.progress(f"waiting for a gateway to claim it... {now - started:.0f} s")
        elif current == HandoffState.RUNNING:
            if claimed_at is None:
                claimed_at = now
            if now - claimed_at >= args.running_timeout:
                return Result(
                    {**document, "outcome": "timed_out"},
                    code=EXIT_TIMED_OUT,
                    error=f"still delivering after {args.running_timeout:g} s; it is left to "
                    f"its gateway. Check later with `hermes-state handoff show {session_id}`",
                )
            owner = row["handoff_owner"] or "a gateway"
            out.progress(f"claimed by {owner}, delivering... {now - claimed_at:.0f} s")
        sleep(POLL_INTERVAL)


def _interrupted(
    db: SessionDB, session_id: str, document: dict[str, Any], withdraw: bool
) -> Result:
    if withdraw and db.fail_handoff(session_id, WITHDRAWN_ERROR, only_states=("pending",)):
        return Result(
            {**document, "state": "failed", "error": WITHDRAWN_ERROR, "outcome": "withdrawn"},
            code=EXIT_INTERRUPTED,
            error=f"interrupted: the request for {session_id!r} was withdrawn before a gateway "
            "claimed it",
        )
    state = db.get_handoff_state(session_id) or {}
    return Result(
        {**document, "state": state.get("state"), "outcome": "interrupted"},
        code=EXIT_INTERRUPTED,
        error=f"interrupted: stopped waiting; the handoff of {session_id!r} is "
        f"{_describe(state) if state else 'gone'} and was left as it is "
        f"(`hermes-state handoff wait {session_id}` follows it again)",
    )


# -- show and list -----------------------------------------------------------------------------


def configure_show(actions: Any) -> None:
    parser = command(actions, "show", run_show, help="the handoff state of SESSION_ID")
    parser.add_argument("session_id", metavar="SESSION_ID")


#: What ``handoff show`` says of a handoff beyond its state: (document key, column, times?).
_SHOWN: Final = (
    ("owner", "handoff_owner", False),
    ("attempt", "handoff_attempt", False),
    ("lease_expires_at", "handoff_lease_expires_at", True),
    ("requested_at", "handoff_requested_at", True),
    ("claimed_at", "handoff_claimed_at", True),
    ("finished_at", "handoff_finished_at", True),
)


def run_show(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=True) as db:
        row = db.get_session(args.session_id)
    if row is None:
        return unknown_session(args.session_id)
    state = {
        "state": row["handoff_state"],
        "platform": row["handoff_platform"],
        "error": row["handoff_error"],
    }
    document = {"id": args.session_id, **state}
    lines: list[str | Table] = [f"{args.session_id}: {_describe(state)}"]
    for key, column, is_time in _SHOWN:
        document[key] = row[column]
        if row[column] is not None and (key != "attempt" or row[column]):
            shown = local_time(row[column]) if is_time else row[column]
            lines.append(f"  {key.replace('_', ' ')}: {shown}")
    return Result(document, lines)


def configure_list(actions: Any) -> None:
    parser = command(actions, "list", run_list, help="sessions with a handoff, oldest first")
    add_option(
        parser,
        "--state",
        env="HERMES_STATE_LIST_STATE",
        kind=state_name,
        metavar="STATE",
        help=f"only this state: {STATE_NAMES}",
    )
    add_option(
        parser,
        "--limit",
        env="HERMES_STATE_LIST_LIMIT",
        kind=whole_number(0),
        default=200,
        metavar="N",
        help=f"at most this many rows (0 up to {MAX_ROWS}; default 200; 0: all)",
    )


def run_list(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=True) as db:
        rows = db.list_handoffs(args.state, limit=args.limit or None)
    if not rows:
        return Result(rows, ["no handoffs" + (f" in state {args.state}" if args.state else "")])
    table = Table(
        ["SESSION", "STATE", "PLATFORM", "OWNER", "ERROR"],
        [
            (
                row["id"],
                row["handoff_state"],
                row["handoff_platform"],
                row["handoff_owner"],
                row["handoff_error"],
            )
            for row in rows
        ],
    )
    return Result(rows, [table])


# -- repairs -----------------------------------------------------------------------------------


def configure_fail(actions: Any) -> None:
    parser = command(actions, "fail", run_fail, help="mark a pending or running handoff failed")
    parser.add_argument("session_id", metavar="SESSION_ID")
    parser.add_argument("error", metavar="ERROR", help="the reason, shown to the user")
    add_option(
        parser,
        "--only-pending",
        env="HERMES_STATE_ONLY_PENDING",
        flag=True,
        help="refuse when a gateway has already claimed it (what a waiting CLI does)",
    )
    _dry_run_option(parser, "the fail")


def run_fail(args: argparse.Namespace, out: Output) -> Result:
    allowed = ("pending",) if args.only_pending else ("pending", "running")
    with open_store(args, must_exist=True, read_only=args.dry_run) as db:
        if args.dry_run:
            state = db.get_handoff_state(args.session_id)
            if state is None:
                return unknown_session(args.session_id)
            return _would(args.session_id, state["state"] in allowed, "fail", state)
        only_states = allowed if args.only_pending else None
        if db.fail_handoff(args.session_id, args.error, only_states=only_states):
            return Result(
                {"id": args.session_id, "failed": True},
                [f"handoff of {args.session_id!r} marked failed"],
            )
        state = db.get_handoff_state(args.session_id)
    if state is None:
        return unknown_session(args.session_id)
    return Result(
        {"id": args.session_id, "failed": False, **state},
        code=EXIT_REFUSED,
        error=f"the handoff of {args.session_id!r} is not {' or '.join(allowed)}: "
        f"{_describe(state)}",
    )


def configure_reclaim(actions: Any) -> None:
    parser = command(
        actions,
        "reclaim",
        run_reclaim,
        help="fail running handoffs no live gateway holds (no lease, or an expired one)",
        description="Fail running handoffs whose gateway is gone: rows without a lease or with "
        "an expired lease. A row under a live lease is left to its gateway unless --all.",
    )
    add_option(
        parser,
        "--all",
        env="HERMES_STATE_RECLAIM_ALL",
        flag=True,
        help="fail every running handoff, leased or not (only when you know no gateway lives)",
    )
    _dry_run_option(parser, "the reclaim")


def run_reclaim(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, must_exist=True, read_only=args.dry_run) as db:
        if args.dry_run:
            return _reclaim_preview(db, everything=args.all)
        reclaim = db.reclaim_running_handoffs if args.all else db.reclaim_stale_running_handoffs
        reclaimed = reclaim(STRANDED_ERROR)
        # What is still running now is under a live lease: said, so "reclaimed 0" is not read
        # as "nothing is running".
        leased = [] if args.all else db.preview_reclaim("all")
    text: list[str | Table] = [
        f"reclaimed {len(reclaimed)} running handoff(s)",
        *(f"  {sid}" for sid in reclaimed),
    ]
    text += _left_under_live_leases(leased)
    return Result({"reclaimed": reclaimed, "under_live_lease": [r["id"] for r in leased]}, text)


def _reclaim_preview(db: SessionDB, *, everything: bool) -> Result:
    stale = db.preview_reclaim("stale")
    stale_ids = {row["id"] for row in stale}
    leased = [row for row in db.preview_reclaim("all") if row["id"] not in stale_ids]
    found = stale + leased if everything else stale
    document = {
        "dry_run": True,
        "would_reclaim": found,
        "under_live_lease": [] if everything else leased,
    }
    text: list[str | Table] = [f"dry run: a reclaim would fail {len(found)} running handoff(s)"]
    if found:
        text.append(
            Table(["SESSION", "OWNER", "WHY"], [(r["id"], r["owner"], r["reason"]) for r in found])
        )
    if not everything:
        text += _left_under_live_leases(leased)
    return Result(document, text)


def _left_under_live_leases(leased: list[dict[str, Any]]) -> list[str | Table]:
    """What a reclaim (or its dry run) leaves to the gateways that hold live leases."""
    if not leased:
        return []
    return [
        f"{len(leased)} running handoff(s) are under a live lease, left to their gateway; "
        "only --all would fail them:",
        Table(
            ["SESSION", "OWNER", "LEASE EXPIRES"],
            [(r["id"], r["owner"], local_time(r["lease_expires_at"])) for r in leased],
        ),
    ]


def configure_retry(actions: Any) -> None:
    parser = command(
        actions,
        "retry",
        run_retry,
        help="request a failed handoff again",
        description="Request a failed handoff again, on its platform or on --platform. With "
        "--wait, follow it as `handoff request --wait` does.",
    )
    parser.add_argument("session_id", metavar="SESSION_ID")
    add_option(
        parser,
        "--platform",
        env="HERMES_STATE_RETRY_PLATFORM",
        metavar="PLATFORM",
        help="deliver to this platform instead of the previous one",
    )
    _wait_options(parser, with_wait=True)
    _dry_run_option(parser, "the retry")


def run_retry(args: argparse.Namespace, out: Output) -> Result:
    interrupted = Interrupted()
    with (
        open_store(args, read_only=args.dry_run) as db,
        interrupted.caught(args.wait and not args.dry_run),
    ):
        if args.dry_run:
            state = db.get_handoff_state(args.session_id)
            if state is None:
                return unknown_session(args.session_id)
            return _would(args.session_id, state["state"] == HandoffState.FAILED, "retry", state)
        if db.retry_handoff(args.session_id, args.platform):
            if args.wait:
                return follow(db, args.session_id, args, out, interrupted, withdraw=True)
            platform = (db.get_handoff_state(args.session_id) or {}).get("platform")
            return Result(
                {"id": args.session_id, "requested": True, "platform": platform},
                [f"handoff of {args.session_id!r} requested again for {platform}"],
            )
        state = db.get_handoff_state(args.session_id)
    if state is None:
        return unknown_session(args.session_id)
    return Result(
        {"id": args.session_id, "requested": False, **state},
        code=EXIT_REFUSED,
        error=f"only a failed handoff can be retried; {args.session_id!r} is {_describe(state)}",
    )


# -- the audit trail ---------------------------------------------------------------------------


def configure_history(actions: Any) -> None:
    parser = command(
        actions, "history", run_history, help="the audit trail of SESSION_ID, oldest first"
    )
    parser.add_argument("session_id", metavar="SESSION_ID")


def run_history(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=True) as db:
        events = db.handoff_history(args.session_id)
        known = events or db.get_handoff_state(args.session_id) is not None
    if not known:
        return unknown_session(args.session_id)
    if not events:
        return Result(events, [f"no recorded handoff events for {args.session_id!r}"])
    return Result(events, [events_table(events)])


def events_table(events: list[dict[str, Any]]) -> Table:
    return Table(
        ["WHEN", "FROM", "TO", "BY", "ATTEMPT", "DETAIL"],
        [
            (
                local_time(event["at"]),
                event["from_state"],
                event["to_state"],
                event["actor"],
                event["attempt"],
                event["detail"],
            )
            for event in events
        ],
    )


def configure_prune(actions: Any) -> None:
    parser = command(actions, "prune-events", run_prune, help="delete audit events older than DAYS")
    add_option(
        parser,
        "--older-than",
        env="HERMES_STATE_PRUNE_OLDER_THAN",
        kind=finite_number("days", allow_zero=False, maximum=36500),
        metavar="DAYS",
        help="age in days (above 0 up to 36500; required)",
        required=True,
    )
    _dry_run_option(parser, "the prune")


def run_prune(args: argparse.Namespace, out: Output) -> Result:
    if args.older_than is None:
        raise InvalidInputError("prune-events needs --older-than DAYS")
    with open_store(args, must_exist=True, read_only=args.dry_run) as db:
        count = db.prune_handoff_events(args.older_than * 86400, dry_run=args.dry_run)
    if args.dry_run:
        return Result(
            {"dry_run": True, "would_delete": count},
            [f"dry run: would delete {count} event(s) older than {args.older_than:g} day(s)"],
        )
    return Result(
        {"deleted": count}, [f"deleted {count} event(s) older than {args.older_than:g} day(s)"]
    )


def configure_stats(actions: Any) -> None:
    command(actions, "stats", run_stats, help="counts per state, age of the oldest pending")


def run_stats(args: argparse.Namespace, out: Output) -> Result:
    with open_store(args, read_only=True) as db:
        stats = db.handoff_stats()
    age = stats["oldest_pending_age_seconds"]
    failures = stats["failures_last_hour"]
    text: list[str | Table] = [
        Table(["STATE", "COUNT"], list(stats["counts"].items())),
        "oldest pending: " + ("none" if age is None else f"{age:.0f} s ago"),
    ]
    if stats["running_by_owner"]:
        text.append(
            Table(
                ["OWNER", "RUNNING", "LIVE LEASES", "EXPIRED", "NO LEASE"],
                [
                    (
                        owner["owner"] or "(no owner)",
                        owner["running"],
                        owner["live_leases"],
                        owner["expired_leases"],
                        owner["no_lease"],
                    )
                    for owner in stats["running_by_owner"]
                ],
            )
        )
    text.append(f"failures in the last hour: {failures['count']}")
    if failures["top_errors"]:
        text.append(
            Table(["COUNT", "ERROR"], [(e["count"], e["error"]) for e in failures["top_errors"]])
        )
    return Result(stats, text)
