"""The README and the documentation keep their promises: the command-line reference
(docs/cli-reference.md) is the parsers' own ``--help``, the README's links reach the pages and
headings they name, and every Python example, in README.md or a page of docs/, is a complete
program that runs as written."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from hermes_state import SessionDB
from hermes_state.cli import reference
from tests.conftest import require_server, throwaway_database, url_arg
from tests.support.processes import DEADLINE, Watcher, wait_until
from tests.support.stores import put

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: Where examples are: the README, then the documentation's pages.
SOURCES = (README, *sorted(DOCS.glob("*.md")))
#: Every Python example, once: one shown both in the README and on a page is the same text, so
#: it counts once (were the two copies to drift apart, they would count twice).
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
EXAMPLES = list(
    dict.fromkeys(
        code
        for source in SOURCES
        for code in PYTHON_BLOCK.findall(source.read_text(encoding="utf-8"))
    )
)


def test_the_cli_reference_is_up_to_date() -> None:
    page = ROOT / reference.PAGE
    text = page.read_text(encoding="utf-8")
    assert reference.START in text
    assert reference.updated(text) == text, (
        f"{reference.PAGE} is stale: run `python -m hermes_state.cli.reference`"
    )
    # Run from the repository root, the command checks that page by default.
    check = [sys.executable, "-m", "hermes_state.cli.reference", "--check"]
    result = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_the_readme_links_reach_the_docs() -> None:
    # mkdocs build --strict checks the pages' links; the README is not one of them.
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", README.read_text(encoding="utf-8"))
    assert links
    for target, anchor in links:
        path = ROOT / target
        assert path.is_file(), f"README links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#{1,6} (.*)$", path.read_text(encoding="utf-8"), re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"{target} has no heading #{anchor}"


def test_the_reference_check_command(tmp_path: Path) -> None:
    stale = tmp_path / "cli-reference.md"
    stale.write_text(f"intro\n{reference.START}\nold\n{reference.END}\nend\n")
    check = [sys.executable, "-m", "hermes_state.cli.reference", str(stale), "--check"]
    assert subprocess.run(check, capture_output=True, check=False).returncode == 1
    write = [sys.executable, "-m", "hermes_state.cli.reference", str(stale)]
    assert subprocess.run(write, capture_output=True, check=False).returncode == 0
    assert subprocess.run(check, capture_output=True, check=False).returncode == 0
    assert stale.read_text().startswith("intro\n")
    assert stale.read_text().endswith("\nend\n")
    assert "hermes-state handoff wait" in stale.read_text()


def example(fragment: str) -> str:
    found = [code for code in EXAMPLES if fragment in code]
    assert len(found) == 1, f"{len(found)} examples (README.md, docs/*.md) contain {fragment!r}"
    return found[0]


def run_example(code: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = folder / "example.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


FRAGMENTS = (
    'db.request_handoff("s1", "telegram")  # True',
    "finish_reason=",
    "selectinload(AgentSession.messages)",
    "NativeAsyncSessionDB() as db:",
    "runner.serve()",
    "claim_pending_handoffs(100)",
    'try_acquire_session_turn_lease("s1", "cli:pid=4242"',
    "get_next_title_in_lineage(",
    'db.ensure_session("s1")  # a gateway',
    'db.set_session_archived("tip", True)',
    # -- messages
    'db.append_messages_batch(\n        "m1",',
    'db.set_auto_title("t3", "fix login"',
    'list_sessions_rich(source="cli", limit=20)',
    # -- portability
    "result = db.import_sessions(exported)",
    # -- search (issue 24)
    'db.search_messages("deploy script*"',
)


def test_every_python_example_is_tested() -> None:
    assert len(EXAMPLES) == len(FRAGMENTS)
    assert sorted(EXAMPLES) == sorted(example(fragment) for fragment in FRAGMENTS)


def test_the_synchronous_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example(FRAGMENTS[0]), tmp_path, {})
    assert result.returncode == 0, result.stderr
    with SessionDB(isolated_home / "state.db") as db:
        assert db.get_handoff_state("s1") == {
            "state": "completed",
            "platform": "telegram",
            "error": None,
        }


def test_the_asyncio_example_on_sqlite(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example(FRAGMENTS[3]), tmp_path, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "True"]


def test_the_asyncio_example_on_postgresql(tmp_path: Path) -> None:
    require_server("postgresql")
    code = example(FRAGMENTS[3])
    assert "hermes-state db upgrade" in code  # the example says what a server needs first
    with throwaway_database("postgresql") as url:
        env = {"HERMES_STATE_URL": url_arg(url)}
        upgrade = subprocess.run(
            [str(Path(sys.executable).with_name("hermes-state")), "db", "upgrade"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
        assert upgrade.returncode == 0, upgrade.stderr
        result = run_example(code, tmp_path, env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["True", "True", "True"]


def test_the_watcher_example(tmp_path: Path, isolated_home: Path) -> None:
    path = isolated_home / "state.db"
    with SessionDB(path) as db:
        put(db, "s1", "pending")
        db.append_message("s1", "user", "hello")
    script = tmp_path / "watcher.py"
    script.write_text(example("runner.serve()"))
    watcher = Watcher(
        [sys.executable, "-u", str(script)],
        dict(os.environ),
        name="the README watcher",
        stdout_too=True,
    )
    try:
        watcher.wait_for_line("delivered s1 to telegram: 1 message(s)")
        with SessionDB(path) as db:
            wait_until(
                lambda: (db.get_handoff_state("s1") or {}).get("state") == "completed",
                "the delivery to be recorded",
            )
        watcher.process.send_signal(signal.SIGTERM)
        assert watcher.wait() == 0, watcher.log
    finally:
        watcher.kill()
    assert "NameError" not in watcher.log


def test_the_titles_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example("get_next_title_in_lineage("), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held
    with SessionDB(isolated_home / "state.db") as db:
        assert db.get_session_title("t1") == "quarterly report"
        assert db.get_session_title("t2") == "quarterly report #2"


def test_the_automatic_titles_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example('db.set_auto_title("t3", "fix login"'), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held
    with SessionDB(isolated_home / "state.db") as db:
        assert db.get_session_title("t3") == "auth bug"
        assert db.get_session_title_source("t3") == "user"


def test_the_session_rows_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example('db.ensure_session("s1")  # a gateway'), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held
    with SessionDB(isolated_home / "state.db") as db:
        first, second = db.get_session("s1"), db.get_session("s2")
        assert first is not None
        assert second is not None
        assert (first["model"], first["system_prompt"]) == ("hermes-4", "You are terse.")
        assert (second["cwd"], second["input_tokens"], second["billing_provider"]) == (
            "/srv/app",
            120,
            "nous",
        )


def test_the_session_flags_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example('db.set_session_archived("tip", True)'), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held
    with SessionDB(isolated_home / "state.db") as db:
        assert [db.get_session(s)["archived"] for s in ("root", "tip")] == [1, 1]  # type: ignore[index]


def test_the_messages_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example('db.append_messages_batch(\n        "m1",'), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held
    with SessionDB(isolated_home / "state.db") as db:
        assert db.message_count("m1") == 2


def test_the_session_listing_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example('list_sessions_rich(source="cli", limit=20)'), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held
    with SessionDB(isolated_home / "state.db") as db:
        assert db.session_count() == 25


def test_the_portability_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example("result = db.import_sessions(exported)"), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held
    assert result.stdout == ""  # far below the export limit
    with SessionDB(isolated_home / "state.db") as db:
        assert db.get_session("p1")["system_prompt"] == "be brief"  # type: ignore[index]


def test_the_search_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example('db.search_messages("deploy script*"'), tmp_path, {})
    assert result.returncode == 0, result.stderr  # its own asserts held


def test_the_transcript_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example("finish_reason="), tmp_path, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "terminal\n"
    with SessionDB(isolated_home / "state.db") as db:
        session = db.get_session("s1")
        assert session is not None
        assert (session["message_count"], session["tool_call_count"]) == (2, 1)
        tool = db.get_messages("s1")[-1]
        assert (tool["role"], tool["tool_call_id"], tool["tool_name"]) == (
            "tool",
            "call_1",
            "terminal",
        )


def test_the_models_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example("selectinload(AgentSession.messages)"), tmp_path, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "s1 3 1",
        "  1 user: What is in this folder?",
        "  2 assistant: [{'id': 'call_1'}]",  # tool_calls loads decoded: a list
        "  3 tool: notes.txt",
    ]


def test_the_turn_lease_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(
        example('try_acquire_session_turn_lease("s1", "cli:pid=4242"'), tmp_path, {}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "True"]


def test_the_batch_example(tmp_path: Path, isolated_home: Path) -> None:
    result = run_example(example("claim_pending_handoffs(100)"), tmp_path, {})
    assert result.returncode == 0, result.stderr
    with SessionDB(isolated_home / "state.db") as db:
        assert db.get_handoff_state("s1") == {
            "state": "completed",
            "platform": "telegram",
            "error": None,
        }
        moves = [(e["from_state"], e["to_state"], e["actor"]) for e in db.handoff_history("s1")]
        assert moves[-2:] == [("pending", "running", "gw-1"), ("running", "completed", "gw-1")]
