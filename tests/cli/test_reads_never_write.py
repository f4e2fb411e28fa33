"""Read commands show upstream files that are not adopted yet as they are and leave every byte
alone; damage is named (exit 2) and refused before any write; transcripts show what the agent's
tools did. Commands run through ``main()`` in this process; damage named with exit 2 is also
checked through the real console script."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.support.processes import console, in_process
from tests.support.vintages import REAL_SCHEMA11, REAL_SCHEMA30

#: A session of the schema-30 file with a tool call and its result, and one with a pending
#: handoff (both written by upstream's own code).
TOOL_SESSION = "20250402_090713_0345a8"
PENDING_SESSION = "20250412_191723_c4fb3a"


def _copy(fixture: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "state.db"
    shutil.copyfile(fixture, target)
    target.chmod(0o644)
    return target


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _damage(path: Path, offset: int) -> None:
    """Overwrite 8 KiB inside the file, as a bad disk or a stray write would."""
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(b"\xde\xad" * 4096)


def _sessions_of(path: Path) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as connection:
        return {row[0] for row in connection.execute("SELECT id FROM sessions")}


READS = [
    ["session", "list", "--limit", "1000"],
    ["session", "show", TOOL_SESSION],
    ["session", "messages", TOOL_SESSION],
    ["handoff", "list"],
    ["handoff", "show", PENDING_SESSION],
    ["handoff", "stats"],
    ["handoff", "history", PENDING_SESSION],
    ["handoff", "reclaim", "--dry-run"],
    ["db", "current"],
]


@pytest.mark.parametrize("fixture", [REAL_SCHEMA30, REAL_SCHEMA11], ids=["schema30", "schema11"])
def test_read_commands_show_a_file_not_adopted_yet_and_change_no_byte(
    tmp_path: Path, fixture: Path
) -> None:
    path = _copy(fixture, tmp_path / "home")
    digest = _digest(path)
    for argv in READS:
        done = in_process("--url", str(path), *argv, "--json")
        about_one = argv[1] in ("show", "messages", "history")
        if about_one and argv[-1] not in _sessions_of(path):
            assert done.returncode == 1, (argv, done.stderr)
            continue
        assert done.returncode == 0, (argv, done.stderr)
        assert "Traceback" not in done.stderr
        json.loads(done.stdout)
        assert _digest(path) == digest, f"{argv} wrote to the file"
        assert sorted(p.name for p in path.parent.iterdir()) == ["state.db"], argv

    listed = json.loads(in_process("--url", str(path), "session", "list", "--json").stdout)
    assert {row["id"] for row in listed} <= _sessions_of(path)
    current = json.loads(in_process("--url", str(path), "db", "current", "--json").stdout)
    assert current["adopted"] is False
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as connection:
        assert (
            current["upstream_schema"]
            == connection.execute("SELECT version FROM schema_version").fetchone()[0]
        )
    text = in_process("--url", str(path), "db", "current")
    assert text.stdout.startswith(f"not adopted (upstream schema {current['upstream_schema']})")
    assert f"hermes-state db upgrade --url {path}" in text.stderr


def test_the_pending_handoff_of_an_upstream_file_is_listed_as_it_is(tmp_path: Path) -> None:
    path = _copy(REAL_SCHEMA30, tmp_path / "home")
    shown = json.loads(
        in_process("--url", str(path), "handoff", "show", PENDING_SESSION, "--json").stdout
    )
    assert shown["state"] == "pending"
    assert shown["platform"] == "telegram"
    assert shown["attempt"] == 0  # the column adoption would add, at its default
    pending = in_process("--url", str(path), "handoff", "list", "--state", "pending", "--json")
    assert [row["id"] for row in json.loads(pending.stdout)] == [PENDING_SESSION]


def test_a_write_command_on_a_file_not_adopted_yet_names_the_upgrade(tmp_path: Path) -> None:
    path = _copy(REAL_SCHEMA30, tmp_path / "home")
    digest = _digest(path)
    done = in_process("--url", str(path), "handoff", "request", TOOL_SESSION, "telegram")
    assert done.returncode == 1
    assert "not adopted yet" in done.stderr
    assert f"run `hermes-state db upgrade --url {path}` and try again" in done.stderr
    assert _digest(path) == digest


def test_a_read_leaves_frames_a_crashed_writer_left_in_the_wal_where_they_are(
    tmp_path: Path,
) -> None:
    """A -wal holding frames (its writer died) is read, not checkpointed into the file."""
    live = _copy(REAL_SCHEMA30, tmp_path / "live")
    assert in_process("--url", str(live), "db", "upgrade").returncode == 0
    writer = sqlite3.connect(live)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("INSERT INTO sessions (id, source, started_at) VALUES ('in-wal', 'cli', 1)")
    writer.commit()
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for name in ("state.db", "state.db-wal"):  # the files as a crash leaves them
        shutil.copyfile(live.parent / name, crashed / name)
    writer.close()
    path = crashed / "state.db"
    digest, wal = _digest(path), (crashed / "state.db-wal").read_bytes()

    shown = in_process("--url", str(path), "session", "show", "in-wal", "--json")

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["session"]["id"] == "in-wal"
    assert _digest(path) == digest
    assert (crashed / "state.db-wal").read_bytes() == wal


def test_db_current_names_damage_with_exit_2(tmp_path: Path) -> None:
    path = _copy(REAL_SCHEMA30, tmp_path / "home")
    _damage(path, 16384)
    digest = _digest(path)
    for argv in (["db", "current"], ["db", "current", "--json"], ["session", "list"]):
        done = console("--url", str(path), *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert f"{path} is damaged" in done.stderr
        assert not done.stdout.startswith("base")
        assert "db upgrade" not in done.stderr  # upgrading would not help
    assert _digest(path) == digest


WRITES = [
    ["handoff", "request", PENDING_SESSION.replace("c4fb3a", "000000"), "telegram"],
    ["handoff", "fail", PENDING_SESSION, "gave up"],
    ["handoff", "reclaim"],
    ["session", "create", "new-session"],
    ["watch", "--exec", "true", "--once"],
]


def test_a_damaged_file_at_head_is_refused_before_any_write(tmp_path: Path) -> None:
    path = _copy(REAL_SCHEMA30, tmp_path / "home")
    assert in_process("--url", str(path), "db", "upgrade").returncode == 0
    _damage(path, 60 * 4096)
    digest = _digest(path)
    for argv in WRITES:
        done = in_process("--url", str(path), *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert f"{path} is damaged" in done.stderr, argv
        assert "Traceback" not in done.stderr
        assert _digest(path) == digest, f"{argv} wrote to a damaged file"


def test_transcripts_show_each_tool_call_and_the_tool_of_each_result(tmp_path: Path) -> None:
    path = _copy(REAL_SCHEMA30, tmp_path / "home")
    text = in_process("--url", str(path), "session", "messages", TOOL_SESSION).stdout.splitlines()
    call = text.index(
        '    -> read_file({"path": "tests/test_parser.py", "offset": 1, "limit": 200})'
    )
    assert text[call - 1].endswith("  assistant")
    assert text[call + 1].endswith("  tool read_file (call_cb5c3e1f46ce)")
    assert '    -> write_file({"path": "notes/今日.md", "content": "# 笔记\\n- 完成 ✅"})' in text

    document = json.loads(
        in_process("--url", str(path), "session", "messages", TOOL_SESSION, "--json").stdout
    )
    calls = [message for message in document if message["tool_calls"]]
    assert calls[0]["tool_calls"][0]["function"]["name"] == "read_file"
    assert json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])["limit"] == 200
    results = [message for message in document if message["role"] == "tool"]
    assert [message["tool_name"] for message in results][:2] == ["read_file", "write_file"]
