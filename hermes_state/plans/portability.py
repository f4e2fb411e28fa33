"""The plans of session portability: export (one, a lineage, all), the export guard, import."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .. import statements
from ..errors import HermesStateError, InvalidInputError, SessionExportTooLargeError
from ..statements import Capabilities
from ..validation import (
    NAME_LENGTH,
    ROLE_LENGTH,
    require_content,
    require_identifier,
    require_message,
    require_text,
)
from .core import Body, Plan, Row, Step
from .reads import _constant, _first_row
from .session_flags import _compression_lineage, _passthrough
from .session_listing import _names, _Search, _search_sessions, _text
from .session_writes import prompt_hash
from .transcript import _stored, _transcript

#: How many live messages one session may have for an in-memory export (upstream's default).
MAX_SAFE_EXPORT_MESSAGES: Final = 20_000
#: The environment variable that changes it (0 turns the guard off), where upstream reads
#: ``sessions.max_export_messages`` from its config file.
EXPORT_LIMIT_ENV: Final = "HERMES_STATE_MAX_EXPORT_MESSAGES"
#: ``export_all`` reads at most this many sessions (upstream's bound).
EXPORT_ALL_SESSIONS: Final = 100_000

#: Upstream's import caps: sessions per call, messages per session and in all, bytes of one
#: session's JSON and of the whole payload.
IMPORT_MAX_SESSIONS: Final = 500
IMPORT_MAX_MESSAGES_PER_SESSION: Final = 10_000
IMPORT_MAX_TOTAL_MESSAGES: Final = 50_000
IMPORT_MAX_SESSION_BYTES: Final = 5 * 1024 * 1024
IMPORT_MAX_TOTAL_BYTES: Final = 25 * 1024 * 1024

#: The text fields of an imported session and message: a str or None, nothing else.
SESSION_TEXT: Final = (
    "source",
    "user_id",
    "model",
    "system_prompt",
    "end_reason",
    "cwd",
    "git_branch",
    "git_repo_root",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
)
MESSAGE_TEXT: Final = (
    "tool_call_id",
    "tool_name",
    "effect_disposition",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "platform_message_id",
    "message_id",
)
#: Session columns bounded in the schema (MySQL/MariaDB refuse longer text).
_BOUNDED: Final = {"source": NAME_LENGTH, "user_id": None, "model": None}
_COUNTERS: Final = (*statements.TOKEN_COUNTERS, "api_call_count")
_COSTS: Final = ("estimated_cost_usd", "actual_cost_usd")
_BIGGEST: Final = 2**63 - 1
#: A message's reasoning payloads, decoded from JSON text when they are (as upstream's import).
_REASONING_JSON: Final = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


def resolved_max_export_messages() -> int:
    """The export guard's limit: :data:`EXPORT_LIMIT_ENV` when it holds a whole number of 0 or
    more (0: no guard), else :data:`MAX_SAFE_EXPORT_MESSAGES`."""
    raw = os.environ.get(EXPORT_LIMIT_ENV, "").strip()
    try:
        limit = int(raw)
    except ValueError:
        return MAX_SAFE_EXPORT_MESSAGES
    return limit if limit >= 0 else MAX_SAFE_EXPORT_MESSAGES


def _configured_limit() -> int:
    """The limit a guard without ``max_messages`` uses: ``hermes_state.resolved_max_export_
    messages()`` as the package holds it when the call is made (upstream's callers and tests
    replace that function on the package to change the limit), else this module's."""
    package = sys.modules.get(__name__.partition(".")[0])
    resolve = getattr(package, "resolved_max_export_messages", None) if package else None
    limit = resolve() if callable(resolve) else resolved_max_export_messages()
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInputError(f"resolved_max_export_messages() gave {limit!r}, not an int")
    return limit


# -- export -----------------------------------------------------------------------------------


def _exported(caps: Capabilities, session_id: str) -> Body[Row | None]:
    row = yield from _first_row(caps, statements.get_session(), {"session_id": session_id})
    if row is None:
        return None
    messages = yield from _transcript(caps, {"session_id": session_id})
    return {**row, "messages": messages}


def _exported_lineage(caps: Capabilities, session_id: str) -> Body[Row | None]:
    ids = yield from _compression_lineage(caps, session_id)
    segments: list[Row] = []
    for sid in ids:
        segment = yield from _exported(caps, sid)
        if segment is not None:
            segments.append(segment)
    if not segments:
        return None
    whole = dict(segments[-1])
    whole["segments"] = segments
    whole["lineage_session_ids"] = [segment["id"] for segment in segments]
    whole["messages"] = [message for segment in segments for message in segment["messages"]]
    whole["message_count"] = len(whole["messages"])
    return whole


