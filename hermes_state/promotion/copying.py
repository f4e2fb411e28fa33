"""The copy itself: copy_database, table by table and batch by batch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Integer, and_, func, select, text
from sqlalchemy.engine import URL

from .. import search_index
from ..engine import READ_ONLY, describe, is_sqlite, make_engine
from ..errors import CopyConflictError, translated
from ..schema import HEAD_REVISION, ensure_current, upgrade
from .planning import DEFAULT_BATCH, _apply_shape, _Carried, _planned, _preflight
from .reports import CopyReport, Fill, TableReport
from .sides import _absent_sqlite_file, _at_head, _check_pair, _server_state
from .verification import _count, _only_our_stamp, _refuse_conflicts, _Rows, _verify

Progress = Callable[[str, int, int], None]


def copy_database(
    source_url: Any,
    target_url: Any,
    *,
    force: bool = False,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    fills: Sequence[Fill] = (),
) -> CopyReport:
    """Copy every table and column of primary data from ``source_url`` to ``target_url``.

    The source is only read: an SQLite file that is not at head (an upstream file not adopted
    yet) is read through a temporary copy brought to head, and a server database behind head
    is refused. An SQLite target is created if absent and brought to head; a server target
    without the tables gets them, one behind head that holds tables is refused. Raises
    :class:`CopyRefusedError` when source rows do not fit the target, :class:`CopyConflictError`
    when target rows differ (unless ``force``); in both cases nothing has been written, and a
    copy that fails leaves no target file it created.
    """
    _check_pair(source_url, target_url, batch_size)
    new_file = _absent_sqlite_file(target_url)
    with _at_head(source_url) as (source_at_head, _state):
        try:
            return _copied(
                source_at_head, source_url, target_url, force, batch_size, progress, fills
            )
        except BaseException:
            if new_file is not None:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{new_file}{suffix}").unlink(missing_ok=True)
            raise


def _copied(
    source_at_head: URL,
    source_url: URL,
    target_url: URL,
    force: bool,
    batch_size: int,
    progress: Progress | None,
    fills: Sequence[Fill],
) -> CopyReport:
    source = make_engine(source_at_head, read_only=is_sqlite(source_at_head))
    target = make_engine(target_url)
    where = f"the copy from {describe(source_url)} to {describe(target_url)}"
    try:
        if not is_sqlite(target_url):
            revision, empty = _server_state(target_url)
            if revision != HEAD_REVISION and empty:
                upgrade(target_url)  # a server database without the tables: create them
        ensure_current(target, auto_upgrade=is_sqlite(target_url), url=target_url)
        with translated(where), source.connect() as reading, target.connect() as writing:
            reading.execution_options(**{READ_ONLY: True})
            plan, skipped, resolved = _planned(reading, writing, fills)
            _preflight(reading, plan, resolved, writing.dialect)
            if not force:
                _refuse_conflicts(reading, writing, plan, resolved, batch_size)
            # Only now is anything written: the shape first (MySQL commits DDL anyway).
            for carried in plan:
                _apply_shape(writing, carried)
            writing.commit()
            for carried in plan:
                _analyze(writing, carried)  # the key lookups below need fresh statistics
            reports = []
            for carried in plan:
                with translated(f"{where} (table {carried.name})"):
                    reports.append(
                        _copy_table(
                            carried,
                            resolved.get(carried.name, {}),
                            reading,
                            writing,
                            batch_size,
                            force,
                            progress,
                        )
                    )
            _advance_sequences(writing, plan)
            for table_report, carried in zip(reports, plan, strict=True):
                assert carried.target is not None
                table_report.target_rows = _count(writing, carried.target)
            writing.commit()
            fts_rebuilt = _rebuild_search(writing)
    finally:
        source.dispose()
        target.dispose()
    copied = CopyReport(
        describe(source_url), describe(target_url), reports, skipped, fts_rebuilt=fts_rebuilt
    )
    _verify(copied)
    return copied


def _rebuild_search(writing: Connection) -> bool:
    """On an SQLite target with the full-text index: refill it from the copied messages.

    The rows went in with the index's triggers active, so each new message was indexed once
    as it arrived; but rows a trigger skipped (upstream's backfill window, carried in
    ``state_meta``) or overwrote (``--force``) may leave it behind. FTS5's ``rebuild`` of an
    external-content table drops the whole index and reads every row again: the index ends
    exactly as its sources, whatever happened during the copy (and a rerun rebuilds again).
    """
    if writing.dialect.name != "sqlite" or not search_index.present(writing):
        writing.rollback()
        return False
    trigram = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts_trigram'"
    if writing.exec_driver_sql(trigram).first() is not None:
        search_index.rebuild(writing)
    else:  # an older upstream layout, words only
        writing.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    writing.commit()
    return True


def _copy_table(
    carried: _Carried,
    fills: dict[str, Any],
    reading: Connection,
    writing: Connection,
    batch_size: int,
    force: bool,
    progress: Progress | None,
) -> TableReport:
    assert carried.target is not None
    target = carried.target
    report = TableReport(
        carried.name, created=carried.create, added_columns=[c.name for c in carried.add]
    )
    rows = _Rows(carried, fills)
    total = _count(reading, carried.source)
    reading.rollback()
    replaceable = _only_our_stamp(writing, carried)
    analyzed_at = _count(writing, target)
    writing.rollback()
    for batch in rows.batches(reading, batch_size):
        present = rows.existing(writing, batch)
        fresh: list[tuple[Any, ...]] = []
        changed: list[tuple[Any, ...]] = []
        if not rows.key_positions:
            if present == Counter(batch):
                report.identical += len(batch)
            elif present and not (force or replaceable):
                raise CopyConflictError(
                    f"{carried.name} changed in the target during the copy; re-run to resume"
                )
            else:
                if present:
                    writing.execute(target.delete())
                if present and not replaceable:
                    report.overwritten += len(batch)
                else:
                    report.copied += len(batch)
                writing.execute(target.insert(), [rows.as_dict(row) for row in batch])
        else:
            for row in batch:
                stored = present.get(rows.key(row))
                if stored is None:
                    fresh.append(row)
                elif stored == row:
                    report.identical += 1
                else:
                    changed.append(row)
            if changed and not force:  # appeared since the conflict check: still refuse
                raise CopyConflictError(
                    f"{carried.name} rows changed in the target during the copy; re-run to resume"
                )
            if fresh:
                writing.execute(target.insert(), [rows.as_dict(row) for row in fresh])
            for row in changed:
                key = and_(
                    *(
                        rows.target_columns[position] == row[position]
                        for position in rows.key_positions
                    )
                )
                writing.execute(target.update().where(key).values(rows.as_dict(row)))
            report.copied += len(fresh)
            report.overwritten += len(changed)
        writing.commit()  # batch by batch: an interrupted copy resumes where it stopped
        report.source_rows += len(batch)
        grown = analyzed_at + report.copied
        if grown >= 2 * max(analyzed_at, batch_size):  # doubled: O(log n) ANALYZEs in all
            _analyze(writing, carried)
            analyzed_at = grown
        if progress is not None:
            progress(carried.name, report.source_rows, total)
    return report


def _analyze(writing: Connection, carried: _Carried) -> None:
    """Fresh planner statistics for a growing target table (PostgreSQL).

    Without them PostgreSQL plans the per-batch key lookup (``_Rows.existing``) for an empty
    table, a sequential scan; psycopg prepares the statement after five runs and the generic
    plan keeps scanning while the table grows: each batch then costs O(rows copied so far).
    """
    if writing.dialect.name == "postgresql":
        writing.execute(text(f"ANALYZE {writing.dialect.identifier_preparer.quote(carried.name)}"))
        writing.commit()


def _advance_sequences(writing: Connection, plan: Sequence[_Carried]) -> None:
    """Ids were copied explicitly; PostgreSQL's sequences must move past them."""
    if writing.dialect.name != "postgresql":
        return  # SQLite and MySQL/MariaDB advance their counters on explicit inserts
    quote = writing.dialect.identifier_preparer.quote
    for carried in plan:
        assert carried.target is not None
        keys = list(carried.target.primary_key.columns)
        if len(keys) != 1 or not isinstance(keys[0].type, Integer):
            continue
        (key,) = keys
        sequence = func.pg_get_serial_sequence(quote(carried.name), key.name)
        highest = func.max(key)
        # setval on a NULL sequence (a key without one) is NULL: nothing happens.
        writing.execute(
            select(
                func.setval(
                    sequence,
                    func.greatest(func.coalesce(highest, 0), 1),
                    highest.is_not(None),
                )
            ).select_from(carried.target)
        )
