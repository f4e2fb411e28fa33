"""How a transcript message's tool activity reads for people: the name and arguments of each
call an assistant turn made, and the tool a result came from (the CLI and the dashboard)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ToolCall", "result_tool", "tool_calls_of"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of an assistant turn: the tool's name, its arguments as one line of JSON
    (or as stored, when they are not JSON), and the call's id when it has one."""

    name: str
    arguments: str
    call_id: str | None

    def __str__(self) -> str:
        return f"{self.name}({self.arguments})"


def _arguments(raw: object) -> str:
    """Arguments as readable JSON: decoded once if stored as JSON text, non-ASCII kept."""
    value: object = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _one_call(item: object) -> ToolCall:
    if not isinstance(item, Mapping):
        return ToolCall("?", _arguments(item), None)
    # OpenAI's shape nests name and arguments under "function"; Anthropic's and flattened
    # ones carry them at the top, the arguments as "input" or "arguments".
    function = item.get("function")
    source = function if isinstance(function, Mapping) else item
    arguments = source.get("arguments", source.get("input"))
    call_id = item.get("id") or item.get("call_id")
    return ToolCall(str(source.get("name") or "?"), _arguments(arguments), call_id and str(call_id))


def tool_calls_of(message: Mapping[str, Any]) -> list[ToolCall]:
    """The calls ``message`` made (none for a message without ``tool_calls``)."""
    calls = message.get("tool_calls")
    if isinstance(calls, str):
        try:
            calls = json.loads(calls)
        except ValueError:
            return [ToolCall("?", calls, None)]
    if isinstance(calls, Mapping):
        calls = [calls]
    if not isinstance(calls, list):
        return []
    return [_one_call(item) for item in calls]


def result_tool(message: Mapping[str, Any]) -> str | None:
    """For a tool's result, the tool's name (and the id of the call it answers)."""
    if message.get("role") != "tool" and not message.get("tool_call_id"):
        return None
    name = message.get("tool_name") or "?"
    call_id = message.get("tool_call_id")
    return f"{name} ({call_id})" if call_id else str(name)
