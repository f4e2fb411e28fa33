"""The Python values the ORM loads stored ones as: JSON text as lists and dicts, multimodal
content as its parts, epoch seconds as aware UTC datetimes; what is stored stays as it is."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Dialect, Double, Text
from sqlalchemy.dialects.mysql import LONGTEXT
from sqlalchemy.types import TypeDecorator, TypeEngine

from ..content import decoded_content, encoded_content, from_server, to_server
from ..errors import InvalidInputError

__all__ = ["EpochTime", "JSONText", "MessageContent"]


class _LongText(TypeDecorator[Any]):
    """A Python type over long text: TEXT, LONGTEXT on MySQL/MariaDB (the tables' own DDL)."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return LONGTEXT() if dialect.name in ("mysql", "mariadb") else Text()


class JSONText(_LongText):
    """JSON kept as text (as upstream writes it): loaded decoded; a value that is not JSON is
    loaded as the text it is, and text assigned is stored as it is."""

    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError:
            return value


class MessageContent(_LongText):
    """A message's content: text as it is; multimodal content (upstream's ``\\x00json:``
    prefix) as the list or dict it encodes, and such a value assigned stored that way."""

    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        stored = encoded_content(value)
        return stored if dialect.name == "sqlite" else to_server(stored)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return decoded_content(value)
        return decoded_content(from_server(value), server=True)


class EpochTime(TypeDecorator[datetime]):
    """A time stored as epoch seconds (a float, as ``state.db`` files hold it), loaded as an
    aware datetime in UTC. An aware datetime, or epoch seconds, can be assigned; a naive
    datetime is refused, since which zone it means is unknown."""

    impl = Double
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> float | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise InvalidInputError(
                    f"{value!r} has no time zone; give an aware datetime "
                    "(datetime.now(timezone.utc)) or epoch seconds"
                )
            return value.timestamp()
        return float(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return datetime.fromtimestamp(float(value), UTC)