def _exported_all(caps: Capabilities, search: _Search) -> Body[list[Row]]:
    rows = yield from _search_sessions(caps, search)
    exported: list[Row] = []
    for row in rows:
        messages = yield from _transcript(caps, {"session_id": row["id"]})
        exported.append({**row, "messages": messages})
    return exported


def _guarded(caps: Capabilities, session_id: str, limit: int) -> Body[int]:
    params = {"session_id": session_id, "bound": limit + 1}
    counted = yield Step(statements.count_live_messages_upto(), params)
    found = int(counted.rows[0]["n"]) if counted.rows else 0
    if found > limit:
        raise SessionExportTooLargeError(session_id, found, limit)
    return found


# -- import: the checks -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Record:
    """One session of an import, checked and in the form its statements bind."""

    index: int
    session_id: str
    row: dict[str, Any]
    prompt: str | None
    messages: list[dict[str, Any]]
    tool_calls: int
    parent: str | None
    ended_at: float | None
    end_reason: str | None


def _error(index: int, session_id: str, error: str) -> Row:
    item: Row = {"index": index, "error": error}
    if session_id:
        item["session_id"] = session_id
    return item


def _failed(errors: list[Row]) -> Row:
    return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}


def _succeeded(imported: list[str], skipped: list[str], detached: int) -> Row:
    return {
        "ok": True,
        "imported": len(imported),
        "skipped": len(skipped),
        "detached": detached,
        "imported_ids": imported,
        "skipped_ids": skipped,
        "errors": [],
    }


