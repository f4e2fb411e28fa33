"""The dry run: plan_copy works out what a copy would do, writing nothing."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, func, select
from sqlalchemy.engine import URL

from ..engine import READ_ONLY, describe, is_sqlite, make_engine
from ..errors import translated
from .planning import DEFAULT_BATCH, _Carried, _planned, _problems
from .reports import CopyPlan, Fill, FillPlan, TablePlan
from .sides import _at_head, _check_pair
from .verification import _compare, _count


def plan_copy(
    source_url: URL,
    target_url: URL,
    *,
    force: bool = False,
    batch_size: int = DEFAULT_BATCH,
    fills: Sequence[Fill] = (),
) -> CopyPlan:
    """The copy's pre-flight and comparison, and nothing after: neither database is written.

    An SQLite file the copy would first bring to head (or create) is planned on a temporary
    copy brought to head, so the plan sees the tables and columns the copy would; a server
    database behind head is refused as the copy refuses it.
    """
    _check_pair(source_url, target_url, batch_size)
    where = f"the copy from {describe(source_url)} to {describe(target_url)}"
    with (
        _at_head(source_url) as (source_at_head, source_state),
        _at_head(target_url, target=True) as (target_at_head, target_state),
    ):
        source = make_engine(source_at_head, read_only=is_sqlite(source_at_head))
        target = make_engine(target_at_head, read_only=is_sqlite(target_at_head))
        try:
            with translated(where), source.connect() as reading, target.connect() as looking:
                for connection in (reading, looking):
                    connection.execution_options(**{READ_ONLY: True})
                plan, skipped, resolved = _planned(reading, looking, fills)
                problems = _problems(reading, plan, resolved, looking.dialect)
                tables: list[TablePlan] = []
                conflicts: list[str] = []
                for carried in plan:
                    assert carried.planned is not None
                    compared = _compare(
                        reading, looking, carried, resolved.get(carried.name, {}), batch_size
                    )
                    conflicts += compared.conflicts
                    tables.append(
                        TablePlan(
                            carried.name,
                            compared.new + compared.identical + compared.differing,
                            compared.new,
                            compared.identical,
                            compared.differing,
                            0 if carried.create else _count(looking, carried.planned),
                            carried.create,
                            [column.name for column in carried.add],
                        )
                    )
                    looking.rollback()
                filled = _nulls_filled(reading, plan, fills)
        finally:
            source.dispose()
            target.dispose()
    return CopyPlan(source_state, target_state, force, tables, skipped, filled, problems, conflicts)


def _nulls_filled(
    reading: Connection, plan: Sequence[_Carried], fills: Sequence[Fill]
) -> list[FillPlan]:
    by_table = {carried.name: carried for carried in plan}
    counted: list[FillPlan] = []
    for fill in fills:
        source = by_table[fill.table].source
        query = select(func.count()).select_from(source).where(source.c[fill.column].is_(None))
        counted.append(FillPlan(fill, int(reading.execute(query).scalar_one())))
        reading.rollback()
    return counted
