"""Checks applied to every caller-supplied value before any database work starts."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .content import encoded_content
from .errors import InvalidInputError, InvalidInputTypeError
from .models import ERROR_LIMIT, ID_LENGTH, HandoffState
from .statements import ReclaimScope

__all__ = [
    "clean_error",
    "require_bit",
    "require_content",
    "require_count",
    "require_fields",
    "require_flag",
    "require_identifier",
    "require_identifiers",
    "require_message",
    "require_message_fields",
    "require_only_states",
    "require_row_id",
    "require_scope",
    "require_seconds",
    "require_size",
    "require_state",
    "require_text",
    "scrub_surrogates",
]

NAME_LENGTH: Final = 64
ROLE_LENGTH: Final = 32
_FAILABLE: Final = frozenset({HandoffState.PENDING, HandoffState.RUNNING})
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _type_name(value: object) -> str:
    return type(value).__name__


def _check_encodable(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{name} contains a lone surrogate and cannot be stored as UTF-8"
        ) from None


def require_str(name: str, value: object) -> str:
    """``value`` itself when it is a ``str``; anything else is refused as the wrong type."""
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"{name} must be a str, not {_type_name(value)}")
    return value


def require_identifier(name: str, value: object, *, max_length: int = ID_LENGTH) -> str:
    """A non-blank ``str`` of printable characters, at most ``max_length`` long.

    Quotes, SQL fragments and any non-control Unicode are fine: every value is a bound
    parameter. Control characters are refused because identifiers are printed in terminals.
    """
    value = require_str(name, value)
    if not value.strip():
        raise InvalidInputError(f"{name} must not be empty or blank")
    if len(value) > max_length:
        raise InvalidInputError(
            f"{name} is {len(value)} characters long; the limit is {max_length}"
        )
    # str.isprintable() runs in C and is False for every control character and every lone
    # surrogate, so the per-character checks below run only for the rare ids that need them.
    if not value.isprintable():
        if any(unicodedata.category(ch) == "Cc" for ch in value):
            raise InvalidInputError(f"{name} must not contain control characters: {value!r}")
        _check_encodable(name, value)
    return value


def require_identifiers(name: str, value: object) -> list[str]:
    """A list (or other non-string iterable) of identifiers, deduplicated in order."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInputTypeError(f"{name} must be a list of ids, not {_type_name(value)}")
    ids = [require_identifier(name, item) for item in value]
    return list(dict.fromkeys(ids))


def require_text(name: str, value: object, *, nullable: bool = True) -> str | None:
    """Free text (a title, a message): any length, but storable on every backend."""
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        expected = "a str or None" if nullable else "a str"
        raise InvalidInputTypeError(f"{name} must be {expected}, not {_type_name(value)}")
    if "\x00" in value:
        raise InvalidInputError(
            f"{name} must not contain NUL characters (PostgreSQL cannot store them)"
        )
    _check_encodable(name, value)
    return value


def scrub_surrogates(value: str) -> str:
    """``value`` with each lone surrogate replaced by U+FFFD, as upstream stores such text
    (web pages and tool output carry them; UTF-8 cannot)."""
    return value if value.isascii() else _SURROGATE.sub("\ufffd", value)


def _scrubbed_text(name: str, value: object) -> str | None:
    """:func:`require_text`, lone surrogates replaced first rather than refused."""
    return require_text(name, scrub_surrogates(value) if isinstance(value, str) else value)