def _text_or_none(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string")
    return require_text(name, value)


def _bounded(name: str, value: str | None, max_length: int | None) -> str | None:
    if value is None or value == "":
        return value
    if max_length is None:
        return require_identifier(name, value)
    return require_identifier(name, value, max_length=max_length)


def _json_object(value: object) -> str | None:
    """``model_config``: a dict, or the JSON text of one, kept as JSON text."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            raise InvalidInputError("model_config must be valid JSON") from None
        if not isinstance(parsed, dict):
            raise InvalidInputError("model_config must be a JSON object")
        return _text_or_none("model_config", value)
    if not isinstance(value, dict):
        raise InvalidInputError("model_config must be a JSON object")
    try:
        return _text_or_none("model_config", json.dumps(value))
    except (TypeError, ValueError):
        raise InvalidInputError("model_config must be JSON serializable") from None


def _number(value: object) -> float | None:
    """A time or cost, as upstream reads it: a finite number, else nothing."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _counter(value: object) -> int:
    """A counter, as upstream reads it: a whole number, else 0 (and 0 beyond 64 bits)."""
    if value is None:
        return 0
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0
    return number if -_BIGGEST <= number <= _BIGGEST else 0


def _message(index: int, message: Mapping[str, Any], now: float) -> tuple[dict[str, Any], int]:
    """One message as the import stores it, and its tool calls (``now``: the time of a message
    that carries none)."""
    where = f"messages[{index}]"
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidInputError(f"{where}.role must be a non-empty string")
    for name in MESSAGE_TEXT:
        if message.get(name) is not None and not isinstance(message.get(name), str):
            raise InvalidInputError(f"{name} must be a string")
    given = dict(message)
    token_count = given.get("token_count")
    if token_count is not None:
        try:
            given["token_count"] = int(token_count)
        except (TypeError, ValueError, OverflowError):
            raise InvalidInputError("token_count must be an integer") from None
        if abs(given["token_count"]) > _BIGGEST:
            raise InvalidInputError("token_count must be an integer") from None
    for name in _REASONING_JSON:
        value = given.get(name)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                given[name] = json.loads(value)
    given["timestamp"] = _number(given.get("timestamp"))
    try:
        _role, content, values, tool_calls, timestamp = require_message(given)
        row = {
            **values,
            "role": require_identifier("role", role, max_length=ROLE_LENGTH),
            "content": require_content(content),
            "now": now if timestamp is None else timestamp,
        }
    except HermesStateError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    return row, tool_calls


def _record(index: int, raw: Mapping[str, Any], session_id: str, now: float) -> _Record:
    text = {name: _text_or_none(name, raw.get(name)) for name in SESSION_TEXT}
    for name, length in _BOUNDED.items():
        text[name] = _bounded(name, text[name], length)
    parent = _bounded(
        "parent_session_id", _text_or_none("parent_session_id", raw.get("parent_session_id")), None
    )
    model_config = _json_object(raw.get("model_config"))
    prompt = text.pop("system_prompt") or None
    started = _number(raw.get("started_at"))
    row: dict[str, Any] = {
        "id": session_id,
        "source": text.pop("source") or "import",
        "model_config": model_config,
        "system_prompt_hash": None if prompt is None else prompt_hash(prompt),
        "started_at": now if started is None else started,
        "archived": 1 if raw.get("archived") else 0,
        **{name: _counter(raw.get(name)) for name in _COUNTERS},
        **{name: _number(raw.get(name)) for name in _COSTS},
    }
    end_reason = text.pop("end_reason")
    row.update(text)
    stored: list[dict[str, Any]] = []
    tool_calls = 0
    clock = now
    for position, message in enumerate(raw.get("messages") or []):
        values, calls = _message(position, message, clock)
        stored.append({**values, "session_id": session_id})
        clock = max(clock, values["now"]) + 1e-6
        tool_calls += calls
    return _Record(
        index=index,
        session_id=session_id,
        row=row,
        prompt=prompt,
        messages=stored,
        tool_calls=tool_calls,
        parent=(parent or "").strip() or None,
        ended_at=_number(raw.get("ended_at")),
        end_reason=end_reason,
    )


def json_size(raw: object) -> int | None:
    """The bytes of ``raw`` as compact UTF-8 JSON, as the import's size caps count them (None:
    not JSON serializable)."""
    try:
        text = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return len(text.encode("utf-8", "surrogatepass"))


def _checked(sessions: list[Any], now: float) -> tuple[list[_Record], list[Row]]:
    """Every record checked before anything is written, as upstream's import checks them (in
    its order): the records that pass, and the errors of those that do not."""
    records: list[_Record] = []
    errors: list[Row] = []
    seen: set[str] = set()
    total_messages = 0
    total_bytes = 0
    for index, raw in enumerate(sessions):
        if not isinstance(raw, dict):
            errors.append(_error(index, "", "session must be an object"))
            continue
        session_id = str(raw.get("id") or "").strip()
        if not session_id:
            errors.append(_error(index, "", "session id is required"))
            continue
        if session_id in seen:
            errors.append(_error(index, session_id, "duplicate session id"))
            continue
        messages = raw.get("messages") or []
        if not isinstance(messages, list):
            errors.append(_error(index, session_id, "messages must be a list"))
            continue
        if len(messages) > IMPORT_MAX_MESSAGES_PER_SESSION:
            errors.append(
                _error(index, session_id, "messages exceeds the per-session import limit")
            )
            continue
        if any(not isinstance(message, dict) for message in messages):
            errors.append(_error(index, session_id, "messages must contain only objects"))
            continue
        size = json_size(raw)
        if size is None:
            errors.append(_error(index, session_id, "session must be JSON serializable"))
            continue
        if size > IMPORT_MAX_SESSION_BYTES:
            errors.append(_error(index, session_id, "session exceeds the import size limit"))
            continue
        total_bytes += size
        if total_bytes > IMPORT_MAX_TOTAL_BYTES:
            errors.append(_error(index, session_id, "import exceeds the total size limit"))
            continue
        try:
            require_identifier("session id", session_id)
            record = _record(index, raw, session_id, now)
        except HermesStateError as exc:
            errors.append(_error(index, session_id, str(exc)))
            continue
        total_messages += len(record.messages)
        if total_messages > IMPORT_MAX_TOTAL_MESSAGES:
            errors.append(_error(index, session_id, "messages exceeds the total import limit"))
            continue
        seen.add(session_id)
        records.append(record)
    return records, errors


def import_problems(sessions: list[Any], now: float = 0.0) -> list[Row]:
    """What ``import_sessions`` would refuse in ``sessions`` before writing anything (each
    error with the record's ``index``): empty when every record passes its checks."""
    return _checked(sessions, now)[1]


# -- import: the write ------------------------------------------------------------------------


def _would_cycle(linked: dict[str, str], child: str, parent: str) -> Body[bool]:
    seen = {child}
    current: str | None = parent
    while current:
        if current in seen:
            return True
        seen.add(current)
        if current in linked:
            current = linked[current]
            continue
        found = yield Step(statements.parent_of(), {"session_id": current})
        if not found.rows:
            return False
        current = found.rows[0]["parent_session_id"]
    return False


def _imported(caps: Capabilities, records: list[_Record]) -> Body[Row]:
    # Reads first: what exists is skipped, and a title another session holds (the titles are
    # unique) refuses the whole import before anything is written.
    fresh: list[_Record] = []
    skipped: list[str] = []
    for record in records:
        found = yield Step(statements.session_exists(), {"session_id": record.session_id})
        if found.rows:
            skipped.append(record.session_id)
        else:
            fresh.append(record)
    errors: list[Row] = []
    titles: dict[str, str] = {}
    for record in fresh:
        title = record.row.get("title")
        if title is None:
            continue
        holder = titles.get(title)
        if holder is None:
            taken = yield Step(statements.title_taken(), {"title": title})
            holder = str(taken.rows[0]["id"]) if taken.rows else None
        if holder is not None:
            why = f"title {title!r} is already the title of session {holder!r}"
            errors.append(_error(record.index, record.session_id, why))
        titles.setdefault(title, record.session_id)
    if errors:
        return _failed(errors)
    for record in fresh:
        if record.prompt is not None:
            prompt = {"hash": record.row["system_prompt_hash"], "prompt": record.prompt}
            yield Step(statements.store_system_prompt(caps.name), prompt)
        yield Step(statements.import_session(), record.row)
        insert = statements.import_message()
        for message in record.messages:
            yield Step(insert, _stored(caps, message))
        finish = {
            "session_id": record.session_id,
            "messages_total": len(record.messages),
            "tool_calls_total": record.tool_calls,
            "ended": record.ended_at,
            "reason": record.end_reason,
        }
        yield Step(statements.finish_imported_session(), finish)
    # Parents last, so a child may come before its parent in the payload; a parent that is
    # neither stored nor imported, or a link that would close a cycle, is dropped (detached).
    linked = {record.session_id: record.parent for record in fresh if record.parent}
    detached = 0
    for record in fresh:
        parent = record.parent
        if parent is None:
            continue
        there = yield Step(statements.session_exists(), {"session_id": parent})
        cycles = yield from _would_cycle(linked, record.session_id, parent)
        if there.rows and not cycles:
            link = {"session_id": record.session_id, "parent": parent}
            yield Step(statements.set_imported_parent(), link)
        else:
            linked.pop(record.session_id, None)
            detached += 1
    return _succeeded([record.session_id for record in fresh], skipped, detached)


class PortabilityPlans:
    """Export and import of :class:`~hermes_state.plans.PlanBook`, in upstream's shapes."""

    clock: Callable[[], float]

    def export_session(self, session_id: object) -> Plan[Row | None]:
        sid = require_identifier("session_id", session_id)
        return Plan(_exported, sid, writes=False, single_statement=False)

    def export_session_lineage(self, session_id: object) -> Plan[Row | None]:
        sid = _passthrough("session_id", session_id)
        if sid is None:
            return Plan(_constant, None, writes=False)
        return Plan(_exported_lineage, sid, writes=False, single_statement=False)

    def export_all(self, source: object = None) -> Plan[list[Row]]:
        if isinstance(source, str):
            sources = [source] if _text("source", source) else []
        else:
            sources = _names("source", source)
        search = _Search(
            sources=sources, workspace={}, page={"limit": EXPORT_ALL_SESSIONS, "offset": 0}
        )
        return Plan(_exported_all, search, writes=False, single_statement=False)

    def assert_export_safe(self, session_id: object, max_messages: object = None) -> Plan[int]:
        sid = require_identifier("session_id", session_id)
        if max_messages is None:
            limit = _configured_limit()
        elif isinstance(max_messages, bool) or not isinstance(max_messages, int):
            raise InvalidInputError(f"max_messages must be an int, not {max_messages!r}")
        else:
            limit = max_messages
        if limit < 0:
            raise InvalidInputError("max_messages must be non-negative")
        if limit == 0:  # no guard: nothing is counted
            return Plan(_constant, 0, writes=False)
        return Plan(_guarded, sid, limit, writes=False)

    def import_sessions(self, sessions: object) -> Plan[Row]:
        if not isinstance(sessions, list):
            raise InvalidInputError("sessions must be a list")
        if len(sessions) > IMPORT_MAX_SESSIONS:
            raise InvalidInputError(f"sessions must contain at most {IMPORT_MAX_SESSIONS} entries")
        records, errors = _checked(sessions, self.clock())
        if errors:
            return Plan(_constant, _failed(errors), writes=False)
        if not records:
            return Plan(_constant, _succeeded([], [], 0), writes=False)
        return Plan(_imported, records, writes=True, single_statement=False)
