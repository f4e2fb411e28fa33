"""Session titles as upstream keeps them: cleaning a title, and the " #N" lineage numbering."""

from __future__ import annotations

import re
from typing import Final

from .errors import InvalidInputError
from .statements.titles import LIKE_ESCAPE
from .validation import require_str

__all__ = [
    "MAX_TITLE_LENGTH",
    "lineage_base",
    "lineage_pattern",
    "next_in_lineage",
    "sanitize_title",
]

#: Upstream's limit on a cleaned title, in characters.
MAX_TITLE_LENGTH: Final = 100

# C0 controls and DEL, but tab, newline and carriage return: those become spaces below.
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Characters that draw nothing or reorder the line: zero-width marks, line and paragraph
# separators, bidirectional embeddings, overrides and isolates, word joiners, the BOM, and the
# interlinear annotation and object replacement characters.
_INVISIBLE = re.compile(r"[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]")
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
_NUMBERED = re.compile(r"^(.*?) #(\d+)$", re.S)


def sanitize_title(title: object) -> str | None:
    """``title`` as it is stored: lone surrogates as U+FFFD, control and invisible characters
    dropped, runs of whitespace as one space, trimmed; None when nothing is left. A title
    longer than :data:`MAX_TITLE_LENGTH` afterwards is refused (``InvalidInputError``, a
    ``ValueError``); what is not a ``str`` is ``InvalidInputTypeError`` (a ``TypeError``)."""
    if title is None:
        return None
    cleaned = _LONE_SURROGATE.sub("\ufffd", require_str("title", title))
    cleaned = _INVISIBLE.sub("", _CONTROLS.sub("", cleaned))
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        return None
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise InvalidInputError(
            f"title too long ({len(cleaned)} characters, at most {MAX_TITLE_LENGTH}); shorten it"
        )
    return cleaned


def lineage_base(title: str) -> str:
    """The title a numbered continuation belongs to: ``"report #3"`` -> ``"report"``."""
    numbered = _NUMBERED.match(title)
    return numbered.group(1) if numbered else title


def lineage_pattern(base: str) -> str:
    """A LIKE pattern (escaped with :data:`LIKE_ESCAPE`) for ``"BASE #<anything>"``, with the
    wildcards a title may hold matched literally."""
    escaped = (
        base.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2)
        .replace("%", f"{LIKE_ESCAPE}%")
        .replace("_", f"{LIKE_ESCAPE}_")
    )
    return f"{escaped} #%"


def next_in_lineage(base: str, titles: list[str]) -> str:
    """The next title of ``base``'s lineage, given the titles in it: ``base`` itself when the
    lineage is empty, else one above the highest number (the unnumbered original counts as
    #1)."""
    if not titles:
        return base
    numbers = [1]
    for title in titles:
        numbered = _NUMBERED.match(title)
        if numbered and numbered.group(1) == base:
            numbers.append(int(numbered.group(2)))
    return f"{base} #{max(numbers) + 1}"
