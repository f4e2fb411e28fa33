"""The plans of the title operations: setting a unique title with its provenance (the user's or
an automatic one), reading it, lineage lookups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import statements
from ..errors import InvalidInputError
from ..statements import Capabilities
from ..titles import (
    CANONICAL_BOT_CHAT_TITLE,
    TITLE_SOURCE_USER,
    lineage_base,
    lineage_pattern,
    next_in_lineage,
    require_auto_title_source,
    require_title_source,
    sanitize_title,
    title_rank,
)
from ..validation import require_identifier, require_str
from .core import Body, Plan, Row, Step
from .reads import _changed, _first_row
from .session_flags import MAX_CHAIN_LENGTH


def _is_canonical(state: Row) -> bool:
    """Bot Mode's canonical chat: hidden and titled exactly "Bot Chat" (a visible session of
    that title is an ordinary one)."""
    return bool(state["hidden"]) and state["title"] == CANONICAL_BOT_CHAT_TITLE


def _is_compression_ancestor(holder_id: str, session_id: str) -> Body[bool]:
    """Whether ``holder_id`` is an earlier segment of ``session_id``'s conversation: a parent,
    or a parent's parent and so on, that ended by compression."""
    current, seen = session_id, {session_id}
    for _ in range(MAX_CHAIN_LENGTH):
        parent = yield Step(statements.compression_parent(), {"session_id": current})
        if not parent.rows:
            return False
        current = str(parent.rows[0]["id"])
        if current == holder_id:
            return True
        if current in seen:
            return False
        seen.add(current)
    return False


def _free_title(title: str, session_id: str, *, claimant_hidden: bool) -> Body[None]:
    """Make ``title`` free for ``session_id``, or refuse: another session holding it gives it
    up only when it is an earlier compression segment of this one (the user cannot reach it
    any more to rename it), or when it is a retired Bot Chat (archived, and hidden itself or
    claimed by a hidden session: the chat that replaces it)."""
    found = yield Step(statements.title_holder(), {"title": title, "session_id": session_id})
    if not found.rows:
        return
    holder = found.rows[0]
    holder_id = str(holder["id"])
    if (yield from _is_compression_ancestor(holder_id, session_id)):
        yield Step(statements.release_title(with_source=False), {"holder_id": holder_id})
    elif (
        title == CANONICAL_BOT_CHAT_TITLE
        and bool(holder["archived"])
        and (bool(holder["hidden"]) or claimant_hidden)
    ):
        yield Step(statements.release_title(with_source=True), {"holder_id": holder_id})
    else:
        raise InvalidInputError(
            f"title {title!r} is already in use by session {holder_id!r}; choose another title"
        )


def _set_title(_caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    session_id, title, source = params["session_id"], params["title"], params["source"]
    found = yield Step(statements.title_state(), {"session_id": session_id})
    if not found.rows:
        return False
    state = found.rows[0]
    by_user = source == TITLE_SOURCE_USER
    # Bot Mode finds its chat by this exact title alone: renamed, the conversation is lost.
    # Checked before provenance, so no rank of the stored title lets a writer through.
    if _is_canonical(state) and title != CANONICAL_BOT_CHAT_TITLE:
        if by_user:
            raise InvalidInputError(
                f"session {session_id!r} is a bot's canonical Bot Chat: Bot Mode finds it by "
                "that title, so it cannot be renamed or cleared; start a new bot instead"
            )
        return False
    if (
        not by_user
        and state["title"] is not None
        and title_rank(state["title_source"]) >= title_rank(source)
    ):
        return False  # an automatic title replaces only one of lower authority
    if title is not None:
        yield from _free_title(title, session_id, claimant_hidden=bool(state["hidden"]))
    written = {
        "session_id": session_id,
        "title": title,
        "title_source": source if title is not None else None,
        "seen_title": state["title"],
        "seen_source": state["title_source"],
    }
    updated = yield Step(statements.set_title(), written)
    return updated.rowcount > 0


def _title(_caps: Capabilities, params: Mapping[str, Any]) -> Body[str | None]:
    outcome = yield Step(statements.get_title(), params)
    return outcome.rows[0]["title"] if outcome.rows else None


def _title_source(_caps: Capabilities, params: Mapping[str, Any]) -> Body[str | None]:
    outcome = yield Step(statements.title_state(), params)
    if not outcome.rows or outcome.rows[0]["title"] is None:
        return None
    source = outcome.rows[0]["title_source"]
    return None if source is None else str(source)


def _lineage(_caps: Capabilities, base: str) -> Body[list[Row]]:
    outcome = yield Step(statements.lineage(), {"base": base, "pattern": lineage_pattern(base)})
    return outcome.rows


def _resolve_by_title(caps: Capabilities, title: str) -> Body[str | None]:
    rows = yield from _lineage(caps, title)
    exact = [row for row in rows if row["title"] == title]
    if exact and title == CANONICAL_BOT_CHAT_TITLE:
        # The canonical chat is the bot's conversation; a "Bot Chat #N" is a branch of it or a
        # session of its own, where the bot cannot answer.
        return str(exact[0]["id"])
    numbered = [row for row in rows if row["title"] != title]  # newest first
    chosen = numbered or exact
    return str(chosen[0]["id"]) if chosen else None


def _next_title(caps: Capabilities, base: str) -> Body[str]:
    rows = yield from _lineage(caps, base)
    return next_in_lineage(base, [str(row["title"]) for row in rows])


def _title_write(session_id: object, title: object, source: str) -> Plan[bool]:
    params = {
        "session_id": require_identifier("session_id", session_id),
        "title": sanitize_title(title),
        "source": source,
    }
    return Plan(_set_title, params, writes=True, single_statement=False)


class TitlePlans:
    """The title operations of :class:`~hermes_state.plans.PlanBook`."""

    def set_session_title(self, session_id: object, title: object) -> Plan[bool]:
        return _title_write(session_id, title, TITLE_SOURCE_USER)

    def set_auto_title(self, session_id: object, title: object, *, source: object) -> Plan[bool]:
        return _title_write(session_id, title, require_auto_title_source(source))

    def get_session_title(self, session_id: object) -> Plan[str | None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_title, params, writes=False)

    def get_session_title_source(self, session_id: object) -> Plan[str | None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_title_source, params, writes=False)

    def set_session_title_source(self, session_id: object, source: object) -> Plan[bool]:
        params = {
            "title_source": require_title_source(source),
            "session_id": require_identifier("session_id", session_id),
        }
        return Plan(
            _changed,
            statements.set_title_source(),
            params,
            writes=True,
            after=lambda changed: changed > 0,
        )

    def get_session_by_title(self, title: object) -> Plan[Row | None]:
        params = {"title": require_str("title", title)}
        return Plan(_first_row, statements.session_by_title(), params, writes=False)

    def resolve_session_by_title(self, title: object) -> Plan[str | None]:
        return Plan(_resolve_by_title, require_str("title", title), writes=False)

    def get_next_title_in_lineage(self, base_title: object) -> Plan[str]:
        return Plan(_next_title, lineage_base(require_str("base_title", base_title)), writes=False)
