"""Retention without I/O: upstream's prune filters checked, one batch of a prune as a plan, the
sweep that runs batches until none is left (the stores drive it), the candidates' listing,
the storage figures and upstream's auto-maintenance schedule."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sqlalchemy import text

from .. import statements
from ..errors import InvalidInputError, InvalidInputTypeError
from ..statements import Capabilities
from ..statements.retention import PRUNE_FILTERS, SQLITE_PAGE_PRAGMAS, PruneFilter
from ..validation import require_count, require_flag, require_seconds, require_text
from .core import Body, Plan, Row, Step
from .session_flags import _delete_rows, _remove_session_files, _require_folder
from .session_listing import _below, escape_like

#: Sessions one batch of a prune deletes at most: on SQLite a batch of this size holds the
#: write lock for a few tens of milliseconds (bench/prune.py measures it: the full-text
#: triggers on the messages deleted cost most), so a watcher sharing the file keeps
#: delivering between batches.
PRUNE_BATCH: Final = 100
#: Between two batches that wrote, the sweep pauses this share of the last batch's time
#: (within the bounds below), so a writer polling for the lock gets it before the next batch.
PAUSE_SHARE: Final = 0.25
PAUSE_BOUNDS: Final = (0.005, 0.05)
#: The largest batch a caller may ask for.
MAX_PRUNE_BATCH: Final = 10_000
#: Upstream's auto-maintenance: VACUUM only when more than this share of the file's pages is
#: free (a rewrite of a dense file costs more I/O than it gives back).
AUTO_VACUUM_MIN_FREELIST_RATIO: Final = 0.25
#: The ``state_meta`` keys upstream's auto-maintenance records its last runs under.
LAST_AUTO_PRUNE: Final = "last_auto_prune"
LAST_VACUUM: Final = "last_vacuum"
#: What ``older_than_days`` may be at most (about 1000 years: any larger is a mistake).
MAX_RETENTION_DAYS: Final = 365_000

_OPTIONS: Final = frozenset({"archived", "include_pinned", "lineage_tips_only"})
_NAMES: Final = frozenset(name for name, _kind in PRUNE_FILTERS) | _OPTIONS
_KINDS: Final = dict(PRUNE_FILTERS)
_INTEGERS: Final = frozenset(
    {"min_messages", "max_messages", "min_tokens", "max_tokens", "min_tool_calls", "max_tool_calls"}
)
_SUBSTRINGS: Final = frozenset({"title_like", "model_like", "branch_like"})
_DAY: Final = 86400.0

logger = logging.getLogger("hermes_state")


@dataclass(frozen=True, slots=True)
class PruneQuery:
    """A prune's filters, checked: which filters (the statements' :class:`PruneFilter`) and
    their bind parameters."""

    chosen: PruneFilter
    values: Mapping[str, Any]


def _filter_value(operation: str, name: str, value: Any) -> dict[str, Any] | None:
    """The bind parameters of one filter, None when it is unset (None; '' for text)."""
    if _KINDS[name] == "bound":
        if value is None:
            return None
        if name in _INTEGERS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInputTypeError(
                    f"{operation}: {name} must be an int, not {type(value).__name__}"
                )
            return {name: value}
        return {name: require_seconds(name, value)}
    if value is None or value == "":
        return None
    given = require_text(name, value, nullable=False) or ""
    if name == "cwd_prefix":
        return _below(given)
    if name in _SUBSTRINGS:
        return {name: f"%{escape_like(given.lower())}%"}
    return {name: given.lower() if name == "provider" else given}


def prune_query(
    operation: str,
    older_than_days: object,
    source: object,
    filters: Mapping[str, Any],
    now: float,
    *,
    include_pinned_default: bool = False,
) -> PruneQuery:
    """Upstream's prune filters checked: an unknown name is a ``TypeError`` as upstream's (an
    :class:`InvalidInputTypeError`); ``older_than_days`` (None: no age bound) becomes
    ``last_active_before`` unless that or ``started_before`` is given."""
    unknown = sorted(set(filters) - _NAMES)
    if unknown:
        raise InvalidInputTypeError(
            f"{operation}() got an unexpected keyword argument {unknown[0]!r}"
        )
    given = dict(filters)
    if source is not None:
        given["source"] = source
    if older_than_days is not None:
        days = require_seconds("older_than_days", older_than_days)
        if days < 0:
            raise InvalidInputError(
                f"older_than_days must be 0 or more, not {older_than_days!r}: a negative age "
                "would match every ended session"
            )
        if days > MAX_RETENTION_DAYS:
            raise InvalidInputError(f"older_than_days must be at most {MAX_RETENTION_DAYS}")
        if given.get("last_active_before") is None and given.get("started_before") is None:
            given["last_active_before"] = now - days * _DAY
    values: dict[str, Any] = {"now": now}
    names = []
    for name, _kind in PRUNE_FILTERS:
        bound = _filter_value(operation, name, given.get(name))
        if bound is not None:
            names.append(name)
            values.update(bound)
    archived = given.get("archived")
    if archived is not None:
        archived = require_flag("archived", archived)
    include_pinned = given.get("include_pinned", include_pinned_default)
    chosen = PruneFilter(
        names=tuple(names),
        archived=archived,
        include_pinned=require_flag("include_pinned", bool(include_pinned)),
        lineage_tips_only=require_flag("lineage_tips_only", bool(given.get("lineage_tips_only"))),
    )
    return PruneQuery(chosen, values)


# -- the lineage rules, per session ------------------------------------------------------------


def _guarded(caps: Capabilities, query: PruneQuery, row: Row, whole_lineages: bool) -> Body[bool]:
    """Whether the lineage keeps ``row`` (a session its own row lets go): a pinned segment above
    it (unless pins are included) or a live turn lease on its conversation, and with
    ``whole_lineages`` a later segment that stays."""
    session_id = str(row["id"])
    params = {"session_id": session_id, "now": query.values["now"]}
    if row["parent_end_reason"] == statements.COMPRESSION:
        above = yield Step(statements.lineage_guard(), params)
        for segment in above.rows:
            if segment["leased"] or (segment["pinned"] and not query.chosen.include_pinned):
                return True
    if whole_lineages and row["end_reason"] == statements.COMPRESSION:
        below = yield Step(
            statements.kept_continuation(caps.name, query.chosen),
            {**query.values, "session_id": session_id},
        )
        if below.rows:
            return True
    return False


# -- one batch ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PruneBatch:
    """What one batch did: the sessions it deleted (or, in a dry run, would delete), their
    messages, how many sessions it looked at and the last id of them (where the next batch
    resumes)."""

    removed: list[str]
    messages: int
    read: int
    last_id: str | None


def _batch(
    caps: Capabilities,
    query: PruneQuery,
    after: str,
    limit: int,
    dry_run: bool,
) -> Body[PruneBatch]:
    window = yield Step(statements.prune_window(), {"after": after, "scan": limit})
    seen = int(window.rows[0]["seen"] or 0) if window.rows else 0
    if not seen:
        return PruneBatch([], 0, 0, None)
    upto = str(window.rows[0]["upto"])
    found = yield Step(
        statements.prune_batch(caps.name, query.chosen, dry_run),
        {**query.values, "after": after, "upto": upto},
    )
    doomed: list[Row] = []
    for row in found.rows:
        if not (yield from _guarded(caps, query, row, True)):
            doomed.append(row)
    ids = [str(row["id"]) for row in doomed]
    if dry_run:
        counted = sum(int(row["messages"] or 0) for row in doomed)
        return PruneBatch(ids, counted, seen, upto)
    messages = (yield from _delete_rows(ids)) if ids else 0
    return PruneBatch(ids, messages, seen, upto)


@dataclass(slots=True)
class PruneTotals:
    """A whole prune: sessions and messages deleted (or that would be, in a dry run), batches
    run, and the longest batch in seconds (its transaction, retries included)."""

    dry_run: bool
    sessions: int = 0
    messages: int = 0
    batches: int = 0
    longest_batch_seconds: float = 0.0
    seconds: float = 0.0
    sample: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "sessions": self.sessions,
            "messages": self.messages,
            "batches": self.batches,
            "longest_batch_seconds": round(self.longest_batch_seconds, 6),
            "seconds": round(self.seconds, 6),
            "sample": list(self.sample),
        }


@dataclass(frozen=True, slots=True)
class PruneSweep:
    """A prune as a schedule of batches, without I/O: :meth:`run` yields the plan of each batch
    (one short transaction) and is sent what it returned, until a batch reads fewer rows than
    it may; the stores drive it, each its own way (so the loop is written once). Memory stays
    bounded by one batch whatever the number of sessions that go."""

    query: PruneQuery
    batch_size: int
    dry_run: bool
    sample_size: int
    folder: Path | None
    on_batch: Callable[[PruneBatch, float], object] | None = None

    def plan(self, after: str) -> Plan[PruneBatch]:
        folder = self.folder

        def swept(batch: PruneBatch) -> PruneBatch:
            if folder is not None and not self.dry_run:
                for session_id in batch.removed:
                    _remove_session_files(folder, session_id)
            return batch

        return Plan(
            _batch,
            self.query,
            after,
            self.batch_size,
            self.dry_run,
            writes=not self.dry_run,
            single_statement=False,
            after=swept,
        )

    def run(
        self, clock: Callable[[], float] = time.perf_counter
    ) -> Generator[Plan[PruneBatch] | float, PruneBatch | None, PruneTotals]:
        """Yields the plan of each batch, to be run and its result sent back, and between
        two batches that wrote the seconds to pause (the driver sleeps, sending None)."""
        totals = PruneTotals(dry_run=self.dry_run)
        began = clock()
        after = ""
        while True:
            started = clock()
            batch = yield self.plan(after)
            assert batch is not None
            elapsed = clock() - started
            totals.batches += 1
            totals.sessions += len(batch.removed)
            totals.messages += batch.messages
            totals.longest_batch_seconds = max(totals.longest_batch_seconds, elapsed)
            room = self.sample_size - len(totals.sample)
            if room > 0:
                totals.sample.extend(batch.removed[:room])
            if self.on_batch is not None:
                self.on_batch(batch, elapsed)
            if batch.read < self.batch_size or batch.last_id is None:
                totals.seconds = clock() - began
                return totals
            after = batch.last_id
            if batch.removed and not self.dry_run:
                low, high = PAUSE_BOUNDS
                yield min(high, max(low, elapsed * PAUSE_SHARE))


# -- the candidates, listed --------------------------------------------------------------------


def _candidates(caps: Capabilities, query: PruneQuery, whole_lineages: bool) -> Body[list[Row]]:
    found = yield Step(statements.prune_candidates(caps.name, query.chosen), query.values)
    kept = []
    for row in found.rows:
        if not (yield from _guarded(caps, query, row, whole_lineages)):
            row.pop("parent_end_reason", None)
            kept.append(row)
    return kept


# -- storage -----------------------------------------------------------------------------------


def _storage(caps: Capabilities) -> Body[dict[str, Any]]:
    report: dict[str, Any] = {"dialect": caps.name}
    if caps.name != "sqlite":
        return report
    for pragma in SQLITE_PAGE_PRAGMAS:
        found = yield Step(text(f"PRAGMA {pragma}"))
        report[pragma] = int(next(iter(found.rows[0].values()))) if found.rows else 0
    pages = report["page_count"]
    report["free_ratio"] = report["freelist_count"] / pages if pages else 0.0
    report["bytes"] = pages * report["page_size"]
    return report


def seconds_since(now: float, stamp: str | None) -> float | None:
    """How long ago a ``state_meta`` time stamp was; None when unset or unreadable (no run)."""
    try:
        return now - float(stamp) if stamp else None
    except (TypeError, ValueError):
        return None


class RetentionPlans:
    """The retention operations of :class:`~hermes_state.plans.PlanBook`."""

    clock: Callable[[], float]

    def prune_sweep(
        self,
        older_than_days: object = 90,
        source: object = None,
        *,
        sessions_dir: object = None,
        dry_run: object = False,
        batch_size: object = PRUNE_BATCH,
        sample: object = 0,
        on_batch: Callable[[PruneBatch, float], object] | None = None,
        filters: Mapping[str, Any] | None = None,
        operation: str = "prune_sessions",
    ) -> PruneSweep:
        query = prune_query(operation, older_than_days, source, filters or {}, self.clock())
        size = 0 if sample is None else sample
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(f"sample must be a whole number 0 or more, not {sample!r}")
        return PruneSweep(
            query=query,
            batch_size=require_count("batch_size", batch_size, maximum=MAX_PRUNE_BATCH),
            dry_run=require_flag("dry_run", dry_run),
            sample_size=size,
            folder=_require_folder("sessions_dir", sessions_dir),
            on_batch=on_batch,
        )

    def list_prune_candidates(
        self,
        older_than_days: object = None,
        source: object = None,
        *,
        whole_lineages: object = False,
        **filters: Any,
    ) -> Plan[list[Row]]:
        query = prune_query("list_prune_candidates", older_than_days, source, filters, self.clock())
        lineages = require_flag("whole_lineages", whole_lineages)
        return Plan(_candidates, query, lineages, writes=False, single_statement=False)

    def storage_report(self) -> Plan[dict[str, Any]]:
        return Plan(_storage, writes=False, single_statement=False)


# -- upstream's start-up maintenance -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """A store method the maintenance schedule asks its driver to call (by name, so a method
    replaced on the store, as upstream's tests do, is the one called)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def _whole_days(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputTypeError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)


def auto_maintenance(
    *,
    retention_days: object,
    min_interval_hours: object,
    vacuum: object,
    sessions_dir: object,
    min_vacuum_interval_days: object,
    min_vacuum_freelist_ratio: object,
    clock: Callable[[], float],
) -> Generator[Call, Any, dict[str, Any]]:
    """Upstream's ``maybe_auto_prune_and_vacuum`` as a schedule without I/O: it yields the
    store calls to make (the driver sends back each result, or throws in what it raised) and
    returns upstream's result. At most one run per ``min_interval_hours`` (``last_auto_prune``
    in ``state_meta``); a VACUUM only after a prune that deleted something, at most once per
    ``min_vacuum_interval_days`` (``last_vacuum``) and only above ``min_vacuum_freelist_ratio``
    free pages (servers report no ratio: they always qualify). Never raises: a failure is
    reported under ``"error"``."""
    result: dict[str, Any] = {"skipped": False, "pruned": 0, "closed": 0, "vacuumed": False}
    if (
        retention_days is None
        or isinstance(retention_days, bool)
        or not isinstance(retention_days, int | float)
        or retention_days < 0
    ):
        logger.warning(
            "auto-maintenance skipped: retention_days=%r is not a number of days >= 0",
            retention_days,
        )
        result["skipped"] = True
        return result
    try:
        interval = _whole_days("min_interval_hours", min_interval_hours) * 3600.0
        vacuum_interval = _whole_days("min_vacuum_interval_days", min_vacuum_interval_days) * _DAY
        floor = _whole_days("min_vacuum_freelist_ratio", min_vacuum_freelist_ratio)
        now = clock()
        since_prune = seconds_since(now, (yield Call("get_meta", (LAST_AUTO_PRUNE,))))
        if since_prune is not None and since_prune < interval:
            result["skipped"] = True
            return result
        pruned = yield Call(
            "prune_sessions",
            kwargs={
                "older_than_days": retention_days,
                "sessions_dir": sessions_dir,
                "exclude_active_write_guards": True,
            },
        )
        result["pruned"] = pruned
        since_vacuum = seconds_since(now, (yield Call("get_meta", (LAST_VACUUM,))))
        due = since_vacuum is None or since_vacuum >= vacuum_interval
        if vacuum and pruned > 0 and due:
            ratio = yield Call("_freelist_ratio")
            result["freelist_ratio"] = ratio
            if ratio is None or ratio > floor:
                try:
                    yield Call("vacuum")
                except Exception as exc:
                    logger.warning("auto-maintenance: VACUUM failed: %s", exc)
                else:
                    result["vacuumed"] = True
                    yield Call("set_meta", (LAST_VACUUM, str(now)))
        # Recorded even when nothing was pruned, so the interval holds.
        yield Call("set_meta", (LAST_AUTO_PRUNE, str(now)))
        if pruned:
            logger.info(
                "auto-maintenance: pruned %d session(s) inactive for %s days%s",
                pruned,
                retention_days,
                " and vacuumed" if result["vacuumed"] else "",
            )
    except Exception as exc:
        logger.warning("auto-maintenance failed: %s", exc)
        result["error"] = str(exc)
    return result
