"""``hermes-state session export`` and ``session import``: JSONL as upstream writes it, one
session a line; an import checks every line first (a bad one is named by its number and
nothing is imported) and skips what is already stored."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_state import SessionDB
from tests.conftest import CliResult
from tests.support.digest import database_digest


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A database with three sessions (one of them compressed into a continuation)."""
    path = tmp_path / "source.db"
    with SessionDB(path) as db:
        db.create_session("alpha", "cli", model="m", system_prompt="be brief")
        db.append_message("alpha", "user", [{"type": "text", "text": "hi"}])
        db.append_message(
            "alpha", "assistant", "ok", tool_calls=[{"id": "c1", "function": {"name": "f"}}]
        )
        db.end_session("alpha", "compression")
        db.create_session("beta", "cli", parent_session_id="alpha")
        db.append_message("beta", "user", "more")
        db.create_session("gamma", "telegram")
        db.append_message("gamma", "user", "日本語")
    return path


@pytest.fixture
def target(tmp_path: Path) -> Path:
    path = tmp_path / "target.db"
    SessionDB(path).close()
    return path


def lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_export_writes_one_session_a_line_to_stdout(
    cli: Callable[..., CliResult], source: Path
) -> None:
    done = cli("session", "export", "--url", str(source))
    assert done.code == 0
    exported = lines(done.out)
    assert sorted(row["id"] for row in exported) == ["alpha", "beta", "gamma"]  # type: ignore[type-var]
    with SessionDB(source) as db:
        assert {row["id"]: row for row in exported} == {
            row["id"]: json.loads(json.dumps(db.export_session(row["id"])))
            for row in db.search_sessions(limit=10)
        }
    assert "日本語" in done.out  # as upstream writes it: ensure_ascii=False
    assert "exported 3 session(s)" in done.err


def test_export_of_chosen_ids_or_a_source(cli: Callable[..., CliResult], source: Path) -> None:
    chosen = cli("session", "export", "gam", "alpha", "--url", str(source))  # a unique prefix
    assert [row["id"] for row in lines(chosen.out)] == ["gamma", "alpha"]
    only = cli("session", "export", "--source", "telegram", "--url", str(source))
    assert [row["id"] for row in lines(only.out)] == ["gamma"]
    both = cli("session", "export", "alpha", "--source", "cli", "--url", str(source))
    assert both.code == 2
    assert "not both" in both.err


