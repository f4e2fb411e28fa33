"""The plan book: every store operation as a plan, its inputs validated."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from .. import statements
from ..errors import InvalidInputError, InvalidInputTypeError
from ..models import HandoffState
from ..validation import (
    NAME_LENGTH,
    ROLE_LENGTH,
    clean_error,
    require_content,
    require_count,
    require_flag,
    require_identifier,
    require_identifiers,
    require_message_fields,
    require_only_states,
    require_row_id,
    require_scope,
    require_seconds,
    require_size,
    require_state,
    require_text,
)
from .claims import ClaimBatch, _claim_batch, _claim_given, _claim_next
from .core import MAX_BATCH, MIN_TURN_LEASE_SECONDS, ClaimLedger, Ownership, Plan, Row
from .messages import MessagePlans
from .portability import PortabilityPlans
from .reads import _changed, _constant, _count, _first_row, _has_rows, _last_event_id, _rows, _stats
from .retention import RetentionPlans
from .search import SearchPlans
from .session_flags import SessionFlagPlans
from .session_listing import SessionListingPlans
from .session_writes import SessionWritePlans
from .titles import TitlePlans
from .transcript import Page, _append_message, _transcript, _transcripts
from .transitions import (
    Claim,
    _claim,
    _claimed,
    _finish_claims,
    _moved,
    _nothing_finished,
    _nothing_renewed,
    _reclaim,
    _reclaim_preview,
    _renew,
    _request,
)
from .turn_leases import (
    Turn,
    _acquire_turn,
    _live_turn,
    _refresh_turn,
    _refresh_turns,
    _release_turn,
    _release_turns,
    turn_fence,
)


class PlanBook(
    SessionWritePlans,
    TitlePlans,
    SessionFlagPlans,
    MessagePlans,
    SearchPlans,
    SessionListingPlans,
    PortabilityPlans,
    RetentionPlans,
):
    """Builds the plan of every store operation, with the store's context bound.

    Both stores hold one and only run its plans (synchronously or awaited), so the wiring of
    clock, actor, ownership and fencing is written once, here. ``actor`` is what the audit
    trail records as "who" (the gateway's owner, "cli", or the caller's choice).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        actor: str,
        ownership: Ownership | None,
        announce: Callable[[], None] | None = None,
    ) -> None:
        self.clock = clock
        self.actor = actor
        self.ownership = ownership
        self.ledger = ClaimLedger()
        self._announce = announce

    # sessions and transcript

    def append_message(
        self, session_id: object, role: object, content: object = None, **fields: object
    ) -> Plan[int]:
        """Append a live message with upstream's optional fields; the session's message and
        tool-call counters move in the same transaction. With ``turn_lease_holder`` the write
        is fenced on the conversation's turn lease (:func:`.turn_leases._hold_turn`)."""
        session = require_identifier("session_id", session_id)
        holder = fields.pop("turn_lease_holder", None)
        ttl = fields.pop("turn_lease_ttl_seconds", 300.0)
        turn = turn_fence(session, holder, ttl, self.clock())
        values, tool_calls, timestamp = require_message_fields(fields)
        params = {
            **values,
            "session_id": session,
            "role": require_identifier("role", role, max_length=ROLE_LENGTH),
            "content": require_content(content),
            "now": self.clock() if timestamp is None else timestamp,
            "tool_calls_added": tool_calls,
        }
        if turn is None:
            return Plan(_append_message, params, writes=True)
        # The fence reads before the insert: several statements, even on PostgreSQL.
        return Plan(_append_message, params, turn, writes=True, single_statement=False)

    def get_messages(
        self,
        session_id: object,
        include_inactive: object = False,
        include_compacted: object = False,
        limit: object = None,
        offset: object = 0,
        latest: object = False,
        after_id: object = None,
    ) -> Plan[list[Row]]:
        """The transcript upstream's ``get_messages`` reads: live rows, or also the rewound
        ones (``include_inactive``), or the display with compaction's copies once
        (``include_compacted``); paged from the oldest, from the newest (``latest``, still
        returned oldest first), or after the id ``after_id``."""
        params: dict[str, Any] = {"session_id": require_identifier("session_id", session_id)}
        inactive = require_flag("include_inactive", include_inactive)
        compacted = require_flag("include_compacted", include_compacted)
        page = Page(
            latest=require_flag("latest", latest),
            limit=None if limit is None else require_size("limit", limit),
            offset=require_size("offset", offset),
            after_id=None if after_id is None else require_row_id("after_id", after_id),
        )
        if page.after_id is not None and (page.latest or page.offset):
            raise InvalidInputError(
                "after_id pages by id: it cannot be combined with latest or offset"
            )
        if page.after_id is not None and compacted:
            raise InvalidInputError(
                "after_id cannot be combined with include_compacted (a deduplicated display "
                "is paged with limit and offset)"
            )
        params.update(limit=page.limit, offset=page.offset, after_id=page.after_id)
        visibility = (
            statements.Visibility.ALL
            if inactive
            else (statements.Visibility.DISPLAY if compacted else statements.Visibility.LIVE)
        )
        return Plan(_transcript, params, visibility, page, compacted, writes=False)

    def count_messages(self, session_id: object) -> Plan[int]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_count, statements.count_messages(), params, writes=False)

    def message_count(self, session_id: object) -> Plan[int]:
        if session_id is None:
            return Plan(_count, statements.count_message_rows(False), {}, writes=False)
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_count, statements.count_message_rows(True), params, writes=False)

    # handoff transitions

    def _transition_params(self, session_id: object) -> dict[str, Any]:
        return {
            "session_id": require_identifier("session_id", session_id),
            "now": self.clock(),
            "actor": self.actor,
        }

    def _announced(self, requested: bool) -> bool:
        if requested and self._announce is not None:
            self._announce()
        return requested

    def request_handoff(self, session_id: object, platform: object) -> Plan[bool]:
        params = self._transition_params(session_id)
        params["platform"] = require_identifier("platform", platform, max_length=NAME_LENGTH)
        transition = statements.request_handoff()
        return Plan(_request, transition, params, writes=True, after=self._announced)

    def retry_handoff(self, session_id: object, platform: object = None) -> Plan[bool]:
        """failed -> pending again, on the same platform unless another is given."""
        params = self._transition_params(session_id)
        if platform is not None:
            platform = require_identifier("platform", platform, max_length=NAME_LENGTH)
        params["platform"] = platform
        transition = statements.request_handoff(retry=True)
        return Plan(_request, transition, params, writes=True, after=self._announced)

    def claim_handoff(self, session_id: object) -> Plan[bool]:
        params = self._transition_params(session_id)
        ownership = self.ownership
        if ownership is None:
            # Without ownership nothing is fenced on the attempt (ClaimLedger.fence answers
            # Fence.NONE), so the hot path neither reads it back nor records it.
            params.update(owner=None, lease_expires_at=None)
            return Plan(_claimed, params, writes=True)
        params["owner"] = ownership.owner
        params["lease_expires_at"] = ownership.lease_until(params["now"])
        after = functools.partial(self.ledger.record, params["session_id"])
        return Plan(_claim, params, writes=True, after=after)

    def claim_pending_handoffs(self, limit: object, platform: object = None) -> Plan[list[Row]]:
        """Up to ``limit`` pending rows (of ``platform``, when given) claimed in one go."""
        params: dict[str, Any] = {
            "limit": require_count("limit", limit, maximum=MAX_BATCH),
            "now": self.clock(),
            "actor": self.actor,
        }
        if platform is not None:
            params["platform"] = require_identifier("platform", platform, max_length=NAME_LENGTH)
        ownership = self.ownership
        params["owner"] = ownership.owner if ownership else None
        params["lease_expires_at"] = ownership.lease_until(params["now"]) if ownership else None
        return Plan(
            _claim_batch,
            platform is not None,
            params,
            writes=True,
            after=self._record_claims,
        )

    def _record_claims(self, rows: list[Row]) -> list[Row]:
        return rows if self.ownership is None else self.ledger.record_claimed(rows)

    def claim_handoffs(
        self, session_ids: object, turn_holders: object = None, turn_seconds: object = 300.0
    ) -> Plan[ClaimBatch]:
        """pending -> running for those of ``session_ids`` still pending (rows another claimer
        holds are left to it), each stamped, leased and recorded like :meth:`claim_handoff`.

        With ``turn_holders`` (``{session id: holder}``, one for every id), a row is claimed
        only with its conversation's turn lease, taken for its holder for ``turn_seconds`` in
        the same transaction (as :meth:`try_acquire_session_turn_lease` takes it); of several
        rows of one conversation only the oldest is tried. A row whose turn is held elsewhere
        stays pending, and nothing is taken for it.
        """
        ids = require_identifiers("session_ids", session_ids)
        if len(ids) > MAX_BATCH:
            raise InvalidInputError(
                f"session_ids names {len(ids)} rows; claim at most {MAX_BATCH} at once"
            )
        now = self.clock()
        ownership = self.ownership
        params: dict[str, Any] = {
            "now": now,
            "actor": self.actor,
            "owner": ownership.owner if ownership else None,
            "lease_expires_at": ownership.lease_until(now) if ownership else None,
        }
        holders = None
        if turn_holders is not None:
            holders = dict(_turns("turn_holders", turn_holders))
            missing = [session_id for session_id in ids if session_id not in holders]
            if missing:
                raise InvalidInputError(
                    f"turn_holders names no holder for {missing[0]!r}; give one for every id"
                )
            ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("turn_seconds", turn_seconds))
            params["turn_until"] = now + ttl
        if not ids:
            return Plan(_constant, ClaimBatch([], []), writes=False)
        return Plan(_claim_given, ids, holders, params, writes=True, after=self._record_batch)

    def claim_next_handoffs(
        self,
        limit: object,
        exclude: object = (),
        turn_gateway: object = None,
        turn_seconds: object = 300.0,
    ) -> Plan[ClaimBatch]:
        """:meth:`claim_handoffs` of the ``limit`` oldest pending rows no other claimer holds,
        but those in ``exclude``; each row's turn lease (with ``turn_gateway``) named for its
        :func:`delivery_holder`."""
        now = self.clock()
        ownership = self.ownership
        params: dict[str, Any] = {
            "limit": require_count("limit", limit, maximum=MAX_BATCH),
            "exclude": require_identifiers("exclude", exclude),
            "now": now,
            "actor": self.actor,
            "owner": ownership.owner if ownership else None,
            "lease_expires_at": ownership.lease_until(now) if ownership else None,
        }
        gateway = None
        if turn_gateway is not None:
            gateway = require_identifier("turn_gateway", turn_gateway)
            ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("turn_seconds", turn_seconds))
            params.update(turn_gateway=gateway, turn_until=now + ttl)
        return Plan(_claim_next, gateway, params, writes=True, after=self._record_batch)

    def _record_batch(self, batch: ClaimBatch) -> ClaimBatch:
        self._record_claims(batch.rows)
        return batch

    def complete_handoff(self, session_id: object) -> Plan[bool]:
        params = self._transition_params(session_id)
        if self.ownership is None:  # nothing was recorded by claim_handoff: nothing to forget
            transition = statements.complete_handoff(statements.Fence.NONE)
            return Plan(_moved, transition, params, writes=True)
        fence, fence_params = self.ledger.fence(params["session_id"], self.ownership)
        params.update(fence_params)
        after = functools.partial(self.ledger.forget, params["session_id"])
        transition = statements.complete_handoff(fence)
        return Plan(_moved, transition, params, writes=True, after=after)

    def fail_handoff(
        self, session_id: object, error: object, only_states: object = None
    ) -> Plan[bool]:
        params = self._transition_params(session_id)
        from_states = require_only_states(only_states)
        fence, fence_params = self.ledger.fence(params["session_id"], self.ownership)
        params.update(fence_params, error=clean_error(error))
        after = functools.partial(self.ledger.forget, params["session_id"])
        transition = statements.fail_handoff(from_states, fence)
        return Plan(_moved, transition, params, writes=True, after=after)

    def complete_handoffs(self, session_ids: object) -> Plan[dict[str, bool]]:
        """running -> completed for many rows at once, each fenced like :meth:`complete_handoff`."""
        ids = require_identifiers("session_ids", session_ids)
        return self._finish(dict.fromkeys(ids), [])

    def fail_handoffs(self, errors: object) -> Plan[dict[str, bool]]:
        """running -> failed for many rows at once (``{id: error}``), each with its own error,
        each fenced like :meth:`fail_handoff` on a running row."""
        if not isinstance(errors, Mapping):
            kind = type(errors).__name__
            raise InvalidInputTypeError(f"errors must be a mapping of id to error, not {kind}")
        ids = require_identifiers("errors", list(errors))
        return self._finish({i: clean_error(errors[i]) for i in ids}, [])

    def finish_handoffs(
        self, outcomes: object, release_turns: object = None
    ) -> Plan[dict[str, bool]]:
        """Finish many running rows at once, ``{id: None}`` completing one and ``{id: error}``
        failing it, each fenced like :meth:`complete_handoff` / :meth:`fail_handoff`; and, in
        the same transaction, give up the turn leases ``release_turns`` names
        (``{session id: holder}``), whatever became of the rows."""
        if not isinstance(outcomes, Mapping):
            kind = type(outcomes).__name__
            raise InvalidInputTypeError(
                f"outcomes must be a mapping of id to None (completed) or an error (failed), "
                f"not {kind}"
            )
        ids = require_identifiers("outcomes", list(outcomes))
        errors = {i: None if outcomes[i] is None else clean_error(outcomes[i]) for i in ids}
        releases = [] if release_turns is None else _turns("release_turns", release_turns)
        return self._finish(errors, releases)

    def _finish(
        self, errors: Mapping[str, str | None], releases: list[Turn]
    ) -> Plan[dict[str, bool]]:
        if not errors and not releases:
            return Plan(_nothing_finished, writes=False)
        claims: list[Claim] = []
        for session_id, error in errors.items():
            fence, fence_params = self.ledger.fence(session_id, self.ownership)
            claims.append((session_id, fence, fence_params.get("attempt"), error))
        owner = self.ownership.owner if self.ownership else None
        params = {"now": self.clock(), "actor": self.actor, "owner": owner}
        after = self._forget_finished
        return Plan(_finish_claims, claims, releases, params, writes=True, after=after)

    def _forget_finished(self, done: dict[str, bool]) -> dict[str, bool]:
        for session_id, finished in done.items():
            self.ledger.forget(session_id, finished)
        return done

    def renew_handoff_leases(self, session_ids: object) -> Plan[list[str]]:
        # In id order, like the row locks a reclaim takes: opposite orders would deadlock.
        ids = sorted(require_identifiers("session_ids", session_ids))
        ownership = self.ownership
        if ownership is None or ownership.lease_seconds is None or not ids:
            return Plan(_nothing_renewed, writes=False)
        lease_until = ownership.lease_until(self.clock())
        params = {"owner": ownership.owner, "lease_expires_at": lease_until}
        return Plan(_renew, ids, params, writes=True)

    def _reclaim_params(self, error: object) -> dict[str, Any]:
        return {
            "error": clean_error(error),
            "now": self.clock(),
            "actor": self.actor,
            "owner": self.ownership.owner if self.ownership else None,
        }

    def reclaim_handoffs(self, scope: object, error: object) -> Plan[list[str]]:
        """Fail the running rows in ``scope`` (see :class:`~hermes_state.statements.ReclaimScope`).

        STALE without ownership takes rows without a lease or with an expired one: a store
        that does not know who it is never takes a row a live gateway holds under a lease.
        """
        params = self._reclaim_params(error)
        return Plan(_reclaim, require_scope(scope), params, writes=True)

    def reclaim_stale_running_handoffs(self, error: object) -> Plan[list[str]]:
        return self.reclaim_handoffs(statements.ReclaimScope.STALE, error)

    def reclaim_expired_handoffs(self, error: object) -> Plan[list[str]]:
        return self.reclaim_handoffs(statements.ReclaimScope.EXPIRED, error)

    def reclaim_running_handoffs(self, error: object) -> Plan[list[str]]:
        return self.reclaim_handoffs(statements.ReclaimScope.ALL, error)

    def preview_reclaim(self, scope: object = "stale") -> Plan[list[Row]]:
        """What :meth:`reclaim_handoffs` would fail, and why, changing nothing."""
        params = self._reclaim_params("")
        return Plan(_reclaim_preview, require_scope(scope), params, writes=False)

    # the audit trail

    def handoff_history(self, session_id: object) -> Plan[list[Row]]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_rows, statements.handoff_history(), params, writes=False)

    def prune_handoff_events(self, older_than_seconds: object, dry_run: bool = False) -> Plan[int]:
        """Delete events older than ``older_than_seconds``; with ``dry_run`` only count them."""
        age = require_seconds("older_than_seconds", older_than_seconds)
        if age < 0:
            raise InvalidInputError(f"older_than_seconds must not be negative, not {age:g}")
        params = {"before": self.clock() - age}
        if dry_run:
            return Plan(_count, statements.count_events_before(), params, writes=False)
        return Plan(_changed, statements.prune_events(), params, writes=True)

    # session turn leases

    def _turn_params(
        self, session_id: object, holder: object, ttl_seconds: object = None
    ) -> dict[str, Any] | None:
        """Validated parameters; None for an empty id or holder (upstream answers "no")."""
        if session_id == "" or holder == "":
            return None
        params: dict[str, Any] = {
            "session_id": require_identifier("session_id", session_id),
            "lease_holder": require_identifier("holder", holder),
            "now": self.clock(),
        }
        if ttl_seconds is not None:
            ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("ttl_seconds", ttl_seconds))
            params["lease_until"] = params["now"] + ttl
        return params

    def try_acquire_session_turn_lease(
        self, session_id: object, holder: object, ttl_seconds: object
    ) -> Plan[bool]:
        """Take the conversation's turn lease (an expired one is taken over); True when
        ``holder`` holds it afterwards, also when it already did."""
        params = self._turn_params(session_id, holder, ttl_seconds)
        if params is None:
            return Plan(_constant, False, writes=False)
        # Several statements (the lineage walk, then the lease): one transaction.
        return Plan(_acquire_turn, params, writes=True, single_statement=False)

    def has_live_session_turn_lease(self, session_id: object) -> Plan[bool]:
        """Whether anyone holds the conversation's lease unexpired now."""
        if session_id == "":
            return Plan(_constant, False, writes=False)
        params = {"session_id": require_identifier("session_id", session_id), "now": self.clock()}
        return Plan(_live_turn, params, writes=False, single_statement=False)

    def refresh_session_turn_lease(
        self, session_id: object, holder: object, ttl_seconds: object
    ) -> Plan[bool]:
        """Extend the lease while ``holder`` holds it; False once another took it over."""
        params = self._turn_params(session_id, holder, ttl_seconds)
        if params is None:
            return Plan(_constant, False, writes=False)
        return Plan(_refresh_turn, params, writes=True, single_statement=False)

    def release_session_turn_lease(self, session_id: object, holder: object) -> Plan[None]:
        """Give the lease up if ``holder`` holds it; otherwise change nothing."""
        params = self._turn_params(session_id, holder)
        if params is None:
            return Plan(_constant, None, writes=False)
        return Plan(_release_turn, params, writes=True, single_statement=False)

    def refresh_session_turn_leases(
        self, turn_holders: object, ttl_seconds: object
    ) -> Plan[list[str]]:
        """:meth:`refresh_session_turn_lease` for many sessions at once (``{session id:
        holder}``); the sessions whose holder still held the lease, sorted."""
        turns = _turns("turn_holders", turn_holders)
        if not turns:
            return Plan(_constant, [], writes=False)
        ttl = max(MIN_TURN_LEASE_SECONDS, require_seconds("ttl_seconds", ttl_seconds))
        now = self.clock()
        params = {"now": now, "lease_until": now + ttl}
        return Plan(_refresh_turns, turns, params, writes=True)

    def release_session_turn_leases(self, turn_holders: object) -> Plan[None]:
        """:meth:`release_session_turn_lease` for many sessions at once (``{session id:
        holder}``)."""
        turns = _turns("turn_holders", turn_holders)
        if not turns:
            return Plan(_constant, None, writes=False)
        return Plan(_release_turns, turns, writes=True)

    # reads

    def list_pending_handoffs(self) -> Plan[list[Row]]:
        return Plan(_rows, statements.list_handoffs(HandoffState.PENDING), {}, writes=False)

    def list_handoffs(
        self,
        state: object = None,
        limit: object = None,
        after: object = None,
        search: object = None,
    ) -> Plan[list[Row]]:
        """Rows in ``state`` (every handed-off row for None), at most ``limit`` of them, those
        sorting after the session ``after`` (a page's last id), with ``search`` in their id."""
        wanted = None if state is None else require_state(state)
        params: dict[str, Any] = {}
        if limit is not None:
            params["limit"] = require_count("limit", limit)
        if after is not None:
            params["after"] = require_identifier("after", after)
        if search is not None:
            needle = require_text("search", search, nullable=False) or ""
            escaped = needle.replace("/", "//").replace("%", "/%").replace("_", "/_")
            params["search"] = f"%{escaped}%"
        statement = statements.list_handoffs(
            wanted, limit is not None, after=after is not None, search=search is not None
        )
        return Plan(_rows, statement, params, writes=False)

    def get_transcripts(self, session_ids: object) -> Plan[dict[str, list[Row]]]:
        """:meth:`get_messages` of many sessions at once: ``{id: transcript}``, every id given
        (an unknown one with an empty transcript)."""
        ids = require_identifiers("session_ids", session_ids)
        if not ids:
            return Plan(_constant, {}, writes=False)
        return Plan(_transcripts, ids, writes=False)

    def get_session(self, session_id: object) -> Plan[Row | None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_first_row, statements.get_session(), params, writes=False)

    def handoff_events_after(self, after: object, limit: object) -> Plan[list[Row]]:
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise InvalidInputError(f"after must be an event id (a number >= 0), not {after!r}")
        params = {"after": after, "limit": require_count("limit", limit)}
        return Plan(_rows, statements.handoff_events_after(), params, writes=False)

    def recent_handoff_failures(self, limit: object) -> Plan[list[Row]]:
        params = {"limit": require_count("limit", limit)}
        return Plan(_rows, statements.recent_failed_events(), params, writes=False)

    def last_handoff_event_id(self) -> Plan[int]:
        return Plan(_last_event_id, writes=False)

    def list_sessions(
        self,
        source: object = None,
        handoff_state: object = None,
        since: object = None,
        limit: object = None,
    ) -> Plan[list[Row]]:
        """Sessions, newest first: of ``source``, in ``handoff_state``, started at or after
        ``since`` (epoch seconds), at most ``limit`` (None: no filter, no limit)."""
        params: dict[str, Any] = {}
        if source is not None:
            params["source"] = require_identifier("source", source, max_length=NAME_LENGTH)
        if since is not None:
            params["since"] = require_seconds("since", since)
        if limit is not None:
            params["limit"] = require_count("limit", limit)
        statement = statements.list_sessions(
            None if handoff_state is None else require_state(handoff_state),
            by_source=source is not None,
            since=since is not None,
            limited=limit is not None,
        )
        return Plan(_rows, statement, params, writes=False)

    def has_pending_handoffs(self) -> Plan[bool]:
        return Plan(_has_rows, statements.has_pending_handoffs(), writes=False)

    def get_handoff_state(self, session_id: object) -> Plan[Row | None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_first_row, statements.get_handoff_state(), params, writes=False)

    def handoff_stats(self) -> Plan[Row]:
        return Plan(_stats, self.clock(), writes=False, single_statement=False)


def _turns(name: str, value: object) -> list[Turn]:
    """Validated ``{session id: holder}`` pairs, in session id order."""
    if not isinstance(value, Mapping):
        kind = type(value).__name__
        raise InvalidInputTypeError(f"{name} must be a mapping of session id to holder, not {kind}")
    pairs = {
        require_identifier("session_id", session_id): require_identifier("holder", holder)
        for session_id, holder in value.items()
    }
    return sorted(pairs.items())
