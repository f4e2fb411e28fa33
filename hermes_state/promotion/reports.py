"""What a copy and its dry run report: fills, tables left behind, counts, both sides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from ..errors import InvalidInputError
from ..schema import HEAD_REVISION, NO_REVISION

CONFLICTS_SHOWN: Final = 10


@dataclass(frozen=True, slots=True)
class Fill:
    """``TABLE.COLUMN=VALUE``: the value a NULL in that source column becomes on the target."""

    table: str
    column: str
    value: str

    @classmethod
    def parse(cls, given: str) -> Fill:
        name, equals, value = given.partition("=")
        table, dot, column = name.strip().partition(".")
        if not (equals and dot and table and column):
            raise InvalidInputError(
                f"--fill {given!r}: expected TABLE.COLUMN=VALUE, e.g. sessions.source=unknown"
            )
        return cls(table, column, value)

    def __str__(self) -> str:
        return f"{self.table}.{self.column}={self.value}"


@dataclass(frozen=True, slots=True)
class SkippedTable:
    """A source table that is not copied, and how the target gets it back (if it needs to).

    ``derived``: the target rebuilds or keeps its own (the full-text index, SQLite's counters,
    hermes-state's bookkeeping), so nothing is lost; the summary does not list those."""

    table: str
    reason: str
    derived: bool = False


@dataclass
class TableReport:
    """What happened to one table's rows, and to its shape on the target."""

    table: str
    source_rows: int = 0
    copied: int = 0
    identical: int = 0
    overwritten: int = 0
    target_rows: int = 0
    created: bool = False
    added_columns: list[str] = field(default_factory=list)


@dataclass
class CopyReport:
    source: str
    target: str
    tables: list[TableReport]
    skipped: list[SkippedTable] = field(default_factory=list)
    #: the target is SQLite with a full-text index, rebuilt from its messages after the copy
    fts_rebuilt: bool = False

    @property
    def copied(self) -> int:
        return sum(table.copied + table.overwritten for table in self.tables)


@dataclass(frozen=True, slots=True)
class SideState:
    """A database as the copy would find it: its revision now, and whether the copy would
    first create it, create its tables (``empty``: a server database without them) or bring
    it to head."""

    database: str
    revision: str | None
    exists: bool
    upgraded_first: bool
    empty: bool = False

    def __str__(self) -> str:
        if not self.exists:
            return f"{self.database} does not exist: the copy would create it at {HEAD_REVISION}"
        if self.empty:
            return (
                f"{self.database} holds none of the tables yet: the copy would first create "
                f"them at {HEAD_REVISION}"
            )
        if not self.upgraded_first:
            return f"{self.database} is at {HEAD_REVISION} (head)"
        how = (
            "adopt it in place and bring it"
            if self.revision is None
            else f"upgrade it from {self.revision}"
        )
        return (
            f"{self.database} is at {self.revision or NO_REVISION}: the copy would first {how} "
            f"to {HEAD_REVISION} (`hermes-state --url '{self.database}' db upgrade --dry-run` "
            "lists what that adds)"
        )


@dataclass
class TablePlan:
    """What a copy would do to one table."""

    table: str
    source_rows: int
    new: int
    identical: int
    differing: int
    target_rows: int
    created: bool
    added_columns: list[str]


@dataclass(frozen=True, slots=True)
class FillPlan:
    fill: Fill
    nulls: int


@dataclass
class CopyPlan:
    """What :func:`copy_database` would do, worked out without writing (``db copy --dry-run``).

    ``problems`` are source rows the target cannot take and ``conflicts`` target rows that
    differ from the source; either refuses the copy (conflicts only without ``force``).
    """

    source: SideState
    target: SideState
    force: bool
    tables: list[TablePlan]
    skipped: list[SkippedTable]
    fills: list[FillPlan]
    problems: list[str]
    conflicts: list[str]

    @property
    def refusal(self) -> str | None:
        """Why the copy would be refused, in the copy's words; None when it would go ahead."""
        if self.problems:
            return (
                "the target cannot take every source row, so nothing would be copied: "
                + "; ".join(self.problems)
            )
        if self.conflicts and not self.force:
            return _conflict_message(self.conflicts, "nothing would be copied")
        return None


def _conflict_message(conflicts: Sequence[str], outcome: str) -> str:
    shown = ", ".join(conflicts[:CONFLICTS_SHOWN])
    hidden = len(conflicts) - CONFLICTS_SHOWN
    more = f" and {hidden} more" if hidden > 0 else ""
    return (
        f"{len(conflicts)} row(s) already in the target differ from the source "
        f"({shown}{more}); {outcome}. Re-run with --force to overwrite them."
    )