def test_export_to_a_file_refuses_an_existing_one_unless_forced(
    cli: Callable[..., CliResult], source: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sessions.jsonl"
    done = cli("session", "export", "--url", str(source), "-o", str(out), "--json")
    assert done.code == 0
    assert done.json() == {"exported": 3, "messages": 4, "output": str(out)}
    first = out.read_bytes()
    again = cli("session", "export", "--url", str(source), "-o", str(out))
    assert again.code == 2
    assert "exists" in again.err
    assert out.read_bytes() == first
    forced = cli("session", "export", "gamma", "--url", str(source), "-o", str(out), "--force")
    assert forced.code == 0
    assert [row["id"] for row in lines(out.read_text())] == ["gamma"]
    missing = cli("session", "export", "--url", str(source), "-o", str(tmp_path / "no" / "x"))
    assert missing.code == 2
    assert "not a folder" in missing.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions.jsonl", "source.db"]


def test_export_refuses_json_on_stdout_an_unknown_id_and_a_session_over_the_limit(
    cli: Callable[..., CliResult], source: Path, tmp_path: Path
) -> None:
    assert cli("session", "export", "--json", "--url", str(source)).code == 2
    unknown = cli("session", "export", "alpha", "nobody", "--url", str(source))
    assert unknown.code == 2
    assert "'nobody'" in unknown.err
    assert unknown.out == ""
    out = tmp_path / "big.jsonl"
    big = cli("session", "export", "--url", str(source), "--max-messages", "1", "-o", str(out))
    assert big.code == 1
    assert "'alpha' has at least 2 active messages" in big.err
    assert not out.exists()
    assert cli("session", "export", "--max-messages", "-1", "--url", str(source)).code == 2
    unbounded = cli("session", "export", "--max-messages", "0", "--url", str(source))
    assert len(lines(unbounded.out)) == 3


def test_import_restores_an_export_and_a_second_import_changes_nothing(
    cli: Callable[..., CliResult], source: Path, target: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sessions.jsonl"
    assert cli("session", "export", "--url", str(source), "-o", str(out)).code == 0
    done = cli("session", "import", str(out), "--url", str(target), "--json")
    assert done.code == 0
    assert done.json() == {
        "imported": 3,
        "skipped": 0,
        "detached": 0,
        "sessions": 3,
        "file": str(out),
    }
    with SessionDB(target) as db:
        assert db.get_compression_lineage("beta") == ["alpha", "beta"]
        assert db.get_messages("alpha")[0]["content"] == [{"type": "text", "text": "hi"}]
    digest = database_digest(f"sqlite:///{target}")
    again = cli("session", "import", str(out), "--url", str(target))
    assert again.code == 0
    assert "imported 0 session(s), skipped 3 already stored" in again.out
    assert database_digest(f"sqlite:///{target}") == digest


BAD_FILES = [
    ('{"id": "a"}\n{"id": \n', "line 2: not JSON (Expecting value at column 8)"),
    ('{"id": "a"}\n\n[1, 2]\n', "line 3: a session must be a JSON object, not list"),
    ('{"id": "a"}\n{"id": "a"}\n', "line 2: session 'a' is already on line 1"),
    (
        '{"id": "a"}\n{"id": "b", "messages": [{"content": "x"}]}\n',
        "line 2 (session 'b'): messages[0].role must be a non-empty string",
    ),
    ('{"id": "a", "title": 7}\n', "line 1 (session 'a'): title must be a string"),
    ('{"messages": []}\n', "line 1: session id is required"),
]


@pytest.mark.parametrize(("content", "error"), BAD_FILES, ids=[e for _, e in BAD_FILES])
def test_a_malformed_line_is_named_and_nothing_is_imported(
    cli: Callable[..., CliResult], target: Path, tmp_path: Path, content: str, error: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content, encoding="utf-8")
    digest = database_digest(f"sqlite:///{target}")
    done = cli("session", "import", str(bad), "--url", str(target))
    assert done.code == 2
    assert error in done.err
    assert "nothing was imported" in done.err
    assert "Traceback" not in done.err
    assert database_digest(f"sqlite:///{target}") == digest


def test_import_reads_stdin_and_refuses_what_is_no_file(
    cli: Callable[..., CliResult],
    target: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payload = b'{"id": "from-stdin", "messages": [{"role": "user", "content": "hi"}]}\n'
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(payload)))
    done = cli("session", "import", "-", "--url", str(target))
    assert done.code == 0
    assert "imported 1 session(s)" in done.out
    missing = cli("session", "import", str(tmp_path / "none.jsonl"), "--url", str(target))
    assert missing.code == 2
    assert "there is no file" in missing.err
    folder = cli("session", "import", str(tmp_path), "--url", str(target))
    assert folder.code == 2
    assert "is a folder" in folder.err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe{}\n")
    assert "line 1: not UTF-8" in cli("session", "import", str(binary), "--url", str(target)).err


#: What an import leaves out on purpose, as upstream's own import does: the gateway routing of
#: a live channel, and what is derived (``last_active``: the listing's, not a column).
NOT_IMPORTED = frozenset(
    {
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
        "display_name",
        "origin_json",
        "last_active",
    }
)


def test_an_upstream_written_export_imports_with_everything_kept(
    cli: Callable[..., CliResult], target: Path
) -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "upstream-sessions-export.jsonl"
    written = lines(fixture.read_text(encoding="utf-8"))
    done = cli("session", "import", str(fixture), "--url", str(target), "--json")
    assert done.code == 0
    assert done.json()["imported"] == len(written) == 5
    with SessionDB(target) as db:
        for session in written:
            mine = db.export_session(str(session["id"]))
            assert mine is not None
            kept = set(session) - NOT_IMPORTED - {"messages"}
            assert {k: mine.get(k) for k in kept} == {k: session[k] for k in kept}
            theirs = session["messages"]
            assert isinstance(theirs, list)
            assert len(mine["messages"]) == len(theirs)
            for got, given in zip(mine["messages"], theirs, strict=True):
                assert isinstance(given, dict)
                # Every key upstream's export has (this schema has more), all but the row id.
                assert {k: got.get(k) for k in given if k != "id"} == {
                    k: v for k, v in given.items() if k != "id"
                }
        assert db.get_compression_lineage("tg-child") == ["tg-parent", "tg-child"]
        assert len(db.get_session("cli-1")["system_prompt"] or "") > 0  # type: ignore[index]


@pytest.mark.parametrize("vintage", ["schema30", "schema11"])
def test_an_upstream_file_not_adopted_yet_exports_unchanged_and_imports_elsewhere(
    cli: Callable[..., CliResult], target: Path, tmp_path: Path, vintage: str
) -> None:
    from tests.support.vintages import REAL_SCHEMA11, REAL_SCHEMA30

    home = tmp_path / "home"
    home.mkdir()
    upstream = home / "state.db"
    upstream.write_bytes((REAL_SCHEMA30 if vintage == "schema30" else REAL_SCHEMA11).read_bytes())
    before = upstream.read_bytes()
    out = tmp_path / "upstream.jsonl"
    done = cli("session", "export", "--url", str(upstream), "-o", str(out), "--json")
    assert done.code == 0, done.err
    assert upstream.read_bytes() == before  # read through the lens, not adopted
    assert sorted(p.name for p in home.iterdir()) == ["state.db"]
    exported = done.json()["exported"]
    assert exported > 0
    imported = cli("session", "import", str(out), "--url", str(target), "--json")
    assert imported.code == 0, imported.err
    assert imported.json()["imported"] == exported


def test_a_dry_run_import_checks_every_line_and_writes_nothing(
    cli: Callable[..., CliResult], source: Path, target: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sessions.jsonl"
    assert cli("session", "export", "gamma", "--url", str(source), "-o", str(out)).code == 0
    with SessionDB(target) as db:
        db.create_session("gamma", "cli")
    digest = database_digest(f"sqlite:///{target}")
    assert cli("session", "export", "--url", str(source), "-o", str(out), "--force").code == 0
    done = cli("session", "import", str(out), "--url", str(target), "--dry-run", "--json")
    assert done.code == 0
    assert done.json() == {
        "dry_run": True,
        "imported": 2,
        "skipped": 1,
        "sessions": 3,
        "file": str(out),
    }
    assert database_digest(f"sqlite:///{target}") == digest
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\nnope\n')
    refused = cli("session", "import", str(bad), "--url", str(target), "--dry-run")
    assert refused.code == 2
    assert "line 2" in refused.err
