"""The operator's command line as a user types it: global options in either place,
``--version``, shell completion, one result document per command, yes/no switches, bounded
numbers, friendly URLs and errors, following a handoff (Ctrl-C included, as a real SIGINT),
looking at sessions, and ``--dry-run`` on everything that writes.

``run`` goes through ``hermes_state.cli.main`` in this process (the console script calls the
same function); ``run_console`` and ``Waiter`` start the installed ``hermes-state`` script, for
what only a process shows: each command family's exit status and streams once, ``--version``,
completion, closed pipes, a terminal and SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pty
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, schema
from hermes_state.cli import build_parser
from hermes_state.cli.handoff import WITHDRAWN_ERROR
from hermes_state.engine import ENV_URL, resolve_url
from hermes_state.models import sessions as sessions_table
from tests.conftest import require_server, throwaway_database, url_arg
from tests.support.digest import database_digest
from tests.support.processes import CONSOLE, DEADLINE, console, in_process, wait_until
from tests.support.stores import put

# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db(path: Path) -> Iterator[SessionDB]:
    with SessionDB(path, actor="api") as store:
        yield store


def digest(path: Path) -> str:
    return database_digest(resolve_url(path))


#: ``hermes-state ARGV...`` through ``main()`` in this process.
run = in_process


def run_console(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``hermes-state ARGV...`` through the installed console script, in a process of its own."""
    result = console(*argv, env=None if env is None else {**os.environ, **env})
    assert "Traceback" not in result.stderr, result.stderr
    return result


def leaf_commands() -> list[tuple[str, ...]]:
    """Every command path that runs something (``db upgrade``, ``handoff list``, ``demo``...)."""
    found: list[tuple[str, ...]] = []
    pending: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = [((), build_parser())]
    while pending:
        where, parser = pending.pop()
        children = [
            action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
        ]
        if not children and where:
            found.append(where)
        for action in children:
            pending.extend(((*where, name), child) for name, child in action.choices.items())
    return sorted(found)


# -- 1. options where people type them ---------------------------------------------------------


def test_global_options_work_after_the_command(path: Path) -> None:
    upgraded = run_console("db", "upgrade", "--url", str(path), "-v")
    assert upgraded.returncode == 0, upgraded.stderr
    created = run_console("session", "create", "s1", "--url", str(path), "--json", "-v")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"id": "s1", "created": True}
    again = run_console("db", "upgrade", "--url", str(path))
    assert again.returncode == 0, again.stderr
    assert "already at" in again.stdout
    # ...and before it, and on the command group in between.
    assert run_console("--url", str(path), "--json", "handoff", "show", "s1").returncode == 0
    shown = run_console("handoff", "--url", str(path), "show", "s1", "--json")
    assert json.loads(shown.stdout)["state"] is None


