"""The delivery handler contract of `hermes-state watch`, with real processes.

What a command (``--exec``) or a function (``--handler``) receives after a real claim, what its
exit status does to the row, how its output is logged, and that it never outlives its claim:
killed at ``--exec-timeout``, and killed when its watcher is SIGKILLed. Waits are polls with
deadlines, never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from tests.conftest import SERIAL
from tests.support.processes import (
    Watcher,
    cli_argv,
    kill_group,
    process_is_gone,
    read_pid,
    run_cli,
    wait_until,
)

pytestmark = SERIAL  # leases renewed while a real command runs, timeouts, SIGKILLed watchers

SESSION = "hand-me-off"
OWNER = "gateway-one"

# Records its pid, starts a grandchild (as real delivery scripts do) and waits for it.
HANGS_WITH_A_CHILD = 'echo $$ > "$PID_FILE"; sleep 600 & echo $! > "$PID_FILE.child"; wait'


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session(SESSION, "cli", title="a trip")
        db.append_message(SESSION, "user", "book the train")
        db.append_message(SESSION, "assistant", "which day?")
        assert db.request_handoff(SESSION, "telegram") is True
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PID_FILE": str(tmp_path / "delivery.pid"),
        "OUT": str(tmp_path / "stdin.json"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }


def row(db_path: Path) -> dict[str, Any]:
    """The handoff columns, read with the sqlite3 module (no store kept open meanwhile)."""
    with sqlite3.connect(db_path) as connection:
        connection.row_factory = sqlite3.Row
        found = connection.execute(
            "SELECT handoff_state, handoff_error, handoff_lease_expires_at FROM sessions"
            " WHERE id = ?",
            (SESSION,),
        ).fetchone()
    return dict(found)


def watch(db_path: Path, env: dict[str, str], *argv: str) -> Any:
    return run_cli(db_path, "watch", "--owner", OWNER, *argv, env=env)


def assert_claimed_document(document: dict[str, Any]) -> None:
    assert document["id"] == SESSION
    assert document["title"] == "a trip"
    assert document["handoff_state"] == "running"
    assert document["handoff_owner"] == OWNER
    assert document["handoff_attempt"] == 1
    assert document["handoff_platform"] == "telegram"
    assert document["handoff_lease_expires_at"] > document["handoff_claimed_at"]
    assert [(m["role"], m["content"]) for m in document["messages"]] == [
        ("user", "book the train"),
        ("assistant", "which day?"),
    ]
    assert all(m["session_id"] == SESSION for m in document["messages"])


def test_exec_gets_the_row_as_claimed_its_transcript_and_the_fencing_token(
    db_path: Path, env: dict[str, str], tmp_path: Path
) -> None:
    command = (
        'cat > "$OUT"; env | grep -E "^HERMES_(SESSION_ID|HANDOFF_|PROFILE)" | sort > "$OUT.env";'
        " echo sent to telegram; echo rate limited once, retried >&2"
    )
    result = watch(db_path, env, "--once", "--exec", command)

    assert result.returncode == 0, result.stderr
    assert_claimed_document(json.loads(Path(env["OUT"]).read_text()))
    lines = Path(env["OUT"] + ".env").read_text().splitlines()
    variables = dict(line.split("=", 1) for line in lines)
    assert variables == {
        "HERMES_SESSION_ID": SESSION,
        "HERMES_HANDOFF_PLATFORM": "telegram",
        "HERMES_HANDOFF_ATTEMPT": "1",
        "HERMES_HANDOFF_OWNER": OWNER,
        "HERMES_PROFILE": "",
    }
    assert f"[{SESSION}] sent to telegram" in result.stderr
    assert f"[{SESSION}] rate limited once, retried" in result.stderr
    assert row(db_path)["handoff_state"] == "completed"


def test_handler_gets_the_same_document(db_path: Path, env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "deliverer.py").write_text(
        "import json, os\n"
        "def deliver(row, profile_name):\n"
        "    with open(os.environ['OUT'], 'w') as out:\n"
        "        json.dump({'row': row, 'profile': profile_name}, out, default=str)\n"
    )
    result = watch(db_path, env, "--once", "--handler", "deliverer:deliver")

    assert result.returncode == 0, result.stderr
    received = json.loads(Path(env["OUT"]).read_text())
    assert received["profile"] is None
    assert_claimed_document(received["row"])
    assert row(db_path)["handoff_state"] == "completed"


def test_a_failing_command_fails_the_row_with_the_last_line_of_its_stderr(
    db_path: Path, env: dict[str, str]
) -> None:
    """Progress lines are logged, not shown to the user: the error is the last thing the
    command said (a blank line after it aside)."""
    command = (
        "cat > /dev/null; echo connecting >&2; echo 'telegram: 403 Forbidden' >&2; echo >&2; exit 3"
    )
    result = watch(db_path, env, "--once", "--exec", command)

    assert result.returncode == 0, result.stderr
    assert row(db_path)["handoff_state"] == "failed"
    assert row(db_path)["handoff_error"] == "telegram: 403 Forbidden"
    assert f"[{SESSION}] connecting" in result.stderr
    assert f"[{SESSION}] telegram: 403 Forbidden" in result.stderr


def test_what_a_succeeding_command_says_on_stderr_is_information(
    db_path: Path, env: dict[str, str]
) -> None:
    command = "cat > /dev/null; echo 'uploading 3 messages' >&2; exit 0"
    result = watch(db_path, env, "--once", "--log-format", "json", "--exec", command)

    assert result.returncode == 0, result.stderr
    assert row(db_path)["handoff_state"] == "completed"
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [said] = [entry for entry in logged if entry["message"] == f"[{SESSION}] uploading 3 messages"]
    assert said["level"] == "INFO"


def test_a_command_past_its_timeout_is_killed_with_its_children_and_the_row_fails(
    db_path: Path, env: dict[str, str]
) -> None:
    pid_file = Path(env["PID_FILE"])
    try:
        result = watch(
            db_path, env, "--once", "--exec-timeout", "0.5", "--exec", HANGS_WITH_A_CHILD
        )
        assert result.returncode == 0, result.stderr
        assert row(db_path) == {
            "handoff_state": "failed",
            "handoff_error": "the delivery command timed out after 0.5 s and was killed",
            "handoff_lease_expires_at": None,
        }
        for pid in (read_pid(pid_file), read_pid(Path(f"{pid_file}.child"))):
            assert pid is not None
            wait_until(lambda pid=pid: process_is_gone(pid), f"process {pid} to be gone")
    finally:
        kill_group(read_pid(pid_file))


def test_leases_are_renewed_while_the_command_runs_and_not_after_it_is_killed(
    db_path: Path, env: dict[str, str]
) -> None:
    pid_file = Path(env["PID_FILE"])
    argv = cli_argv(
        db_path,
        "watch",
        "--owner",
        OWNER,
        "--lease-seconds",
        "0.6",
        "--exec-timeout",
        "3",
        "--interval",
        "0.05",
        "--exec",
        HANGS_WITH_A_CHILD,
    )
    watcher = Watcher(argv, env)
    try:
        wait_until(lambda: read_pid(pid_file) is not None, "the delivery to start")
        leases = [row(db_path)["handoff_lease_expires_at"]]

        def renewed_again() -> bool:
            lease = row(db_path)["handoff_lease_expires_at"]
            if lease is not None and lease > leases[-1]:
                leases.append(lease)
            return len(leases) >= 3

        wait_until(renewed_again, "two lease renewals while the command runs")
        wait_until(lambda: row(db_path)["handoff_state"] == "failed", "the timeout")
        assert row(db_path)["handoff_lease_expires_at"] is None
        assert "timed out" in row(db_path)["handoff_error"]
        watcher.assert_alive()
    finally:
        watcher.kill()
        kill_group(read_pid(pid_file))


def test_a_sigkilled_watcher_takes_its_handlers_with_it(db_path: Path, env: dict[str, str]) -> None:
    pid_file = Path(env["PID_FILE"])
    child_file = Path(f"{pid_file}.child")
    argv = cli_argv(db_path, "watch", "--interval", "0.05", "--exec", HANGS_WITH_A_CHILD)
    watcher = Watcher(argv, env)
    try:
        wait_until(
            lambda: read_pid(pid_file) is not None and read_pid(child_file) is not None,
            "the delivery and its child to start",
        )
        shell, child = read_pid(pid_file), read_pid(child_file)
        assert shell is not None
        assert child is not None
        assert not process_is_gone(shell)
        assert not process_is_gone(child)

        watcher.process.kill()  # SIGKILL: no drain, no cleanup of its own
        watcher.wait()

        wait_until(lambda: process_is_gone(shell), "the delivery command to die with its watcher")
        wait_until(lambda: process_is_gone(child), "the command's child to die too")
    finally:
        watcher.kill()
        kill_group(read_pid(pid_file))
    assert row(db_path)["handoff_state"] == "running"  # for the next start's reclaim


# -- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--interval", "0"], "--interval: expected a number of seconds above 0"),
        (["--exec-timeout", "0"], "--exec-timeout: expected a number of seconds above 0"),
        (["--log-format", "xml"], "--log-format: expected text or json"),
    ],
)
def test_bad_watch_options_are_usage_errors(
    db_path: Path, env: dict[str, str], argv: list[str], complaint: str
) -> None:
    result = watch(db_path, env, "--once", "--exec", "true", *argv)

    assert result.returncode == 2
    assert complaint in result.stderr
    assert "Traceback" not in result.stderr


def test_interval_zero_from_the_environment_is_refused_too(
    db_path: Path, env: dict[str, str]
) -> None:
    result = watch(db_path, {**env, "HERMES_STATE_WATCH_INTERVAL": "0"}, "--once", "--exec", "true")

    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_json_logs_are_one_object_per_line(db_path: Path, env: dict[str, str]) -> None:
    result = watch(
        db_path, env, "--once", "--log-format", "json", "--exec", "cat >/dev/null; echo hi"
    )

    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert {"time", "level", "logger", "message"} <= set(records[0])
    messages = [record["message"] for record in records]
    assert f"[{SESSION}] hi" in messages
    assert any(message.startswith("claimed ") and SESSION in message for message in messages)


def test_the_help_shows_every_new_option_with_its_environment_twin(
    db_path: Path, env: dict[str, str]
) -> None:
    result = run_cli(db_path, "watch", "--help", env=env)

    for option, variable in (
        ("--exec-timeout", "HERMES_STATE_EXEC_TIMEOUT"),
        ("--log-format", "HERMES_STATE_LOG_FORMAT"),
        ("--interval", "HERMES_STATE_WATCH_INTERVAL"),
    ):
        assert option in result.stdout
        assert variable in result.stdout


def test_a_drain_that_times_out_sends_term_first_then_kill(
    db_path: Path, env: dict[str, str]
) -> None:
    """SIGTERM to the watcher: it drains; what is left gets SIGTERM (a chance to clean up),
    then SIGKILL for whatever in its group outlives that."""
    pid_file = Path(env["PID_FILE"])
    term_file = Path(f"{pid_file}.term")
    command = f"trap 'echo got TERM > \"$PID_FILE.term\"; exit 1' TERM; {HANGS_WITH_A_CHILD}"
    argv = cli_argv(
        db_path, "watch", "--interval", "0.05", "--drain-timeout", "0.2", "--exec", command
    )
    watcher = Watcher(argv, env)
    try:
        wait_until(lambda: read_pid(Path(f"{pid_file}.child")) is not None, "the delivery to start")
        child = read_pid(Path(f"{pid_file}.child"))
        assert child is not None
        watcher.process.send_signal(signal.SIGTERM)
        assert watcher.wait() == 0, watcher.log
        assert term_file.read_text().strip() == "got TERM"
        wait_until(lambda: process_is_gone(child), "the command's child to be killed")
    finally:
        watcher.kill()
        kill_group(read_pid(pid_file))
    assert row(db_path)["handoff_state"] == "running"  # cancelled: left for the next reclaim
