"""Statements compiled as the stores compile them, and their SQL laid out for reading."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from .flavours import Flavour

#: Lines are wrapped at this width where a clause allows.
WIDTH: Final = 100
_INDENT: Final = "  "


_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement as compiled for a flavour: its SQL (laid out), the parameters whose value
    the statement itself carries (name, value), and the expanding ones."""

    sql: str
    fixed: tuple[tuple[str, object], ...]
    expanding: tuple[str, ...]


#: What :func:`compiled` made, by statement (its id, the statement kept alive beside it: a
#: ClauseElement's ``==`` builds SQL, so it cannot be a key) and flavour.
_COMPILED: dict[tuple[int, str], tuple[ClauseElement, Compiled]] = {}


def compiled(statement: ClauseElement, flavour: Flavour) -> Compiled:
    """``statement`` compiled as a store compiles it, laid out for reading."""
    key = (id(statement), flavour.key)
    known = _COMPILED.get(key)
    if known is None or known[0] is not statement:
        known = _COMPILED[key] = (statement, _compile(statement, flavour))
    return known[1]


def _compile(statement: ClauseElement, flavour: Flavour) -> Compiled:
    result = statement.compile(dialect=flavour.dialect)
    assert isinstance(result, SQLCompiler)
    text = result.string
    # An expanding list (MySQL's IN lists) is rendered per call; shown here by its name.
    expanding = tuple(dict.fromkeys(_POSTCOMPILE.findall(text)))
    text = _POSTCOMPILE.sub(r":\1", text)
    fixed = []
    for name, bind in result.binds.items():
        found = re.search(rf":{re.escape(name)}\b", text)
        if found and not bind.required and not bind.expanding:
            fixed.append((found.start(), name, bind.value))
    shown = tuple((name, value) for _at, name, value in sorted(fixed, key=lambda item: item[:2]))
    return Compiled(layout(text), shown, expanding)


def sql_text(statement: ClauseElement, flavour: Flavour) -> str:
    """The laid-out SQL of ``statement`` for ``flavour`` (what a file shows below its header)."""
    return compiled(statement, flavour).sql


_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<text>'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`)"""
    r"""|(?P<open>\()|(?P<close>\))|(?P<comma>,)|(?P<word>[^\s'"`(),]+)"""
)


@dataclass(slots=True)
class _Token:
    text: str
    space: bool  # whitespace before it in the compiled SQL


@dataclass(slots=True)
class _Group:
    """A parenthesised part (the top level has no parentheses)."""

    items: list[_Token | _Group]
    space: bool
    parens: bool = True

    def starts(self, *words: str) -> bool:
        first = self.items[0] if self.items else None
        return isinstance(first, _Token) and first.text in words


def _parse(sql: str) -> _Group:
    top = _Group([], False, parens=False)
    stack = [top]
    space = False
    for match in _TOKEN.finditer(sql):
        kind, value = match.lastgroup, match.group()
        if kind == "space":
            space = True
            continue
        if kind == "open":
            group = _Group([], space)
            stack[-1].items.append(group)
            stack.append(group)
        elif kind == "close" and len(stack) > 1:
            stack.pop()
        else:
            stack[-1].items.append(_Token(value, space))
        space = False
    return top


#: Where a clause starts, longest first; ``UPDATE`` only opens a statement.
_CLAUSES: Final = sorted(
    (
        tuple(words.split())
        for words in (
            "WITH",
            "SELECT",
            "FROM",
            "WHERE",
            "GROUP BY",
            "HAVING",
            "ORDER BY",
            "LIMIT",
            "OFFSET",
            "FOR UPDATE",
            "UNION ALL",
            "UNION",
            "RETURNING",
            "SET",
            "VALUES",
            "ON CONFLICT",
            "ON DUPLICATE KEY UPDATE",
            "INSERT INTO",
            "DELETE FROM",
            "LEFT OUTER JOIN",
            "JOIN",
        )
    ),
    key=len,
    reverse=True,
)
_STATEMENTS: Final = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


def _clause_at(items: list[_Token | _Group], at: int) -> int:
    """How many items starting at ``at`` open a clause (0: none)."""
    if at == 0 and items and isinstance(items[0], _Token) and items[0].text == "UPDATE":
        return 1
    for words in _CLAUSES:
        found = items[at : at + len(words)]
        if len(found) == len(words) and all(
            isinstance(item, _Token) and item.text == word
            for item, word in zip(found, words, strict=True)
        ):
            after = items[at + len(words)] if at + len(words) < len(items) else None
            if words == ("VALUES",) and isinstance(after, _Group) and not after.space:
                return 0  # MySQL's VALUES(column), a function
            return len(words)
    return 0