def test_the_option_after_the_command_wins(path: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    assert run("--url", str(other), "db", "upgrade", "--url", str(path)).returncode == 0
    assert path.exists()
    assert not other.exists()


def test_version() -> None:
    result = run_console("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("hermes-state ")
    assert result.stdout.split()[1][0].isdigit()


def test_shell_completion_names_the_commands(tmp_path: Path) -> None:
    answer = tmp_path / "completions"
    line = "hermes-state hand"
    result = subprocess.run(
        [CONSOLE],
        env={
            **os.environ,
            "_ARGCOMPLETE": "1",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        },
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "handoff" in answer.read_text()
    registered = subprocess.run(
        [str(Path(CONSOLE).with_name("register-python-argcomplete")), "hermes-state"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    assert "hermes-state" in registered.stdout


# -- 2. one output model -----------------------------------------------------------------------


def command_help(where: tuple[str, ...]) -> str:
    """The help of one command, from the parsers (the console script prints the same)."""
    parser = build_parser()
    for name in where:
        parser = next(
            action.choices[name]
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
        )
    return parser.format_help()


def test_every_command_has_json() -> None:
    commands = leaf_commands()
    assert len(commands) >= 20
    for where in commands:
        assert "--json" in command_help(where), where
    # What the console script prints is what the parsers say.
    assert "--json" in run_console("handoff", "wait", "--help").stdout


def test_every_command_prints_one_json_document(path: Path, db: SessionDB, tmp_path: Path) -> None:
    put(db, "s1", "failed")
    db.append_message("s1", "user", "hello")
    url = ("--url", str(path))
    runs = [
        ("db", "current"),
        ("db", "history"),
        ("db", "check"),
        ("db", "upgrade"),
        ("session", "create", "s2"),
        ("session", "list"),
        ("session", "show", "s1"),
        ("session", "messages", "s1"),
        ("session", "search", "hello"),
        ("handoff", "show", "s1"),
        ("handoff", "list"),
        ("handoff", "history", "s1"),
        ("handoff", "stats"),
        ("handoff", "reclaim", "--dry-run"),
        ("handoff", "prune-events", "--older-than", "1", "--dry-run"),
        ("handoff", "retry", "s1", "--dry-run"),
        ("handoff", "fail", "s1", "why", "--dry-run"),
        ("handoff", "request", "s2", "slack"),
        ("handoff", "fail", "s2", "changed my mind"),
        ("handoff", "retry", "s2"),
        ("handoff", "wait", "s1"),  # failed: the document says so, exit 1
        ("watch", "--once", "--exec", "cat > /dev/null"),
        ("db", "copy", "--to", str(tmp_path / "copy.db")),
        ("db", "downgrade", "head"),
    ]
    for argv in runs:
        result = run(*argv, *url, "--json")
        assert result.returncode in (0, 1), (argv, result.stderr)
        document = json.loads(result.stdout)
        assert isinstance(document, dict | list), argv


def test_an_error_is_a_json_document_too(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    result = run_console("handoff", "list", "--url", str(missing), "--json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["exit_code"] == 1
    assert document["error"].startswith(f"there is no database at {missing}")
    assert result.stderr == f"hermes-state: {document['error']}\n"
    bad = run_console("handoff", "list", "--json", env={"HERMES_STATE_VERBOSE": "maybe"})
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["exit_code"] == 2


def test_tables_have_a_header_row(path: Path, db: SessionDB) -> None:
    put(db, "s1", "pending")
    for argv, header in [
        (("handoff", "list"), ["SESSION", "STATE", "PLATFORM", "OWNER", "ERROR"]),
        (("session", "list"), ["SESSION", "SOURCE", "STARTED", "HANDOFF", "PLATFORM", "TITLE"]),
        (("handoff", "history", "s1"), ["WHEN", "FROM", "TO", "BY", "ATTEMPT", "DETAIL"]),
        (("handoff", "stats"), ["STATE", "COUNT"]),
    ]:
        result = run(*argv, "--url", str(path))
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0].split() == header


def many_handoffs(db: SessionDB, count: int) -> None:
    """``count`` pending rows with long ids: a listing far larger than a pipe's buffer."""
    rows = [
        {"id": f"{index:06}-{'x' * 90}", "source": "cli", "started_at": float(index)}
        for index in range(count)
    ]
    statement = sessions_table.insert().values(handoff_state="pending", handoff_platform="telegram")
    db._execute_write(lambda connection: connection.execute(statement, rows))


def test_a_reader_that_stops_early_ends_the_command_quietly(path: Path, db: SessionDB) -> None:
    many_handoffs(db, 3000)  # ~300 KB of table: the command is still writing when head is gone
    piped = subprocess.run(
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            '"$0" handoff list --limit 0 --url "$1" | head -1',
            CONSOLE,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert piped.stdout.split() == ["SESSION", "STATE", "PLATFORM", "OWNER", "ERROR"]
    assert piped.stderr == ""
    assert piped.returncode == 141  # what the shell says of `seq 1000000 | head -1` too


@pytest.mark.parametrize(
    "argv",
    [("db", "history"), ("handoff", "list", "--json"), ("handoff", "show", "x"), ("--help",)],
    ids=" ".join,
)
def test_output_into_a_closed_pipe_is_quiet(
    path: Path, db: SessionDB, argv: tuple[str, ...]
) -> None:
    put(db, "x", "pending")
    reading, writing = os.pipe()
    os.close(reading)  # the reader is gone before the first byte
    try:
        ended = subprocess.run(
            [CONSOLE, *argv, "--url", str(path)] if argv != ("--help",) else [CONSOLE, *argv],
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
    finally:
        os.close(writing)
    assert ended.stderr == ""
    # argparse's own --help swallows the error and exits 0; every command says 141.
    assert ended.returncode == (0 if argv == ("--help",) else 141)


def test_a_demo_cut_short_leaves_no_temporary_database(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    reading, writing = os.pipe()
    os.close(reading)  # `hermes-state demo | true`: the first line already finds no reader
    try:
        ended = subprocess.run(
            [CONSOLE, "demo"],
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(scratch)},
            timeout=DEADLINE,
            check=False,
        )
    finally:
        os.close(writing)
    assert ended.returncode == 141
    assert ended.stderr == ""
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("value", "as_json"),
    [
        ("1", True),
        ("TRUE", True),
        ("Yes", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("NO", False),
        ("Off", False),
    ],
)
def test_yes_no_switches(path: Path, db: SessionDB, value: str, as_json: bool) -> None:
    put(db, "s1", "pending")
    result = run("handoff", "show", "s1", "--url", str(path), env={"HERMES_STATE_JSON": value})
    assert result.returncode == 0, result.stderr
    if as_json:
        assert json.loads(result.stdout)["state"] == "pending"
    else:
        assert result.stdout.startswith("s1: pending")


@pytest.mark.parametrize(
    "variable", ["HERMES_STATE_JSON", "HERMES_STATE_VERBOSE", "HERMES_STATE_DRY_RUN"]
)
def test_a_yes_no_switch_refuses_anything_else(path: Path, db: SessionDB, variable: str) -> None:
    put(db, "s1", "pending")
    before = digest(path)
    result = run("handoff", "fail", "s1", "x", "--url", str(path), env={variable: "banana"})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"hermes-state: {variable}='banana' is not a yes/no value; "
        "use 1/0, true/false, yes/no or on/off"
    )
    assert digest(path) == before


# -- 3. bounded numbers, friendly URLs ---------------------------------------------------------


def numeric_options() -> list[tuple[tuple[str, ...], str, str]]:
    found = []
    pending: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = [((), build_parser())]
    while pending:
        where, parser = pending.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(((*where, name), child) for name, child in action.choices.items())
            elif action.type is not None and action.metavar in ("N", "S", "DAYS"):
                found.append((where, max(action.option_strings, key=len), action.help or ""))
    return found


def test_every_numeric_option_documents_its_range() -> None:
    options = numeric_options()
    assert len(options) >= 10
    for where, option, help_text in options:
        assert " up to " in help_text, (where, option, help_text)


@pytest.mark.parametrize(
    "argv",
    [
        ("handoff", "list", "--limit", "99999999999999999999"),
        ("handoff", "list", "--limit", "-1"),
        ("session", "list", "--limit", "1000001"),
        ("handoff", "prune-events", "--older-than", "1e400"),
        ("handoff", "prune-events", "--older-than", "36501"),
        ("handoff", "wait", "s1", "--pending-timeout", "0"),
        ("handoff", "request", "s1", "p", "--running-timeout", "nan"),
        ("db", "copy", "--to", "/tmp/x.db", "--batch-size", "0"),
        ("watch", "--once", "--exec", "true", "--max-concurrency", "1001"),
        ("watch", "--once", "--exec", "true", "--lease-seconds", "inf"),
    ],
    ids=" ".join,
)
def test_out_of_range_is_a_usage_error(path: Path, db: SessionDB, argv: tuple[str, ...]) -> None:
    put(db, "s1", "pending")
    before = digest(path)
    result = run(*argv, "--url", str(path))
    assert result.returncode == 2, result.stderr
    assert "error: argument" in result.stderr
    assert digest(path) == before


def test_an_out_of_range_environment_value_is_a_usage_error(path: Path, db: SessionDB) -> None:
    result = run(
        "handoff", "list", "--url", str(path), env={"HERMES_STATE_LIST_LIMIT": "10000000000"}
    )
    assert result.returncode == 2
    assert result.stderr.startswith("hermes-state: argument --limit: expected")
    assert "(from HERMES_STATE_LIST_LIMIT)" in result.stderr


def test_an_empty_url_is_its_own_error() -> None:
    result = run("--url", "", "handoff", "list")
    assert result.returncode == 2
    assert "--url is empty" in result.stderr
    assert "in-memory" not in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_an_unreachable_server_is_one_line_with_the_url_as_typed() -> None:
    typed = "postgres://hermes:s3cret@127.0.0.1:1/hermes"
    result = run("handoff", "list", "--url", typed)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "postgres://hermes:***@127.0.0.1:1/hermes" in lines[0]
    assert "s3cret" not in lines[0]
    assert "+psycopg" not in lines[0]
    assert "?." not in lines[0]
    assert "Check the URL" in lines[0]


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)], ids=["copy", "copy --dry-run"])
def test_copy_errors_quote_the_target_as_typed(
    path: Path, db: SessionDB, dry_run: tuple[str, ...]
) -> None:
    typed = "postgres://hermes:s3cret@127.0.0.1:1/hermes"
    unreachable = run("db", "copy", *dry_run, "--url", str(path), "--to", typed)
    assert unreachable.returncode == 1
    (line,) = unreachable.stderr.splitlines()
    assert "cannot open postgres://hermes:***@127.0.0.1:1/hermes" in line
    assert "+psycopg" not in line
    require_server("mysql")
    with throwaway_database("mysql") as url:
        schema.upgrade(url, "0002_handoff_leases")  # behind head, with tables: refused
        behind = url_arg(url)
        assert behind.startswith("mysql://")
        refused = run("db", "copy", *dry_run, "--url", str(path), "--to", behind)
        assert refused.returncode == 1
        (line,) = refused.stderr.splitlines()
        assert f"run `hermes-state db upgrade --url {behind}` and try again" in line
        assert "+pymysql" not in line


def test_postgres_scheme_is_postgresql() -> None:
    require_server("postgresql")
    with throwaway_database("postgresql") as url:
        typed = url_arg(url).replace("postgresql://", "postgres://", 1)
        assert typed.startswith("postgres://")
        upgraded = run("db", "upgrade", "--url", typed)
        assert upgraded.returncode == 0, upgraded.stderr
        assert run("session", "create", "s1", "--url", typed).returncode == 0
        listed = run("session", "list", "--url", typed, "--json")
        assert [row["id"] for row in json.loads(listed.stdout)] == ["s1"]


# -- 4. waiting as users expect ----------------------------------------------------------------


class Waiter:
    """A ``hermes-state ... --wait`` process; with ``terminal`` its stderr is a pseudo-terminal
    whose output is collected."""

    def __init__(self, *argv: str, terminal: bool = False) -> None:
        self.screen = ""
        self._master: int | None = None
        stderr: Any = subprocess.PIPE
        if terminal:
            self._master, follower = pty.openpty()
            stderr = follower
        self.process = subprocess.Popen(
            [CONSOLE, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        if terminal:
            os.close(follower)
            threading.Thread(target=self._read_terminal, daemon=True).start()

    def _read_terminal(self) -> None:
        assert self._master is not None
        with contextlib.suppress(OSError):
            while chunk := os.read(self._master, 4096):
                self.screen += chunk.decode("utf-8", "replace")

    def wait_for(self, text: str) -> None:
        """Wait until the terminal shows ``text``; fail if the process exits first."""
        wait_until(lambda: text in self.screen or self.process.poll() is not None, repr(text))
        assert text in self.screen, self.screen

    def finish(self) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=DEADLINE)
        if self._master is not None:
            wait_until(lambda: "\n" in self.screen[-200:], "the terminal's last line")
        return self.process.returncode, out, err or self.screen


def state_of(db: SessionDB, session_id: str = "s1") -> str | None:
    state = db.get_handoff_state(session_id)
    return None if state is None else state["state"]


def test_request_wait_delivered(path: Path, db: SessionDB) -> None:
    db.create_session("s1", "cli")
    waiter = Waiter("handoff", "request", "s1", "telegram", "--wait", "--url", str(path))
    wait_until(lambda: state_of(db) == "pending", "the request")
    assert db.claim_handoff("s1")
    assert db.complete_handoff("s1")
    code, out, err = waiter.finish()
    assert code == 0, err
    assert out == "handoff of 's1' delivered to telegram\n"
    assert err == ""  # not a terminal: quiet


def test_request_wait_on_a_terminal_shows_phase_and_time(path: Path, db: SessionDB) -> None:
    db.create_session("s1", "cli")
    waiter = Waiter(
        "handoff", "request", "s1", "telegram", "--wait", "--url", str(path), terminal=True
    )
    waiter.wait_for("waiting for a gateway")
    gateway = SessionDB(path, owner="gw-7", lease_seconds=60)
    try:
        assert gateway.claim_handoff("s1")
        waiter.wait_for("claimed by gw-7")
        assert gateway.fail_handoff("s1", "slack is down")
    finally:
        gateway.close()
    code, _out, screen = waiter.finish()
    assert code == 1
    assert "hermes-state: handoff of 's1' failed: slack is down" in screen
    assert " s" in screen.split("waiting for a gateway", 1)[1]  # the elapsed time


def test_ctrl_c_while_pending_withdraws_the_request(path: Path, db: SessionDB) -> None:
    db.create_session("s1", "cli")
    waiter = Waiter(
        "handoff", "request", "s1", "telegram", "--wait", "--url", str(path), terminal=True
    )
    waiter.wait_for("waiting for a gateway")  # shown once Ctrl-C is the waiter's to handle
    waiter.process.send_signal(signal.SIGINT)
    code, _out, err = waiter.finish()
    assert code == 130
    assert "withdrawn" in err
    assert db.get_handoff_state("s1") == {
        "state": "failed",
        "platform": "telegram",
        "error": WITHDRAWN_ERROR,
    }
    last = db.handoff_history("s1")[-1]
    assert (last["from_state"], last["to_state"], last["actor"]) == ("pending", "failed", "cli")
    assert last["detail"] == WITHDRAWN_ERROR
    # Withdrawn means the user may ask again at once.
    assert db.request_handoff("s1", "telegram")


def test_ctrl_c_after_a_claim_leaves_the_delivery_alone(path: Path, db: SessionDB) -> None:
    db.create_session("s1", "cli")
    waiter = Waiter(
        "handoff", "request", "s1", "telegram", "--wait", "--url", str(path), terminal=True
    )
    waiter.wait_for("waiting for a gateway")
    with SessionDB(path, owner="gw-2", lease_seconds=60) as gateway:
        assert gateway.claim_handoff("s1")
    waiter.wait_for("claimed by gw-2")
    waiter.process.send_signal(signal.SIGINT)
    code, _out, err = waiter.finish()
    assert code == 130
    assert "left as it is" in err
    assert "running" in err
    assert state_of(db) == "running"


def test_pending_timeout_fails_only_a_pending_row(path: Path, db: SessionDB) -> None:
    db.create_session("s1", "cli")
    result = run(
        "handoff", "request", "s1", "telegram", "--wait", "--pending-timeout", "0.3",
        "--url", str(path), "--json",
    )  # fmt: skip
    assert result.returncode == 3
    document = json.loads(result.stdout)
    assert document["outcome"] == "timed_out"
    assert state_of(db) == "failed"
    assert "0.3 s" in db.get_handoff_state("s1")["error"]  # type: ignore[index]


def test_wait_fails_a_request_no_gateway_claimed(path: Path, db: SessionDB) -> None:
    """`handoff wait` does what its help says for a pending row nobody claims in time: fails
    it (a compare-and-swap on pending) and exits 3, in text and in JSON."""
    for session_id, json_flag in (("s1", ()), ("s2", ("--json",))):
        put(db, session_id, "pending")
        result = run(
            "handoff", "wait", session_id, "--pending-timeout", "0.3", "--url", str(path),
            *json_flag,
        )  # fmt: skip
        assert result.returncode == 3, result.stderr
        assert "read-only" not in result.stderr
        assert state_of(db, session_id) == "failed"
    assert json.loads(result.stdout)["outcome"] == "timed_out"


def test_running_timeout_leaves_the_row_to_its_gateway(path: Path, db: SessionDB) -> None:
    put(db, "s1", "running")
    result = run("handoff", "wait", "s1", "--running-timeout", "0.3", "--url", str(path))
    assert result.returncode == 3
    assert "left to its gateway" in result.stderr
    assert state_of(db) == "running"


def test_wait_follows_an_existing_request(path: Path, db: SessionDB) -> None:
    put(db, "s1", "pending")
    waiter = Waiter("handoff", "wait", "s1", "--url", str(path), "--json")
    time.sleep(0.3)
    assert db.claim_handoff("s1")
    assert db.complete_handoff("s1")
    code, out, err = waiter.finish()
    assert code == 0, err
    assert json.loads(out)["outcome"] == "delivered"

    put(db, "s2", "failed")
    failed = run("handoff", "wait", "s2", "--url", str(path))
    assert failed.returncode == 1
    assert "failed: the platform said no" in failed.stderr
    put(db, "s3", None)
    assert run("handoff", "wait", "s3", "--url", str(path)).returncode == 1
    assert run("handoff", "wait", "ghost", "--url", str(path)).returncode == 1


def test_ctrl_c_on_handoff_wait_never_withdraws(path: Path, db: SessionDB) -> None:
    put(db, "s1", "pending")
    waiter = Waiter("handoff", "wait", "s1", "--url", str(path), terminal=True)
    waiter.wait_for("waiting for a gateway")
    waiter.process.send_signal(signal.SIGINT)
    code, _out, err = waiter.finish()
    assert code == 130
    assert "left as it is" in err
    assert state_of(db) == "pending"


def test_retry_wait(path: Path, db: SessionDB) -> None:
    put(db, "s1", "failed")
    waiter = Waiter("handoff", "retry", "s1", "--wait", "--platform", "slack", "--url", str(path))
    wait_until(lambda: state_of(db) == "pending", "the retry")
    assert db.claim_handoff("s1")
    assert db.complete_handoff("s1")
    code, out, err = waiter.finish()
    assert code == 0, err
    assert "delivered to slack" in out


# -- 5. sessions you can inspect ---------------------------------------------------------------


@pytest.fixture
def sessions(db: SessionDB) -> SessionDB:
    day = 86400.0
    now = time.time()
    db.create_session("old", "cli", started_at=now - 10 * day, title="ten days ago")
    db.create_session("tg", "telegram", started_at=now - 2 * day)
    db.create_session("new", "cli", started_at=now - 60, title="a minute ago")
    db.request_handoff("new", "discord")
    db.append_message("new", "user", "Summarise it.")
    db.append_message("new", "assistant", "Here it is.")
    return db


@pytest.mark.usefixtures("sessions")
def test_session_list(path: Path) -> None:
    def ids(*argv: str) -> list[str]:
        result = run("session", "list", *argv, "--url", str(path), "--json")
        assert result.returncode == 0, result.stderr
        return [row["id"] for row in json.loads(result.stdout)]

    assert ids() == ["new", "tg", "old"]
    assert ids("--source", "cli") == ["new", "old"]
    assert ids("--handoff-state", "pending") == ["new"]
    assert ids("--handoff-state", "failed") == []
    assert ids("--since", "3d") == ["new", "tg"]
    assert ids("--since", "1h") == ["new"]
    assert ids("--since", time.strftime("%Y-%m-%d", time.localtime(time.time() - 5 * 86400))) == [
        "new",
        "tg",
    ]
    assert ids("--limit", "2") == ["new", "tg"]
    assert ids("--limit", "0") == ["new", "tg", "old"]
    text = run("session", "list", "--url", str(path))
    assert [line.split()[0] for line in text.stdout.splitlines()] == ["SESSION", "new", "tg", "old"]
    bad = run("session", "list", "--since", "last tuesday", "--url", str(path))
    assert bad.returncode == 2
    assert run("session", "list", "--handoff-state", "lost", "--url", str(path)).returncode == 2


@pytest.mark.usefixtures("sessions")
def test_session_show(path: Path) -> None:
    result = run("session", "show", "new", "--url", str(path), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["session"]["id"] == "new"
    assert document["session"]["title"] == "a minute ago"
    assert document["handoff"] == {"state": "pending", "platform": "discord", "error": None}
    assert document["messages"] == 2
    assert [e["to_state"] for e in document["recent_events"]] == ["pending"]
    text = run("session", "show", "new", "--url", str(path)).stdout
    assert "handoff_state" in text
    assert "requested for discord" in text
    ghost = run("session", "show", "ghost", "--url", str(path))
    assert ghost.returncode == 1
    assert "no session 'ghost'" in ghost.stderr


@pytest.mark.usefixtures("sessions")
def test_session_messages(path: Path, db: SessionDB) -> None:
    result = run("session", "messages", "new", "--url", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(json.dumps(db.get_messages("new"), default=str))
    db.append_message("new", "user", "two\nlines")
    text = run("session", "messages", "new", "--url", str(path)).stdout.splitlines()
    assert text[0].startswith("#")
    assert text[0].endswith("  user")
    assert text[1:2] == ["    Summarise it."]
    assert text[2].endswith("  assistant")
    assert text[-2:] == ["    two", "    lines"]
    assert "no messages" in run("session", "messages", "tg", "--url", str(path)).stdout
    assert run("session", "messages", "ghost", "--url", str(path)).returncode == 1


def test_session_reads_create_no_database(path: Path) -> None:
    for argv in (("list",), ("show", "s1"), ("messages", "s1")):
        result = run_console("session", *argv, "--url", str(path))
        assert result.returncode == 1
        assert "db upgrade" in result.stderr
    assert not path.exists()


# -- 6. operators are told everything ----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "verdict"),
    [
        (("handoff", "request", "done", "slack", "--dry-run"), "would request"),
        (("handoff", "request", "busy", "slack", "--dry-run"), "would refuse to request"),
        (("handoff", "fail", "busy", "why", "--dry-run"), "would fail"),
        (("handoff", "fail", "busy", "why", "--only-pending", "--dry-run"), "would refuse"),
        (("handoff", "fail", "done", "why", "--dry-run"), "would refuse to fail"),
        (("handoff", "retry", "broken", "--dry-run"), "would retry"),
        (("handoff", "retry", "done", "--dry-run"), "would refuse to retry"),
        (("handoff", "reclaim", "--dry-run", "--all"), "would fail 1"),
        (("handoff", "prune-events", "--older-than", "0.00001", "--dry-run"), "would delete"),
        (("session", "create", "fresh", "--dry-run"), "would have created"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else value,
)
def test_dry_run_changes_nothing(
    path: Path, db: SessionDB, argv: tuple[str, ...], verdict: str
) -> None:
    put(db, "done", "completed")
    put(db, "busy", "running")
    put(db, "broken", "failed")
    before = digest(path)
    result = run(*argv, "--url", str(path))
    assert result.returncode == 0, result.stderr
    assert verdict in result.stdout
    assert result.stdout.startswith("dry run: ")
    assert digest(path) == before
    document = json.loads(run(*argv, "--url", str(path), "--json").stdout)
    assert document["dry_run"] is True


#: Commands that only read: they need no --dry-run.
READERS = {
    ("db", "current"),
    ("db", "history"),
    ("db", "check"),
    ("session", "list"),
    ("session", "show"),
    ("session", "messages"),
    ("session", "export"),  # reads the database; writes only its own output file
    ("session", "search"),
    ("handoff", "wait"),
    ("handoff", "show"),
    ("handoff", "list"),
    ("handoff", "history"),
    ("handoff", "stats"),
}
#: Writers without a dry run, each for the reason docs/cli.md gives.
NO_DRY_RUN = {("watch",), ("demo",), ("dashboard",)}


def test_every_writing_command_has_dry_run() -> None:
    writers = [where for where in leaf_commands() if where not in READERS | NO_DRY_RUN]
    assert ("db", "upgrade") in writers
    assert ("db", "copy") in writers
    assert len(writers) == 14
    for where in writers:
        assert "--dry-run" in command_help(where), where
    for where in NO_DRY_RUN:
        assert "--dry-run" not in command_help(where), where
    # What main() prints is what the parsers say, for a writer and a non-writer.
    assert "--dry-run" in run("handoff", "prune-events", "--help").stdout
    assert "--dry-run" not in run("watch", "--help").stdout


def test_no_command_but_db_upgrade_creates_a_database(path: Path) -> None:
    """A mistyped --url leaves nothing behind: every command that is not `db upgrade` refuses
    a missing file with the command that creates it, naming the file as it was typed."""
    for argv in (
        ("session", "create", "s1"),
        ("session", "create", "s1", "--dry-run"),
        ("handoff", "request", "s1", "p"),
        ("handoff", "request", "s1", "p", "--dry-run"),
        ("handoff", "retry", "s1", "--dry-run"),
        ("watch", "--exec", "true", "--once"),
    ):
        refused = run(*argv, "--url", str(path))
        assert refused.returncode == 1, (argv, refused.stderr)
        assert "there is no database" in refused.stderr
        assert f"hermes-state db upgrade --url {path}" in refused.stderr
    assert not path.exists()


def test_reclaim_dry_run_names_live_leases_and_the_option(path: Path, db: SessionDB) -> None:
    db.create_session("mine", "cli")
    db.request_handoff("mine", "slack")
    with SessionDB(path, owner="gw-live", lease_seconds=600) as gateway:
        assert gateway.claim_handoff("mine")
    result = run("handoff", "reclaim", "--dry-run", "--url", str(path))
    assert result.returncode == 0
    assert "would fail 0" in result.stdout
    assert "under a live lease" in result.stdout
    assert "only --all would fail them" in result.stdout
    assert "gw-live" in result.stdout

    # The reclaim itself says the same of what it left.
    done = run("handoff", "reclaim", "--url", str(path))
    assert done.returncode == 0, done.stderr
    assert "reclaimed 0" in done.stdout
    assert "1 running handoff(s) are under a live lease" in done.stdout
    assert "gw-live" in done.stdout
    as_json = json.loads(run("handoff", "reclaim", "--url", str(path), "--json").stdout)
    assert as_json == {"reclaimed": [], "under_live_lease": ["mine"]}


def test_copy_progress_shows_rate_and_time_left(tmp_path: Path, path: Path, db: SessionDB) -> None:
    for index in range(60):
        db.create_session(f"s{index:03}", "cli")
    target = tmp_path / "target.db"
    assert run("db", "upgrade", "--url", str(target)).returncode == 0
    waiter = Waiter(
        "db", "copy", "--to", str(target), "--batch-size", "1", "--url", str(path), terminal=True
    )
    code, out, screen = waiter.finish()
    assert code == 0, screen
    assert "rows/s" in screen
    assert "s left" in screen
    assert "sessions" in out


# -- the URL given by the environment is what errors quote -------------------------------------


def test_errors_quote_the_environment_url(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = run("handoff", "list", env={"HERMES_STATE_URL": str(folder)})
    assert result.returncode == 2
    assert str(folder) in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_missing_file_named_by_url_is_quoted_once_as_typed(tmp_path: Path) -> None:
    """The advice repeats the URL as it was typed, not its path with the scheme doubled."""
    typed = f"sqlite:///{tmp_path / 'missing.db'}"
    result = run("db", "current", "--url", typed)
    assert result.returncode != 0
    assert f"there is no database at {typed};" in result.stderr
    assert f"`hermes-state db upgrade --url {typed}` creates one" in result.stderr
    assert "sqlite:///sqlite:" not in result.stderr
    assert not (tmp_path / "missing.db").exists()


def test_ids_print_as_they_are_and_line_up(path: Path, db: SessionDB) -> None:
    """A bidirectional control in an id is shown as its escape (it would reverse the line),
    wide characters take two columns, and --json keeps non-ASCII text readable."""
    for session_id in ("evil\u202eexe.txt", "東京セッション", "emoji🚀", "plain"):
        db.create_session(session_id, "cli")
    listed = run("session", "list", "--url", str(path))
    assert listed.returncode == 0, listed.stderr
    assert "\u202e" not in listed.stdout
    assert "evil\\u202eexe.txt" in listed.stdout
    lines = listed.stdout.splitlines()
    header, rows = lines[0], {line.split()[0]: line for line in lines[1:]}
    # Every row's SOURCE column starts where the header's does, counted in terminal columns.
    column = header.index("SOURCE")
    for session_id, line in rows.items():
        prefix = line[: line.index("  cli") + 2]
        wide = sum(1 for char in prefix if ord(char) > 0x2E7F)
        assert len(prefix) + wide == column, (session_id, line)

    shown = run("handoff", "show", "東京セッション", "--json", "--url", str(path))
    assert shown.returncode == 0, shown.stderr
    assert '"id": "東京セッション"' in shown.stdout


def test_the_demo_refuses_a_database_of_the_users(tmp_path: Path) -> None:
    """The demo kills a gateway mid-delivery on its own temporary database; given --url (or
    HERMES_STATE_URL) it says so instead of ignoring it, and creates nothing."""
    named = tmp_path / "mine.db"
    for argv, env in ((("demo", "--url", str(named)), None), (("demo",), {ENV_URL: str(named)})):
        refused = run(*argv, env=env)
        assert refused.returncode == 2, refused.stderr
        assert "leave out --url" in refused.stderr
    assert not named.exists()


def test_prune_events_shows_its_required_option_as_required(path: Path, db: SessionDB) -> None:
    usage = run("handoff", "prune-events", "--help").stdout
    assert " --older-than DAYS" in usage
    assert "[--older-than DAYS]" not in usage
    missing = run("handoff", "prune-events", "--url", str(path))
    assert missing.returncode == 2
    assert "--older-than" in missing.stderr
    # Its environment twin gives it as well as the option does.
    from_env = run(
        "handoff", "prune-events", "--dry-run", "--url", str(path),
        env={"HERMES_STATE_PRUNE_OLDER_THAN": "30"},
    )  # fmt: skip
    assert from_env.returncode == 0, from_env.stderr
