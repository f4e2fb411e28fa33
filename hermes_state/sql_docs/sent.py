"""What the catalog is made of: a statement an operation sends, and an operation."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.sql.elements import ClauseElement

from ..statements import Capabilities

__all__ = ["PER_WALK", "Operation", "Sent", "call_of", "only", "sends", "shown"]


@dataclass(frozen=True, slots=True, eq=False)  # a statement's == builds SQL
class Sent:
    """One statement an operation sends: the builder (a cached function of
    :mod:`hermes_state.statements`), how it was called, the statement, and when it is sent."""

    builder: str
    call: str
    statement: ClauseElement
    note: str = ""


def shown(value: object) -> str:
    """An argument as the docs show it: an enum member by name, a set sorted."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(shown(item) for item in value)) + "}"
    return repr(value)


def call_of(builder: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]) -> str:
    """``statements.builder(name=value, ...)``, the arguments named."""
    bound = inspect.signature(builder).bind(*args, **kw)
    named = ", ".join(f"{name}={shown(value)}" for name, value in bound.arguments.items())
    return f"statements.{builder.__name__}({named})"


def sends(
    builder: Callable[..., Any], *args: Any, part: str | None = None, note: str = "", **kw: Any
) -> Sent:
    """The statement ``builder(*args, **kw)`` builds (its attribute ``part``, for a builder of
    several), called as the plans call it, so it is the very object they send."""
    built = builder(*args, **kw)
    statement = built if part is None else getattr(built, part)
    assert isinstance(statement, ClauseElement)
    call = call_of(builder, args, kw) + ("" if part is None else f".{part}")
    return Sent(builder.__name__, call, statement, note)


#: The lineage walk (:func:`hermes_state.plans.turn_leases._conversation`): the session's
#: parent, then its parent's, while the parent ended by compression.
PER_WALK = "once, and once more per step up the session's compression lineage"


def only(
    builder: Callable[..., Any], *args: Any, **kw: Any
) -> Callable[[Capabilities], list[Sent]]:
    """An operation that sends one statement, the same builder on every dialect."""
    return lambda _caps: [sends(builder, *args, **kw)]


@dataclass(frozen=True, slots=True)
class Operation:
    """A store operation (a method of :class:`~hermes_state.SessionDB`), called as ``call``
    shows (``when`` says in what state, if it matters), and the statements it sends on a
    dialect (``steps``), in order."""

    section: str
    name: str
    variant: str
    call: str
    steps: Callable[[Capabilities], list[Sent]]
    when: str = ""

    @property
    def slug(self) -> str:
        return self.name + (f".{self.variant}" if self.variant else "")