def _clauses(group: _Group) -> Iterator[list[_Token | _Group]]:
    current: list[_Token | _Group] = []
    at = 0
    while at < len(group.items):
        opening = _clause_at(group.items, at)
        if opening and current:
            yield current
            current = []
        step = max(opening, 1)
        current.extend(group.items[at : at + step])
        at += step
    if current:
        yield current


def _inline(items: Sequence[_Token | _Group]) -> str:
    out = []
    for n, item in enumerate(items):
        gap = " " if n and item.space else ""
        body = item.text if isinstance(item, _Token) else f"({_inline(item.items)})"
        out.append(gap + body)
    return "".join(out)


def _block(group: _Group, column: int) -> str:
    """A statement (or subquery) laid out, a line per clause. Lines after the first are
    indented relative to it; it starts at ``column`` (what the widths count from)."""
    return "\n".join(_clause(items, column, column) for items in _clauses(group))


def _piece(item: _Token | _Group, at: int, pad: int) -> str:
    """A token, or a parenthesised part starting at column ``at`` of a line indented by
    ``pad``: a subquery as a block indented one step from the line, anything else on one
    line where it fits, else filled like a clause."""
    if isinstance(item, _Token):
        return item.text
    if item.starts(*_STATEMENTS):
        inner = _block(item, pad + len(_INDENT))
        return "(\n" + "\n".join(_INDENT + line for line in inner.split("\n")) + "\n)"
    flat = f"({_inline(item.items)})"
    if at + len(flat) <= WIDTH or not item.items:
        return flat
    return f"({_clause(item.items, at + 1, pad)})"


def _segment(items: Sequence[_Token | _Group], at: int, pad: int) -> str:
    """Pieces that stay together on a line (between two places a clause may break)."""
    out = ""
    for n, item in enumerate(items):
        gap = " " if n and item.space else ""
        last = out.rsplit("\n", 1)
        column = (at if len(last) == 1 else pad) + len(last[-1]) + len(gap)
        out += gap + _piece(item, column, pad)
    return out


#: Where a clause too long for one line may break: after a comma, or before these.
_BREAK_BEFORE: Final = frozenset({"AND", "OR", "||"})
#: How much further a clause's wrapped lines are indented.
_CONTINUED: Final = _INDENT * 2


def _clause(items: list[_Token | _Group], first: int, pad: int) -> str:
    """One clause, its first line starting at column ``first`` of a line indented by
    ``pad``: its pieces filled into lines of :data:`WIDTH`, with a new line after each CTE of
    a WITH and, where a line would be too long, after a comma or before AND, OR or ``||``.
    Lines after the first are indented relative to the line the clause starts on; a piece of
    several lines (a subquery) is indented as the line it starts on."""
    segments: list[tuple[bool, list[_Token | _Group]]] = []  # (space before it, pieces)
    current: list[_Token | _Group] = []
    space = False
    for n, item in enumerate(items):
        if isinstance(item, _Token) and item.text in _BREAK_BEFORE and current:
            segments.append((space, current))
            current = []
        if not current:
            space = bool(n) and item.space
        current.append(item)
        if isinstance(item, _Token) and item.text == ",":
            segments.append((space, current))
            current = []
    if current:
        segments.append((space, current))
    cte_list = isinstance(items[0], _Token) and items[0].text == "WITH"
    lines = [""]

    def column() -> int:
        return (first if len(lines) == 1 else pad) + len(lines[-1])

    for n, (spaced, pieces) in enumerate(segments):
        fresh = not lines[-1].strip()
        if cte_list and n:
            lines.append("")
            fresh = True
        gap = " " if spaced and not fresh else ""
        text = _segment(pieces, column() + len(gap), pad)
        if not fresh and column() + len(gap) + len(text.split("\n", 1)[0]) > WIDTH:
            lines.append(_CONTINUED)
            gap = ""
            text = _segment(pieces, column(), pad + len(_CONTINUED))
        line = lines[-1]
        indent = line[: len(line) - len(line.lstrip())]
        more = text.split("\n")
        lines[-1] = line + gap + more[0]
        lines += [indent + rest for rest in more[1:]]
    return "\n".join(line.rstrip() for line in lines)


def layout(sql: str) -> str:
    """``sql`` laid out for reading: only whitespace changes (a line per clause, subqueries
    and CTEs indented, long clauses wrapped); every other character stays as compiled."""
    return _block(_parse(sql), 0)
