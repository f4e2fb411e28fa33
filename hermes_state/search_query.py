"""What a message search query says, read once for every backend: the FTS5 expression it
becomes, its terms, whether it holds CJK text and which route serves it.

A query is what a person types. It may hold any character; none of them may turn into a
syntax error on any backend (upstream's rule: such a search silently found nothing). The
FTS5 expression keeps what FTS5 offers on purpose (``"phrases"``, ``AND``/``OR``/``NOT``
between terms, a ``prefix*``) and makes the rest literal: a term that holds punctuation
(``chat-send``, ``src/main.py``, ``user@example.com``, ``61.2%``) is quoted whole, so FTS5's
tokenizer splits it inside the phrase like the indexed text; characters that are only FTS5
syntax (``+ { } ( ) : ^`` and an unpaired ``"``) become spaces; a term of punctuation alone
is dropped. The servers read the same expression through :func:`query_terms`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_QUERY_CHARS",
    "OPERATORS",
    "Term",
    "contains_cjk",
    "count_cjk",
    "operand_tokens",
    "query_terms",
    "quote_tokens",
    "sanitize_fts5_query",
    "trigram_route",
    "trigram_tokens",
]

#: A query is cut to this many characters before anything else reads it (upstream's cap).
MAX_QUERY_CHARS: Final = 2_048

#: FTS5's boolean operators (upper case only, as FTS5 reads them).
OPERATORS: Final = frozenset({"AND", "OR", "NOT"})

#: The code point ranges upstream counts as CJK: unified ideographs, extensions A and B,
#: CJK symbols, hiragana, katakana, hangul syllables.
_CJK_RANGES: Final = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x3000, 0x303F),
    (0x3040, 0x309F),
    (0x30A0, 0x30FF),
    (0xAC00, 0xD7AF),
)

_PHRASE: Final = re.compile(r'"[^"]*"')
_SYNTAX_ONLY: Final = re.compile(r'[+{}():^"\x01-\x08\x0b\x0c\x0e-\x1f]')
_RUN: Final = re.compile(r"\S+")
_WORD_CHAR: Final = re.compile(r"\w")
_BARE_WORD: Final = re.compile(r"\w+")
_HELD: Final = re.compile(r"\x00(\d+)\x00")
_TRAILING_OPERATOR: Final = re.compile(r"\s+(?:AND|OR|NOT)\s*$")


def _is_cjk(char: str) -> bool:
    point = ord(char)
    return any(low <= point <= high for low, high in _CJK_RANGES)


def contains_cjk(text: str) -> bool:
    """Whether ``text`` holds a CJK character."""
    return any(_is_cjk(char) for char in text)


def count_cjk(text: str) -> int:
    """How many CJK characters ``text`` holds."""
    return sum(1 for char in text if _is_cjk(char))


def _operand(run: str) -> str:
    """One whitespace-free run as an FTS5 operand: a bare word, a quoted whole, or ''."""
    prefix = run.endswith("*")
    core = run.strip("*")
    if not core or not _WORD_CHAR.search(core):
        return ""  # punctuation alone: an empty phrase would be a syntax error
    if core in OPERATORS or not _BARE_WORD.fullmatch(core):
        core = '"' + core.replace('"', '""') + '"'
    return core + ("*" if prefix else "")


def sanitize_fts5_query(query: str) -> str:
    """``query`` as an FTS5 MATCH expression that always parses (see the module docstring);
    '' when nothing searchable is left."""
    held: list[str] = []

    def hold(match: re.Match[str]) -> str:
        phrase = match.group(0)
        if not _WORD_CHAR.search(phrase):
            return " "
        held.append(phrase.replace("\x00", " "))
        return f" \x00{len(held) - 1}\x00 "

    text = str(query)[:MAX_QUERY_CHARS].replace("\x00", " ")
    text = _SYNTAX_ONLY.sub(" ", _PHRASE.sub(hold, text))
    # An operator stands only between two operands: one at the start or after another
    # operator is dropped here, one at the end below.
    after_operand = False

    def operand_or_operator(match: re.Match[str]) -> str:
        nonlocal after_operand
        run = match.group(0)
        if _HELD.fullmatch(run):
            after_operand = True
            return run
        if run in OPERATORS:
            keep = after_operand
            after_operand = False
            return run if keep else ""
        operand = _operand(run)
        after_operand = after_operand or bool(operand)
        return operand

    text = _RUN.sub(operand_or_operator, text).strip()
    while (ending := _TRAILING_OPERATOR.search(text)) is not None:
        text = text[: ending.start()].rstrip()
    if text in OPERATORS:
        text = ""
    return _HELD.sub(lambda match: held[int(match.group(1))], text).strip()


def operand_tokens(expression: str) -> list[str]:
    """The whitespace-separated tokens of ``expression`` but its operators."""
    return [token for token in expression.split() if token.upper() not in OPERATORS]


def quote_tokens(expression: str) -> str:
    """Every operand token quoted (FTS5's special characters made literal), the operators
    kept: the trigram index's MATCH expression."""
    return " ".join(
        token if token.upper() in OPERATORS else '"' + token.replace('"', '""') + '"'
        for token in expression.split()
    )


def trigram_route(expression: str) -> bool:
    """Whether a CJK query can be served by the trigram index: at least 3 CJK characters,
    and every operand holding CJK holds 3 or more (trigrams of fewer do not exist, and one
    such token empties the whole implicit AND)."""
    raw = expression.strip('"').strip()
    if count_cjk(raw) < 3:
        return False
    return all(count_cjk(token) >= 3 for token in operand_tokens(raw) if contains_cjk(token))


def trigram_tokens(expression: str) -> bool:
    """Whether every operand is 3 characters or more (the Latin retry on the trigram index)."""
    tokens = operand_tokens(expression.strip('"').strip())
    return bool(tokens) and all(len(token) >= 3 for token in tokens)


@dataclass(frozen=True, slots=True)
class Term:
    """One term of a query: its text (no quotes, no ``*``), whether ``NOT`` negates it, whether
    it was a quoted phrase, whether it ends in ``*``."""

    text: str
    negated: bool = False
    phrase: bool = False
    prefix: bool = False


_TERM: Final = re.compile(r'"[^"]*"\*?|\S+')


def query_terms(expression: str) -> list[list[Term]]:
    """A sanitized expression as OR-groups of ANDed terms (FTS5's precedence for the subset
    the sanitizer leaves: ``a b OR c`` is ``(a AND b) OR c``); ``NOT`` negates the term after
    it. A group of negated terms alone is dropped (it would match almost everything)."""
    groups: list[list[Term]] = [[]]
    negate = False
    for token in _TERM.findall(expression):
        if token == "OR":
            if groups[-1]:
                groups.append([])
            negate = False
            continue
        if token in ("AND", "NEAR"):
            continue
        if token == "NOT":
            negate = True
            continue
        prefix = token.endswith("*")
        phrase = token.startswith('"')
        text = token.rstrip("*").strip('"').replace('""', '"').strip()
        if text:
            groups[-1].append(Term(text, negate, phrase, prefix))
        negate = False
    return [group for group in groups if any(not term.negated for term in group)]
