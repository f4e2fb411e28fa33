"""The portable type mapping: the kind of each column and its type on any target."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import BigInteger, Double, Integer, LargeBinary, String, Text
from sqlalchemy.dialects.mysql import LONGBLOB, LONGTEXT
from sqlalchemy.engine import Dialect
from sqlalchemy.types import NullType, TypeEngine

from ..models import ID_LENGTH

_MYSQL: Final = ("mysql", "mariadb")


#: SQLite affinity -> the kind of value a column holds on every backend.
_KIND_OF_AFFINITY: Final = {
    "INTEGER": "integer",
    "TEXT": "text",
    "BLOB": "blob",
    "REAL": "real",
    "NUMERIC": "real",
}


def _kind_of_type(type_: TypeEngine[Any]) -> str:
    """The kind of a column reflected from a server (or from a target), by its Python values."""
    if isinstance(type_, NullType):
        return "any"
    try:
        python = type_.python_type
    except NotImplementedError:
        return "text"
    if issubclass(python, int):  # bool too
        return "integer"
    if issubclass(python, float | Decimal):
        return "real"
    if issubclass(python, bytes):
        return "blob"
    return "text"


def portable_type(kind: str, *, length: int | None = None, key: bool = False) -> TypeEngine[Any]:
    """The SQLAlchemy type a carried column gets on a target that lacks it.

    ``kind`` is ``integer``, ``real``, ``text`` or ``blob`` (SQLite's affinities, NUMERIC read as
    real). Each type round-trips its values on SQLite, PostgreSQL and MySQL/MariaDB: integers as
    64-bit, reals as doubles, text unbounded (LONGTEXT on MySQL, whose TEXT stops at 64 KiB)
    unless the source declared a length, text keys as VARCHAR(255) on MySQL (which cannot index
    an unbounded column), binary data as BLOB/BYTEA/LONGBLOB.
    """
    if kind == "integer":
        # INTEGER on SQLite: a single integer key stays the rowid alias.
        return BigInteger().with_variant(Integer(), "sqlite")
    if kind == "real":
        return Double()
    if kind == "blob":
        return LargeBinary().with_variant(LONGBLOB(), *_MYSQL)
    if length is not None:
        return String(length)
    if key:
        return Text().with_variant(String(ID_LENGTH), *_MYSQL)
    return Text().with_variant(LONGTEXT(), *_MYSQL)


_PORTABLE_DEFAULT: Final = re.compile(r"-?\d+(\.\d+)?|'[^']*'")


def _portable_default(default: str | None, kind: str, target: Dialect) -> str | None:
    """A literal default (number or plain string) survives; expressions are left behind."""
    if default is None:
        return None
    literal = re.sub(r"::[\w ]+$", "", default.strip())  # PostgreSQL's "'auto'::text"
    if literal.startswith("(") and literal.endswith(")"):
        literal = literal[1:-1].strip()
    if not _PORTABLE_DEFAULT.fullmatch(literal):
        return None
    if kind in ("text", "blob") and target.name in _MYSQL:
        return None  # MySQL refuses defaults on TEXT and BLOB columns
    return literal
