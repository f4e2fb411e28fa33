"""The plans of the title operations: setting a unique title, reading it, lineage lookups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import statements
from ..errors import InvalidInputError
from ..statements import Capabilities
from ..titles import lineage_base, lineage_pattern, next_in_lineage, sanitize_title
from ..validation import require_identifier, require_str
from .core import Body, Plan, Row, Step
from .reads import _first_row

#: The provenance ``set_session_title`` records: a title the user chose (upstream's name).
USER_TITLE = "user"


def _set_title(_caps: Capabilities, params: Mapping[str, Any]) -> Body[bool]:
    existing = yield Step(statements.get_title(), params)
    if not existing.rows:
        return False
    if params["title"] is not None:
        holder = yield Step(statements.title_holder(), params)
        if holder.rows:
            raise InvalidInputError(
                f"title {params['title']!r} is already in use by session "
                f"{holder.rows[0]['id']!r}; choose another title"
            )
    updated = yield Step(statements.set_title(), params)
    return updated.rowcount > 0


def _title(_caps: Capabilities, params: Mapping[str, Any]) -> Body[str | None]:
    outcome = yield Step(statements.get_title(), params)
    return outcome.rows[0]["title"] if outcome.rows else None


def _lineage(_caps: Capabilities, base: str) -> Body[list[Row]]:
    outcome = yield Step(statements.lineage(), {"base": base, "pattern": lineage_pattern(base)})
    return outcome.rows


def _resolve_by_title(caps: Capabilities, title: str) -> Body[str | None]:
    rows = yield from _lineage(caps, title)
    numbered = [row for row in rows if row["title"] != title]  # newest first
    chosen = numbered or rows
    return str(chosen[0]["id"]) if chosen else None


def _next_title(caps: Capabilities, base: str) -> Body[str]:
    rows = yield from _lineage(caps, base)
    return next_in_lineage(base, [str(row["title"]) for row in rows])


class TitlePlans:
    """The title operations of :class:`~hermes_state.plans.PlanBook`."""

    def set_session_title(self, session_id: object, title: object) -> Plan[bool]:
        cleaned = sanitize_title(title)
        params = {
            "session_id": require_identifier("session_id", session_id),
            "title": cleaned,
            "title_source": USER_TITLE if cleaned is not None else None,
        }
        return Plan(_set_title, params, writes=True, single_statement=False)

    def get_session_title(self, session_id: object) -> Plan[str | None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_title, params, writes=False)

    def get_session_by_title(self, title: object) -> Plan[Row | None]:
        params = {"title": require_str("title", title)}
        return Plan(_first_row, statements.session_by_title(), params, writes=False)

    def resolve_session_by_title(self, title: object) -> Plan[str | None]:
        return Plan(_resolve_by_title, require_str("title", title), writes=False)

    def get_next_title_in_lineage(self, base_title: object) -> Plan[str]:
        return Plan(_next_title, lineage_base(require_str("base_title", base_title)), writes=False)
