"""Stored messages as upstream replays them to a model: the OpenAI-style conversation form."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from .core import Row

#: A recalled-memory block upstream's agent fences into a turn; it must never be replayed as
#: what the user or the assistant said.
_MEMORY_BLOCK: Final = re.compile(r"<\s*memory-context\s*>.*?</\s*memory-context\s*>", re.I | re.S)
#: The note upstream puts at the top of such a block, in case it was left without its fence.
_MEMORY_NOTE: Final = re.compile(
    r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\.\s*"
    r"Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*",
    re.I,
)
#: A fence tag left alone.
_MEMORY_FENCE: Final = re.compile(r"</?\s*memory-context\s*>", re.I)

#: Stored JSON text decoded for the model, on an assistant's turn only.
_STRUCTURED_REASONING: Final = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


def without_memory_context(text: str) -> str:
    """``text`` without recalled-memory blocks, their notes and stray fence tags, trimmed."""
    if "memory-context" not in text.lower() and "[system note:" not in text.lower():
        return text.strip()
    for pattern in (_MEMORY_BLOCK, _MEMORY_NOTE, _MEMORY_FENCE):
        text = pattern.sub("", text)
    return text.strip()


@dataclass(frozen=True, slots=True)
class Replay:
    """What ``get_messages_as_conversation`` was asked for, beyond the rows."""

    row_ids: bool = False
    summary_markers: bool = False
    lineage: bool = False


def _decoded_or_none(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def as_message(entry: Row, replay: Replay) -> Row:
    """One transcript entry (as ``get_messages`` decodes it) in the conversation form: role
    and content, then only the fields that say something."""
    role, content = entry["role"], entry["content"]
    if role in ("user", "assistant") and isinstance(content, str):
        content = without_memory_context(content)
    message: Row = {"role": role, "content": content}
    if replay.row_ids:
        message["_row_id"] = entry["id"]
    for name in ("api_content", "display_kind"):
        if entry.get(name):
            message[name] = entry[name]
    if entry.get("display_metadata") is not None:
        message["display_metadata"] = entry["display_metadata"]
    if replay.summary_markers and entry.get("_compressed_summary"):
        message["_compressed_summary"] = True
    for name in ("tool_call_id", "tool_name", "effect_disposition"):
        if entry.get(name):
            message[name] = entry[name]
    if entry.get("tool_calls"):
        message["tool_calls"] = entry["tool_calls"]
    if entry.get("platform_message_id"):  # the platform's own id, under the transcript's name
        message["message_id"] = entry["platform_message_id"]
    if entry.get("observed"):
        message["observed"] = True
    if entry.get("finish_reason"):  # on every role: a tool's output can be cut short too
        message["finish_reason"] = entry["finish_reason"]
    if role == "assistant":
        if entry.get("reasoning"):
            message["reasoning"] = entry["reasoning"]
        if entry.get("reasoning_content") is not None:  # "" too: strict replays need it
            message["reasoning_content"] = entry["reasoning_content"]
        for name in _STRUCTURED_REASONING:
            if entry.get(name):
                message[name] = _decoded_or_none(entry[name])
    return message


def _clone_key(timestamp: Any, content: Any) -> tuple[Any, str] | None:
    """Two user turns with one timestamp and one content are one turn copied whole (a
    compression rotation copies the turns in flight into the next segment)."""
    if timestamp is None or content in (None, "", []):
        return None
    try:
        return timestamp, json.dumps(content, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _repeats_a_user_turn(messages: list[Row], message: Row) -> bool:
    """A user turn replayed as it was, with no answer in between: text equal to an earlier
    user turn's, found before an assistant turn that said or called something."""
    content = message["content"]
    if not isinstance(content, str) or not content:
        return False
    for earlier in reversed(messages):
        if earlier["role"] == "user" and earlier["content"] == content:
            return True
        if earlier["role"] == "assistant" and (earlier["content"] or earlier.get("tool_calls")):
            return False
    return False


def as_conversation(entries: list[Row], replay: Replay) -> list[Row]:
    """Entries in id order as the conversation a model is replayed. Across a lineage
    (``replay.lineage``) a user turn that a later segment repeats is kept once: a copy of the
    same turn (same timestamp and content) replaces the earlier one; a plain repetition with
    no answer in between is dropped."""
    messages: list[Row] = []
    clones: dict[tuple[Any, str], Row] = {}
    for entry in entries:
        message = as_message(entry, replay)
        if replay.lineage and message["role"] == "user":
            key = _clone_key(entry.get("timestamp"), message["content"])
            copied = clones.get(key) if key is not None else None
            position = next((i for i, m in enumerate(messages) if m is copied), None)
            if position is not None:
                del messages[position]
            elif _repeats_a_user_turn(messages, message):
                continue
            if key is not None:
                clones[key] = message
        messages.append(message)
    return messages
