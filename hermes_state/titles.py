"""Session titles as upstream keeps them: cleaning a title, who set it (provenance and its
ranks), Bot Mode's canonical "Bot Chat", and the " #N" lineage numbering."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from .errors import InvalidInputError
from .statements.titles import LIKE_ESCAPE
from .validation import require_str

__all__ = [
    "AUTO_TITLE_SOURCES",
    "CANONICAL_BOT_CHAT_TITLE",
    "MAX_TITLE_LENGTH",
    "TITLE_SOURCE_BRANCH",
    "TITLE_SOURCE_BRANCH_FALLBACK",
    "TITLE_SOURCE_DERIVED",
    "TITLE_SOURCE_LLM",
    "TITLE_SOURCE_RANK",
    "TITLE_SOURCE_USER",
    "lineage_base",
    "lineage_pattern",
    "next_in_lineage",
    "require_auto_title_source",
    "require_title_source",
    "sanitize_title",
    "title_rank",
]

#: Upstream's limit on a cleaned title, in characters.
MAX_TITLE_LENGTH: Final = 100

#: Provenance (``title_source``) of a title made up from the session's own text.
TITLE_SOURCE_DERIVED: Final = "derived"
#: Provenance of a title a language model wrote.
TITLE_SOURCE_LLM: Final = "llm"
#: Provenance of a title the user chose (what ``set_session_title`` records).
TITLE_SOURCE_USER: Final = "user"
#: Provenance of the title a branch gets when it is made, and of the one it gets when that
#: first choice is not available. Both rank as low as ``derived``.
TITLE_SOURCE_BRANCH: Final = "branch"
TITLE_SOURCE_BRANCH_FALLBACK: Final = "branch_fallback"

#: The authority of each provenance ``set_session_title_source`` accepts: an automatic title
#: replaces only a title of strictly lower rank. Any other stored value ranks 0.
TITLE_SOURCE_RANK: Final[Mapping[str, int]] = MappingProxyType(
    {TITLE_SOURCE_DERIVED: 0, TITLE_SOURCE_LLM: 1, TITLE_SOURCE_USER: 2}
)
#: The provenances ``set_auto_title`` writes.
AUTO_TITLE_SOURCES: Final = (
    TITLE_SOURCE_BRANCH,
    TITLE_SOURCE_BRANCH_FALLBACK,
    TITLE_SOURCE_DERIVED,
    TITLE_SOURCE_LLM,
)

#: The title of Bot Mode's canonical chat. A hidden session so titled is a bot's one chat,
#: found by this exact title (there is no other pointer to it), so it keeps the title.
CANONICAL_BOT_CHAT_TITLE: Final = "Bot Chat"

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


def title_rank(source: str | None) -> int:
    """The authority of a stored ``title_source``. NULL is a title from before provenance was
    recorded, which only the user could have set then: it ranks as the user's."""
    if source is None:
        return TITLE_SOURCE_RANK[TITLE_SOURCE_USER]
    return TITLE_SOURCE_RANK.get(source, 0)


def require_auto_title_source(source: object) -> str:
    """``source`` when ``set_auto_title`` may write it (:data:`AUTO_TITLE_SOURCES`); anything
    else is ``InvalidInputError`` (a ``ValueError``), as upstream refuses it."""
    if isinstance(source, str) and source in AUTO_TITLE_SOURCES:
        return source
    names = ", ".join(AUTO_TITLE_SOURCES)
    raise InvalidInputError(f"invalid automatic title source: {source!r}; expected one of {names}")


def require_title_source(source: object) -> str:
    """``source`` when it is a ranked provenance (:data:`TITLE_SOURCE_RANK`); anything else is
    ``InvalidInputError`` (a ``ValueError``), as upstream refuses it."""
    if isinstance(source, str) and source in TITLE_SOURCE_RANK:
        return source
    names = ", ".join(TITLE_SOURCE_RANK)
    raise InvalidInputError(f"invalid title source: {source!r}; expected one of {names}")
