"""SessionDB: the synchronous store with the compatible surface, on embedded SQLite or a server."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import URL

from . import notify, search_query, statements, titles
from .engine import Patience, describe, is_sqlite, make_engine, refuse_directory, resolve_url
from .errors import (
    DatabaseBusyError,
    DatabaseError,
    InvalidInputError,
    ReadOnlyDatabaseError,
    missing_database,
)
from .execution import PooledRunner, PostgresRunner, Runner, SqliteThreadRunner, WriteConnection
from .operations import SyncOperations
from .plans import ATTEMPT, LeaseWait, Ownership, Plan, PlanBook, lease_patience, portability
from .plans.retention import (
    AUTO_VACUUM_MIN_FREELIST_RATIO,
    PRUNE_BATCH,
    PruneSweep,
    PruneTotals,
    auto_maintenance,
)
from .schema import ensure_current, ensure_readable
from .validation import require_identifier, require_seconds

logger = logging.getLogger("hermes_state")

#: How long ``close()`` waits for the calls other threads are making on the store.
CLOSE_WAIT = 30.0

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .surface import Store

__all__ = ["SessionDB", "StoreSettings"]

T = TypeVar("T")
Clock = Callable[[], float]


class StoreSettings:
    """What every store takes: the database, its patience, the clock and who it acts as.

    ``owner`` (a stable gateway name) and ``lease_seconds`` switch on multi-gateway claims:
    stamped, leased, and fenced so a gateway whose claim was rescued cannot overwrite the row.
    ``actor`` is the "who" of the audit trail (default: the owner, else "api").
    """

    #: The longest title ``set_session_title`` keeps, after cleaning (upstream's limit).
    MAX_TITLE_LENGTH = titles.MAX_TITLE_LENGTH
    #: ``sanitize_title(title)``: the title as it would be stored (see :mod:`hermes_state.titles`).
    sanitize_title = staticmethod(titles.sanitize_title)
    #: Upstream's names for what ``search_messages`` makes of a query: the FTS5 expression
    #: (see :mod:`hermes_state.search_query`) and its CJK tests.
    _sanitize_fts5_query = staticmethod(search_query.sanitize_fts5_query)
    _contains_cjk = staticmethod(search_query.contains_cjk)
    _count_cjk = staticmethod(search_query.count_cjk)
    #: Upstream's flags for a full-text index and its trigram half being usable, which its
    #: callers and tests read before searching. Search works on every backend here (a file
    #: without the FTS5 tables is searched with LIKE), so both hold.
    _fts_enabled: bool = True
    _trigram_available: bool = True
    #: Upstream's pacing of its chunked full-text rebuild (seconds between chunks, and that
    #: pause per second a chunk took), which its callers and tests tune. Kept under upstream's
    #: names so that code runs; hermes-state has no chunked rebuild for them to pace (its
    #: full-text index is kept by triggers, filled once when a file is adopted).
    _FTS_REBUILD_MIN_PAUSE: float = 0.05
    _FTS_REBUILD_DUTY_FACTOR: float = 4.0
    #: Bot Mode's canonical chat title: a hidden session so titled keeps it.
    CANONICAL_BOT_CHAT_TITLE = titles.CANONICAL_BOT_CHAT_TITLE
    #: The provenances a title may have (``title_source``), upstream's names.
    TITLE_SOURCE_DERIVED = titles.TITLE_SOURCE_DERIVED
    TITLE_SOURCE_LLM = titles.TITLE_SOURCE_LLM
    TITLE_SOURCE_USER = titles.TITLE_SOURCE_USER
    TITLE_SOURCE_BRANCH = titles.TITLE_SOURCE_BRANCH
    TITLE_SOURCE_BRANCH_FALLBACK = titles.TITLE_SOURCE_BRANCH_FALLBACK

    def __init__(
        self,
        db_path: str | os.PathLike[str] | Engine | AsyncEngine | None,
        url: str | URL | Engine | AsyncEngine | None,
        *,
        busy_patience: float,
        clock: Clock,
        owner: str | None,
        lease_seconds: float | None,
        actor: str | None,
    ) -> None:
        if db_path is not None and url is not None:
            raise InvalidInputError(f"give {type(self).__name__} either db_path or url, not both")
        self.url = resolve_url(url if url is not None else db_path)
        self.where = describe(self.url)
        self._patience = Patience(require_seconds("busy_patience", busy_patience))
        ownership = Ownership.configure(owner, lease_seconds)
        default_actor = ownership.owner if ownership else "api"
        self._plans = PlanBook(
            clock=clock,
            actor=require_identifier("actor", actor) if actor is not None else default_actor,
            ownership=ownership,
            announce=functools.partial(notify.publish, notify.database_key(self.url)),
        )

    @property
    def owner(self) -> str | None:
        ownership = self._plans.ownership
        return ownership.owner if ownership else None

    @property
    def lease_seconds(self) -> float | None:
        ownership = self._plans.ownership
        return ownership.lease_seconds if ownership else None

    @property
    def actor(self) -> str:
        return self._plans.actor

    def __repr__(self) -> str:
        owner = f", owner={self.owner!r}" if self.owner else ""
        return f"{type(self).__name__}({self.where!r}{owner})"


class SessionDB(StoreSettings, SyncOperations):
    """Sessions, transcripts and the handoff state machine, one transaction per call.

    ``SessionDB()`` opens ``$HERMES_HOME/state.db`` (``HERMES_HOME`` defaults to ``~/.hermes``);
    ``SessionDB(path)`` another file; ``SessionDB(url=...)`` (or a URL as ``db_path``) any
    supported backend. An embedded SQLite file is brought to the current schema on open; a
    server database that is behind raises :class:`~hermes_state.SchemaOutOfDateError`, which
    names the command to run. The store is safe to share between threads.

    ``read_only=True`` opens a store that never writes: an existing SQLite file is opened so that
    SQLite refuses every write (no upgrade, no file created); one not at head (an upstream file
    not adopted yet, or an older revision of ours) is read as head would show it, through
    temporary views (:mod:`hermes_state.lens`). Every write method raises
    :class:`~hermes_state.ReadOnlyDatabaseError`.
    """

    # Upstream's import caps, under its names (its tests and callers read them here).
    _IMPORT_MAX_SESSIONS = portability.IMPORT_MAX_SESSIONS
    _IMPORT_MAX_MESSAGES_PER_SESSION = portability.IMPORT_MAX_MESSAGES_PER_SESSION
    _IMPORT_MAX_TOTAL_MESSAGES = portability.IMPORT_MAX_TOTAL_MESSAGES
    _IMPORT_MAX_SESSION_BYTES = portability.IMPORT_MAX_SESSION_BYTES
    _IMPORT_MAX_TOTAL_BYTES = portability.IMPORT_MAX_TOTAL_BYTES

    def __init__(
        self,
        db_path: str | os.PathLike[str] | Engine | AsyncEngine | None = None,
        *,
        url: str | URL | Engine | AsyncEngine | None = None,
        busy_patience: float = 30.0,
        clock: Clock = time.time,
        owner: str | None = None,
        lease_seconds: float | None = None,
        actor: str | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__(
            db_path,
            url,
            busy_patience=busy_patience,
            clock=clock,
            owner=owner,
            lease_seconds=lease_seconds,
            actor=actor,
        )
        self.read_only = read_only
        embedded = is_sqlite(self.url)
        if read_only and embedded and not Path(str(self.url.database)).is_file():
            refuse_directory(Path(str(self.url.database)))
            raise missing_database(self.where)
        engine = make_engine(self.url, read_only=read_only)
        try:
            if read_only:
                ensure_readable(engine, url=self.url)
            else:
                ensure_current(engine, auto_upgrade=embedded, url=self.url)
        except BaseException:
            engine.dispose()
            raise
        self._runner: Runner = self._new_runner(engine)
        self._closed = False
        self._reopening = threading.Lock()
        #: The threads in a call, per runner: close() closes a runner once no other thread is
        #: inside it (a connection closed under a thread's statement can crash the process).
        self._calls = threading.Condition()
        self._in_flight: dict[int, list[int]] = {}
        #: Entered for the whole of every call, as upstream's store enters its own lock. The
        #: store needs none (its runner keeps each thread on its own connection and serializes
        #: what SQLite must), so by default it is a no-op: calls on other threads run side by
        #: side. Code written for upstream that installs a lock here (``db._lock = lock``) gets
        #: every call under it; ``with db._lock:`` on the default excludes nothing.
        self._lock: AbstractContextManager[Any] = contextlib.nullcontext()

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _new_runner(self, engine: Engine) -> Runner:
        runner_type: type[PooledRunner] = PooledRunner
        if is_sqlite(self.url):
            runner_type = SqliteThreadRunner
        elif self.url.get_backend_name() == "postgresql":
            runner_type = PostgresRunner
        return runner_type(engine, self._patience, self.where)

    def close(self) -> None:
        """Close every connection the store holds (again: nothing to do); on SQLite once the
        calls other threads are making finish (for at most :data:`CLOSE_WAIT` seconds: an
        SQLite connection closed under another thread's statement can crash the process; a
        server's busy connections are closed by their calls on return). A later call opens
        the database again, with a warning, as upstream's store does for a worker still
        flushing when its session was torn down; a read-only store refuses instead."""
        with self._reopening:
            runner, self._closed = self._runner, True
        me = threading.get_ident()
        with self._calls:
            if isinstance(runner, SqliteThreadRunner):
                self._calls.wait_for(
                    lambda: all(t == me for t in self._in_flight.get(id(runner), [])),
                    CLOSE_WAIT,
                )
            runner.close()

    def _enter_call(self) -> Runner:
        """The runner for one call, counted as busy until :meth:`_leave_call`."""
        with self._calls:
            runner = self._live_runner()
            self._in_flight.setdefault(id(runner), []).append(threading.get_ident())
        return runner

    def _leave_call(self, runner: Runner) -> None:
        with self._calls:
            threads = self._in_flight[id(runner)]
            threads.remove(threading.get_ident())
            if not threads:
                del self._in_flight[id(runner)]
            self._calls.notify_all()

    def _on_runner(self, work: Callable[[Runner], T]) -> T:
        """``work(runner)`` on the live runner, counted as busy meanwhile (``close()`` waits for
        it on SQLite). A call that ``close()`` overtook on a server (whose store does not wait
        for its calls) was refused by its runner before it reached a connection, so nothing
        committed: it runs again, whole, on a runner of the reopened store."""
        # _enter_call/_leave_call rather than a context manager: this is every operation's
        # path, and a generator-based context manager costs about 1 µs a call
        # (bench/store_writes.py: a one-statement write takes 4-10 µs in SQLite itself).
        runner = self._enter_call()
        try:
            return work(runner)
        except DatabaseError:
            if runner is self._runner and not self._closed:
                raise
        finally:
            self._leave_call(runner)
        runner = self._enter_call()
        try:
            return work(runner)
        finally:
            self._leave_call(runner)

    def _live_runner(self) -> Runner:
        if not self._closed:
            return self._runner
        with self._reopening:
            if self._closed:
                if self.read_only:
                    raise DatabaseError(
                        f"this read-only store of {self.where} was closed; open a new one"
                    )
                logger.warning(
                    "the store of %s was closed while a call was still in flight; reopening it",
                    self.where,
                )
                # The schema was current when the store opened; only the connections go.
                self._runner = self._new_runner(make_engine(self.url))
                self._closed = False
            return self._runner

    @property
    def _conn(self) -> sqlite3.Connection | None:
        """SQLite: the calling thread's own DBAPI connection (upstream code reaches for it);
        None once the store is closed (the next call reopens it).

        Statements sent on it run outside the store's transactions; prefer
        :meth:`_execute_write` for writes. Server databases have no such connection.
        """
        if not isinstance(self._runner, SqliteThreadRunner):
            raise AttributeError(f"{self.where} is not SQLite: it has no _conn; use _execute_write")
        if self._closed:
            return None
        runner = self._live_runner()
        assert isinstance(runner, SqliteThreadRunner)
        return runner.thread_connection()

    @_conn.setter
    def _conn(self, value: None) -> None:
        """``db._conn = None``, as upstream's code and tests close its connection under a
        running store: the store is closed (its next call reopens it, with the warning)."""
        if value is not None:
            raise InvalidInputError("_conn can only be set to None (which closes the store)")
        self.close()

    def _run(self, plan: Plan[T]) -> T:
        if plan.writes and self.read_only:
            raise self._refuse_write()
        with self._lock:
            return self._on_runner(lambda runner: runner.run(plan))

    def _refuse_write(self) -> ReadOnlyDatabaseError:
        return ReadOnlyDatabaseError(f"this store of {self.where} was opened read-only")

    def _execute_write(self, fn: Callable[[WriteConnection], T]) -> T:
        """Run ``fn(conn)`` in one write transaction: committed on return, rolled back on error,
        run again whole on lock contention. ``conn.execute`` takes SQLAlchemy statements or raw
        SQL in the driver's paramstyle (``?`` on SQLite)."""
        if self.read_only:
            raise self._refuse_write()
        with self._lock:
            return self._on_runner(lambda runner: runner.run_callable(fn))

    def _set_session_title(self, session_id: str, title: str | None, *, source: str) -> bool:
        """Upstream's one title write, whose tests call it: ``set_session_title`` for the
        'user' source, ``set_auto_title`` for any other."""
        if source == titles.TITLE_SOURCE_USER:
            return self.set_session_title(session_id, title)
        return self.set_auto_title(session_id, title, source=source)

    # -- written here rather than generated (surface.HAND_WRITTEN) ----------------------------

    def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        # Declared (and documented) in surface.Store; the patience sleeps in this thread.
        plan = self._plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
        if self._run(plan):
            return True
        for delay in lease_patience(patience_s):
            time.sleep(delay)
            if self._run(
                self._plans.try_acquire_session_turn_lease(session_id, holder, ttl_seconds)
            ):
                return True
        return False

    def acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        wait_seconds: float = 1800.0,
        poll_interval_seconds: float = 1.0,
        on_wait: Callable[[float], object] | None = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Callable[[], object] | None = None,
        acquire_patience_s: float = 0.5,
        on_contended: Callable[[], object] | None = None,
        wait_notice_backoff: float = 2.0,
        wait_notice_max_interval_seconds: float = 300.0,
    ) -> bool:
        # Declared (and documented) in surface.Store; the wait sleeps in this thread.
        wait = LeaseWait.configure(
            wait_seconds=wait_seconds,
            poll_interval_seconds=poll_interval_seconds,
            wait_notice_interval_seconds=wait_notice_interval_seconds,
            wait_notice_backoff=wait_notice_backoff,
            wait_notice_max_interval_seconds=wait_notice_max_interval_seconds,
            on_wait=on_wait,
            should_abort=should_abort,
            on_contended=on_contended,
            acquire_patience_s=acquire_patience_s,
        )
        attempt = functools.partial(
            self._plans.try_acquire_session_turn_lease, session_id, holder, ttl_seconds
        )
        attempt()  # bad input is refused before the first callback
        schedule = wait.run()
        try:
            request = next(schedule)
            while True:
                if request is ATTEMPT:
                    try:
                        taken: bool | None = self._run(attempt())
                    except DatabaseBusyError:
                        taken = None
                    request = schedule.send(taken)
                else:
                    time.sleep(request)
                    request = schedule.send(None)
        except StopIteration as finished:
            return bool(finished.value)

    def handoff_change_token(self) -> int | None:
        # Declared in surface.Store: the runner's PRAGMA data_version (SQLite), None on servers.
        return self._on_runner(lambda runner: runner.change_token())

    # Retention (declared in surface_sessions.SessionSurface): the schedules are the plans';
    # these only drive them.

    def _sweep(self, sweep: PruneSweep) -> PruneTotals:
        schedule = sweep.run()
        try:
            request = next(schedule)
            while True:
                if isinstance(request, Plan):
                    request = schedule.send(self._run(request))
                else:
                    time.sleep(request)
                    request = schedule.send(None)
        except StopIteration as finished:
            totals: PruneTotals = finished.value
            return totals

    def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: str | os.PathLike[str] | None = None,
        exclude_active_write_guards: bool = False,
        **filters: Any,
    ) -> int:
        sweep = self._plans.prune_sweep(
            older_than_days, source, sessions_dir=sessions_dir, filters=filters
        )
        if self.read_only:
            raise self._refuse_write()
        return self._sweep(sweep).sessions

    def prune_report(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        *,
        dry_run: bool = False,
        sessions_dir: str | os.PathLike[str] | None = None,
        batch_size: int = PRUNE_BATCH,
        sample: int = 0,
        **filters: Any,
    ) -> dict[str, Any]:
        sweep = self._plans.prune_sweep(
            older_than_days,
            source,
            sessions_dir=sessions_dir,
            dry_run=dry_run,
            batch_size=batch_size,
            sample=sample,
            filters=filters,
            operation="prune_report",
        )
        if self.read_only and not sweep.dry_run:
            raise self._refuse_write()
        return self._sweep(sweep).report()

    def vacuum(self) -> int:
        if self.read_only:
            raise self._refuse_write()
        sql = statements.maintenance_sql(self.url.get_backend_name())
        with self._lock:
            self._on_runner(lambda runner: runner.maintain(sql))
        return 0

    def _freelist_ratio(self) -> float | None:
        """SQLite's share of free pages (what a VACUUM gives back); None on a server."""
        ratio = self.storage_report().get("free_ratio")
        return None if ratio is None else float(ratio)

    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: str | os.PathLike[str] | None = None,
        min_vacuum_interval_days: int = 30,
        min_vacuum_freelist_ratio: float = AUTO_VACUUM_MIN_FREELIST_RATIO,
    ) -> dict[str, Any]:
        schedule = auto_maintenance(
            retention_days=retention_days,
            min_interval_hours=min_interval_hours,
            vacuum=vacuum,
            sessions_dir=sessions_dir,
            min_vacuum_interval_days=min_vacuum_interval_days,
            min_vacuum_freelist_ratio=min_vacuum_freelist_ratio,
            clock=self._plans.clock,
        )
        try:
            call = next(schedule)
            while True:
                try:
                    answer = getattr(self, call.name)(*call.args, **call.kwargs)
                except Exception as exc:
                    call = schedule.throw(exc)
                else:
                    call = schedule.send(answer)
        except StopIteration as finished:
            report: dict[str, Any] = finished.value
            return report


if TYPE_CHECKING:
    _surface: type[Store] = SessionDB
