"""The fast runners (``execution.py``) read a few attributes of SQLAlchemy's compiler
(``positiontup``, ``binds``, ``bind_names``, ``escaped_bind_names``, ``literal_execute_params``,
``post_compile_params``) to send each statement's SQL and parameters themselves. pyproject.toml
pins SQLAlchemy to the minor release these tests pass on; when an upgrade changes what those
attributes hold, these fail loudly: the shape check names the attribute, and the comparison
shows that the runner no longer sends what SQLAlchemy itself would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.sql.compiler import SQLCompiler

from hermes_state.engine import Patience, with_driver
from hermes_state.execution import PostgresRunner, SqliteThreadRunner
from hermes_state.plans import Ownership, PlanBook, Step
from hermes_state.statements import Capabilities
from tests.conftest import database_at_head

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")


def _book() -> PlanBook:
    return PlanBook(
        clock=time.time,
        actor="gw",
        ownership=Ownership.configure("gw", 30.0),
        announce=lambda: None,
    )


#: Plans whose first statements cover every kind of bind the builders use: required values,
#: constants, expanding-free IN lists, RETURNING and CTEs.
PLANS: list[Callable[[PlanBook], Any]] = [
    lambda book: book.create_session("s1", "cli", title="t"),
    lambda book: book.append_message("s1", "user", "hello", tool_calls=[{"id": "c"}]),
    lambda book: book.request_handoff("s1", "telegram"),
    lambda book: book.claim_handoff("s1"),
    lambda book: book.claim_next_handoffs(5, exclude=["s9"], turn_gateway="gw"),
    lambda book: book.finish_handoffs({"s1": None, "s2": "refused"}),
    lambda book: book.renew_handoff_leases(["s1", "s2"]),
    lambda book: book.reclaim_stale_running_handoffs("stranded"),
    lambda book: book.list_handoffs("pending", limit=10, search="s"),
    lambda book: book.get_transcripts(["s1", "s2"]),
    lambda book: book.handoff_stats(),
]


def first_steps(dialect: Any) -> Iterator[Step]:
    caps = Capabilities.of(dialect)
    for make in PLANS:
        yield next(make(_book()).start(caps))


def _captured(engine: sqlalchemy.Engine, step: Step) -> tuple[str, Any]:
    """What SQLAlchemy's own execution sends for ``step``, rolled back."""
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with engine.connect() as connection:
            try:
                connection.execute(step.statement, dict(step.params))
            finally:
                connection.rollback()
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    return sent[0]


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql"])
def test_the_compiler_attributes_the_runners_read_keep_their_shape(dialect_name: str) -> None:
    dialect = sqlalchemy.create_mock_engine(
        URL.create("sqlite" if dialect_name == "sqlite" else "postgresql+psycopg"), lambda *a: None
    ).dialect
    for step in first_steps(dialect):
        compiled = step.statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        assert isinstance(compiled.string, str)
        assert isinstance(compiled.binds, dict)
        assert isinstance(compiled.bind_names, dict)
        assert all(isinstance(name, str) for name in compiled.bind_names.values())
        assert isinstance(compiled.escaped_bind_names, dict)
        assert isinstance(compiled.literal_execute_params, frozenset | set)
        assert isinstance(compiled.post_compile_params, frozenset | set)
        if dialect_name == "sqlite":  # qmark: the order of the ? marks
            assert isinstance(compiled.positiontup, list)
            assert set(compiled.positiontup) <= set(compiled.binds)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_runners_send_what_sqlalchemy_itself_would(backend: str, tmp_path: Any) -> None:
    with database_at_head(backend, tmp_path) as url:
        engine = create_engine(with_driver(url, asyncio=False))
        runner_type = SqliteThreadRunner if backend == "sqlite" else PostgresRunner
        runner = runner_type(engine, Patience(1.0), "test")
        try:
            for step in first_steps(engine.dialect):
                fast = runner._compile(step.statement)
                sql, parameters = _captured(engine, step)
                assert fast.sql == sql
                ours = fast.parameters(step.params)
                if backend == "sqlite":
                    assert tuple(ours) == tuple(parameters)
                else:
                    assert ours == dict(parameters)
        finally:
            runner.close()
            engine.dispose()
