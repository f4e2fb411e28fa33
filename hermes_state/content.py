"""Message content as a server stores it: upstream's NUL-prefixed multimodal content, escaped.

Upstream hermes-agent stores multimodal message content as text that starts with a NUL byte,
``"\\x00json:"`` followed by JSON. SQLite keeps that as it is; PostgreSQL text cannot hold NUL
at all ("PostgreSQL text fields cannot contain NUL"), and MySQL/MariaDB are given the same
form so that every server holds one encoding. On a server the leading NUL is therefore
written as U+FFFF, and a value that itself starts with U+FFFF or U+FFFE is escaped by one
more leading U+FFFE:

========================  ============================
SQLite (upstream)         server
========================  ============================
``"\\x00" + rest``          ``"\\uffff" + rest``
``"\\uffff..."``            ``"\\ufffe\\uffff..."``
``"\\ufffe..."``            ``"\\ufffe\\ufffe..."``
anything else             unchanged
========================  ============================

Why U+FFFF and U+FFFE: both are Unicode noncharacters, never assigned to a character and
reserved for exactly this kind of internal use; they are valid UTF-8 (PostgreSQL and MySQL's
utf8mb4 store them), upstream's own prefix never produces them, and text from users and models
practically never starts with them. Where one does, the U+FFFE escape keeps the mapping
injective, so :func:`from_server` always gives back exactly what :func:`to_server` was given.
Only the first character is ever touched: the encoding is O(1) and keeps lengths (but for the
escape's one character).
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = [
    "ESCAPE",
    "MULTIMODAL_PREFIX",
    "NUL_MARKER",
    "decoded_content",
    "encoded_content",
    "from_server",
    "to_server",
]

#: What upstream's leading NUL becomes on a server.
NUL_MARKER: Final = "\uffff"
#: Put before a value that starts with a marker of its own, so decoding is unambiguous.
ESCAPE: Final = "\ufffe"


def to_server(value: str | None) -> str | None:
    """Content as upstream (and SQLite) holds it -> content as a server holds it."""
    if not value:
        return value
    first = value[0]
    if first == "\x00":
        return NUL_MARKER + value[1:]
    if first in (NUL_MARKER, ESCAPE):
        return ESCAPE + value
    return value


def from_server(value: str | None) -> str | None:
    """The inverse of :func:`to_server`: content read from a server -> upstream's form.

    A value without a marker (such as one a server got before the encoding existed, or raw
    NUL content on MySQL) is returned unchanged."""
    if not value:
        return value
    first = value[0]
    if first == NUL_MARKER:
        return "\x00" + value[1:]
    if first == ESCAPE:
        return value[1:]
    return value


#: Upstream's mark for multimodal content (a list of parts, or a dict) stored as text:
#: ``"\x00json:" + json.dumps(value)``.
MULTIMODAL_PREFIX: Final = "\x00json:"
#: The same mark as a server holds it (the NUL is U+FFFF there).
_SERVER_MULTIMODAL_PREFIX: Final = NUL_MARKER + MULTIMODAL_PREFIX[1:]


def decoded_content(value: Any, *, server: bool = False) -> Any:
    """Message content as upstream's ``get_messages`` returns it: multimodal content stored
    with upstream's prefix becomes the list (or dict) it encodes; anything else, and a prefix
    followed by invalid JSON, is returned as stored. ``server``: read from PostgreSQL or
    MySQL/MariaDB, which may hold the prefix in its server form (or, on MySQL, as it is)."""
    if not isinstance(value, str):
        return value
    if value.startswith(MULTIMODAL_PREFIX):
        encoded = value[len(MULTIMODAL_PREFIX) :]
    elif server and value.startswith(_SERVER_MULTIMODAL_PREFIX):
        encoded = value[len(_SERVER_MULTIMODAL_PREFIX) :]
    else:
        return value
    try:
        return json.loads(encoded)
    except ValueError:
        return value


def encoded_content(value: Any) -> str | None:
    """The inverse of :func:`decoded_content` on SQLite: a list or dict as upstream stores
    multimodal content, text (or None) as it is."""
    if value is None or isinstance(value, str):
        return value
    return MULTIMODAL_PREFIX + json.dumps(value)