def require_content(value: object) -> str | None:
    """Message content as upstream stores it: text (lone surrogates as U+FFFD), or multimodal
    content (a list of parts, or a dict) as its ``"\\x00json:"`` JSON text; None stays None."""
    if isinstance(value, list | dict):
        try:
            # json.dumps escapes every non-ASCII character: no surrogate or NUL survives.
            return encoded_content(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInputTypeError(f"content must be JSON-serialisable: {exc}") from None
    if value is not None and not isinstance(value, str):
        raise InvalidInputTypeError(
            f"content must be a str, a list or dict of parts, or None, not {_type_name(value)}"
        )
    return _scrubbed_text("content", value)


def require_int(name: str, value: object) -> int:
    """A whole number (``bool`` is refused: it is almost always a misplaced argument)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputTypeError(f"{name} must be an int, not {_type_name(value)}")
    return value


def require_count(name: str, value: object, *, maximum: int | None = None) -> int:
    """A whole number >= 1 (and <= ``maximum`` when given)."""
    value = require_int(name, value)
    if value < 1:
        raise InvalidInputError(f"{name} must be at least 1, not {value}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be at most {maximum}, not {value}")
    return value


def require_size(name: str, value: object) -> int:
    """A whole number >= 0: how many rows to return or to skip."""
    value = require_int(name, value)
    if value < 0:
        raise InvalidInputError(f"{name} must not be negative, not {value}")
    return value


def require_row_id(name: str, value: object) -> int:
    """A message id (any int: one that names no row simply matches nothing)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputTypeError(
            f"{name} must be a message id (an int), not {_type_name(value)}"
        )
    return value


def require_flag(name: str, value: object) -> bool:
    """A switch: True or False (anything else is almost always a misplaced argument)."""
    if not isinstance(value, bool):
        raise InvalidInputTypeError(f"{name} must be True or False, not {_type_name(value)}")
    return value


def require_bit(name: str, value: object) -> bool:
    """A flag upstream's callers pass as True/False or as the ints 1/0."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InvalidInputTypeError(f"{name} must be True or False (or 1/0), not {_type_name(value)}")


def require_seconds(name: str, value: object) -> float:
    """A finite epoch-seconds number (``bool`` is refused: it is almost always a mistake)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputTypeError(f"{name} must be a number of seconds, not {_type_name(value)}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidInputError(f"{name} must be finite, not {value!r}")
    return seconds


def _model_config(value: object) -> str | None:
    """Upstream stores the model configuration as JSON text of a dict (NULL when empty)."""
    if isinstance(value, str):
        value = _parsed_json("model_config", value)
    if not value:
        return None
    if not isinstance(value, dict):
        raise InvalidInputTypeError(
            f"model_config must be a dict (or its JSON text), not {_type_name(value)}"
        )
    return _json_text("model_config", value)


_FIELD_CHECKS: Final[dict[str, Callable[[object], object]]] = {
    "user_id": lambda v: None if v is None else require_identifier("user_id", v),
    "title": lambda v: require_text("title", v),
    "model": lambda v: None if v is None else require_identifier("model", v),
    "parent_session_id": lambda v: (
        None if v is None else require_identifier("parent_session_id", v)
    ),
    "started_at": lambda v: require_seconds("started_at", v),
    "ended_at": lambda v: None if v is None else require_seconds("ended_at", v),
    "end_reason": lambda v: require_text("end_reason", v),
    "model_config": _model_config,
    "system_prompt": lambda v: require_text("system_prompt", v),
    # Upstream's gateway peer: who the session talks to, where.
    "session_key": lambda v: _optional_identifier("session_key", v),
    "chat_id": lambda v: _optional_chat_key("chat_id", v),
    "chat_type": lambda v: _optional_identifier("chat_type", v, NAME_LENGTH),
    "thread_id": lambda v: _optional_chat_key("thread_id", v),
    "display_name": lambda v: require_text("display_name", v),
    "origin_json": lambda v: require_text("origin_json", v),
    # Where it runs and for whom.
    "cwd": lambda v: require_text("cwd", v),
    "git_repo_root": lambda v: require_text("git_repo_root", v),
    "git_branch": lambda v: require_text("git_branch", v),
    "profile_name": lambda v: _optional_identifier("profile_name", v),
}


def _optional_identifier(name: str, value: object, max_length: int = ID_LENGTH) -> str | None:
    return None if value is None else require_identifier(name, value, max_length=max_length)


#: The longest chat or thread id (the columns are bounded for MySQL/MariaDB's index).
CHAT_KEY_LENGTH: Final = 128


def _optional_chat_key(name: str, value: object) -> str | None:
    """A platform's chat or thread id: platforms hand out numbers, stored as upstream stores
    them, as text."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return _optional_identifier(name, value, CHAT_KEY_LENGTH)


def require_fields(fields: Mapping[str, object]) -> dict[str, object]:
    """The optional session columns of ``create_session(**fields)``, checked one by one."""
    unknown = sorted(set(fields) - set(_FIELD_CHECKS))
    if unknown:
        raise InvalidInputTypeError(
            f"unknown session field(s) {', '.join(unknown)}; "
            f"create_session accepts {', '.join(_FIELD_CHECKS)}"
        )
    return {name: check(fields[name]) for name, check in _FIELD_CHECKS.items() if name in fields}


def _optional_int(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputTypeError(f"{name} must be an int or None, not {_type_name(value)}")
    return value


def _json_text(name: str, value: object) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputTypeError(f"{name} must be JSON-serialisable: {exc}") from None
    return require_text(name, text) or ""


def _parsed_json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        raise InvalidInputError(
            f"{name} is a str that is not JSON; pass the list/dict itself or its JSON text"
        ) from None


def _tool_calls(value: object) -> tuple[str | None, int]:
    """Upstream's canonical form and count: JSON text is parsed first (text that is not JSON
    holds no tool calls); an empty value (None, ``[]``, ``{}``, ``0``, ``"null"``) is stored as
    NULL and counts none; a list counts its items, any other value one."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None, 0
    if not value:
        return None, 0
    count = len(value) if isinstance(value, list) else 1
    return _json_text("tool_calls", value), count


def _structured(name: str) -> Callable[[object], object]:
    """Reasoning payloads: a str is stored as it is, a list/dict as JSON text, empty as NULL."""

    def check(value: object) -> str | None:
        if not value:
            return None
        return require_text(name, value) if isinstance(value, str) else _json_text(name, value)

    return check


def _display_metadata(value: object) -> str | None:
    if not value:
        return None
    if isinstance(value, str):
        value = _parsed_json("display_metadata", value)
    if not isinstance(value, dict):
        raise InvalidInputTypeError(
            f"display_metadata must be a dict (or its JSON text), not {_type_name(value)}"
        )
    return _json_text("display_metadata", value)


def _flag(name: str) -> Callable[[object], object]:
    def check(value: object) -> int:
        if value is not None and not isinstance(value, int):  # bool is an int
            raise InvalidInputTypeError(f"{name} must be a bool, not {_type_name(value)}")
        return 1 if value else 0

    return check


def _text(name: str) -> Callable[[object], object]:
    return lambda value: require_text(name, value)


def _scrubbed(name: str) -> Callable[[object], object]:
    return lambda value: _scrubbed_text(name, value)


#: Upstream replaces lone surrogates in the content, the tool name, the reasoning text, the
#: API sidecar and the display kind; the other text fields must be valid as given.
_MESSAGE_CHECKS: Final[dict[str, Callable[[object], object]]] = {
    "tool_call_id": _text("tool_call_id"),
    "tool_name": _scrubbed("tool_name"),
    "effect_disposition": _text("effect_disposition"),
    "token_count": lambda v: _optional_int("token_count", v),
    "finish_reason": _text("finish_reason"),
    "reasoning": _scrubbed("reasoning"),
    "reasoning_content": _scrubbed("reasoning_content"),
    "reasoning_details": _structured("reasoning_details"),
    "codex_reasoning_items": _structured("codex_reasoning_items"),
    "codex_message_items": _structured("codex_message_items"),
    "platform_message_id": _text("platform_message_id"),
    "observed": _flag("observed"),
    "_compressed_summary": _flag("_compressed_summary"),
    "api_content": _scrubbed("api_content"),
    "display_kind": _scrubbed("display_kind"),
    "display_metadata": _display_metadata,
}
#: What upstream keeps of a message only on an assistant's row (``append_messages_batch``).
_REASONING: Final = (
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
)
#: Keywords of ``append_message`` besides the message columns.
_MESSAGE_OPTIONS: Final = ("tool_calls", "timestamp")
#: What each message column holds when its field is not given (or None).
_MESSAGE_DEFAULTS: Final = {name: check(None) for name, check in _MESSAGE_CHECKS.items()}


def require_message_fields(
    fields: Mapping[str, object],
) -> tuple[dict[str, object], int, float | None]:
    """Upstream's ``append_message`` keywords, checked and encoded as upstream stores them.

    Returns the value of every message column (None, or 0 for ``observed``, when not given),
    the number of tool calls the session's counter gains, and the explicit timestamp if any.
    """
    unknown = sorted(set(fields) - set(_MESSAGE_CHECKS) - set(_MESSAGE_OPTIONS))
    if unknown:
        accepted = ", ".join([*_MESSAGE_CHECKS, *_MESSAGE_OPTIONS])
        raise InvalidInputTypeError(
            f"unknown message field(s) {', '.join(unknown)}; append_message accepts {accepted}"
        )
    values = dict(_MESSAGE_DEFAULTS)  # the checks run only on the fields given a value
    for name, value in fields.items():
        check = _MESSAGE_CHECKS.get(name)
        if check is not None and value is not None:
            values[name] = check(value)
    values["tool_calls"], tool_calls = _tool_calls(fields.get("tool_calls"))
    timestamp = fields.get("timestamp")
    at = None if timestamp is None else require_seconds("timestamp", timestamp)
    return values, tool_calls, at


@dataclass(frozen=True, slots=True)
class UsageReport:
    """One ``update_token_counts`` call, checked: counters, costs, the billing route."""

    counts: dict[str, int]
    costs: dict[str, Any]
    route: dict[str, str | None]
    absolute: bool

    @property
    def has_usage(self) -> bool:
        """Whether it moves a counter or the estimate (upstream records such a call per
        model)."""
        return any(self.counts.values()) or bool(self.costs["estimated_cost_usd"])

    @property
    def accounted(self) -> bool:
        """Whether it is a billed call at all (a billed cost alone counts)."""
        return self.has_usage or bool(self.costs["actual_cost_usd"])


def _optional_cost(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputTypeError(f"{name} must be a number or None, not {_type_name(value)}")
    if not math.isfinite(value):
        raise InvalidInputError(f"{name} must be finite, not {value!r}")
    return float(value)


def require_usage(
    *,
    counts: Mapping[str, object],
    costs: Mapping[str, object],
    route: Mapping[str, object],
    absolute: object,
) -> UsageReport:
    """Upstream's ``update_token_counts`` arguments: whole counters (a negative delta is a
    correction, as upstream allows), finite costs, text status and route."""
    require_flag("absolute", absolute)
    checked_costs: dict[str, Any] = {
        name: _optional_cost(name, costs[name])
        for name in ("estimated_cost_usd", "actual_cost_usd")
    }
    for name in ("cost_status", "cost_source", "pricing_version"):
        checked_costs[name] = require_text(name, costs[name])
    return UsageReport(
        counts={name: require_int(name, value) for name, value in counts.items()},
        costs=checked_costs,
        route={
            name: None if value is None or value == "" else require_text(name, value)
            for name, value in route.items()
        },
        absolute=bool(absolute),
    )


def require_message(
    message: object,
) -> tuple[object, object, dict[str, object], int, float | None]:
    """One message of ``append_messages_batch``, read as upstream reads a message dict: its
    ``role`` ("unknown" when missing), its ``content``, then :func:`require_message_fields`'
    answer for the keys upstream knows (others, such as a caller's own markers, are ignored).
    The reasoning fields are kept on an assistant's message only, and ``message_id`` stands in
    for a missing ``platform_message_id``."""
    if not isinstance(message, Mapping):
        raise InvalidInputTypeError(
            f"each message must be a dict of upstream's message keys, not {_type_name(message)}"
        )
    role = message.get("role", "unknown")
    known = (*_MESSAGE_CHECKS, *_MESSAGE_OPTIONS)
    fields = {name: message[name] for name in known if name in message}
    if role != "assistant":
        for name in _REASONING:
            fields.pop(name, None)
    if not fields.get("platform_message_id") and message.get("message_id"):
        fields["platform_message_id"] = message["message_id"]
    values, tool_calls, timestamp = require_message_fields(fields)
    return role, message.get("content"), values, tool_calls, timestamp


def require_only_states(value: object) -> frozenset[HandoffState]:
    """The states ``fail_handoff`` may fail from; None means any in-flight state."""
    if value is None:
        return _FAILABLE
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidInputTypeError(
            f"only_states must be a tuple of states such as ('pending',), not {value!r}"
        )
    states = set()
    for item in value:
        if item not in _FAILABLE:
            raise InvalidInputError(
                f"only_states may contain 'pending' and 'running' only, not {item!r}"
            )
        states.add(HandoffState(item))
    if not states:
        raise InvalidInputError("only_states must name at least one state")
    return frozenset(states)


def clean_error(error: object) -> str:
    """``str(error)[:500]``, NUL and unencodable characters replaced so every backend stores it."""
    text = str(error)[:ERROR_LIMIT]
    text = text.replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


def require_state(value: object) -> HandoffState:
    """One of the four handoff states, by name."""
    try:
        return HandoffState(value if isinstance(value, str) else repr(value))
    except ValueError:
        names = ", ".join(state.value for state in HandoffState)
        raise InvalidInputError(
            f"unknown handoff state {value!r}; expected one of {names}"
        ) from None


def require_scope(value: object) -> ReclaimScope:
    """A reclaim scope, by enum member or name ("stale", "expired", "all")."""
    if isinstance(value, ReclaimScope):
        return value
    try:
        return ReclaimScope(value)
    except ValueError:
        names = ", ".join(scope.value for scope in ReclaimScope)
        raise InvalidInputError(
            f"unknown reclaim scope {value!r}; expected one of {names}"
        ) from None
