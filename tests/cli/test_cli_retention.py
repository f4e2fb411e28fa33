"""``hermes-state db prune`` and ``db vacuum`` through ``hermes_state.cli.main``: the listing
with counts, the confirmation (``--yes``, ``yes`` typed on a terminal, a refusal without
either), ``--dry-run``, bounded options, ``--json``, and vacuum's free-page threshold."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from hermes_state import SessionDB
from tests.conftest import url_arg
from tests.support.digest import database_digest

DAY = 86400.0


class Terminal(io.StringIO):
    """Standard input that says it is a terminal, with what the person types."""

    def isatty(self) -> bool:
        return True


def fill(url: URL, old: int, *, recent: int = 1, source: str = "cli") -> None:
    then = time.time() - 200 * DAY
    with SessionDB(url=url) as db:
        for index in range(old):
            sid = f"old-{source}-{index:03d}"
            db.create_session(sid, source, started_at=then)
            db.append_message(sid, "user", "hello", timestamp=then)
            db.append_message(sid, "assistant", "hi", timestamp=then + 1)
            db.end_session(sid, "done")
        for index in range(recent):
            db.create_session(f"recent-{source}-{index}", source)
            db.end_session(f"recent-{source}-{index}", "done")


def count(url: URL) -> int:
    with SessionDB(url=url) as db:
        return db.session_count(include_archived=True)


@pytest.fixture
def url(backend_url: URL) -> URL:
    fill(backend_url, 25)
    fill(backend_url, 3, source="telegram")
    return backend_url


def prune(cli: Any, url: URL, *argv: str) -> Any:
    return cli("--url", url_arg(url), "db", "prune", *argv)


def test_a_dry_run_lists_what_goes_with_counts_and_changes_nothing(cli: Any, url: URL) -> None:
    before = database_digest(url)
    done = prune(cli, url, "--older-than", "90", "--dry-run")
    assert done.code == 0, done.err
    assert "28 ended session(s) inactive for more than 90 day(s), with 56 message(s)" in done.out
    assert "old-cli-000" in done.out
    assert "... and 8 more" in done.out  # twenty listed
    assert database_digest(url) == before
    listed = prune(cli, url, "--older-than", "90", "--dry-run", "--source", "telegram", "--json")
    document = listed.json()
    assert document["would_delete"] == {"sessions": 3, "messages": 6}
    assert document["listed"] == [f"old-telegram-{index:03d}" for index in range(3)]
    assert document["deleted"] is None


def test_without_yes_and_without_a_terminal_nothing_is_pruned(cli: Any, url: URL) -> None:
    done = prune(cli, url, "--older-than", "90")
    assert done.code == 1
    assert "not pruned: 28 session(s) would be deleted" in done.err
    assert "--yes" in done.err
    assert count(url) == 30


@pytest.mark.parametrize(("typed", "code", "left"), [("yes\n", 0, 2), ("no\n", 1, 30)])
def test_a_person_confirms_on_a_terminal(
    cli: Any, url: URL, monkeypatch: pytest.MonkeyPatch, typed: str, code: int, left: int
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(typed))
    done = prune(cli, url, "--older-than", "90")
    assert done.code == code, done.err
    assert "This deletes 28 session(s) and 56 message(s) for good" in done.err
    assert count(url) == left


def test_yes_prunes_in_batches_and_reports(cli: Any, url: URL) -> None:
    done = prune(cli, url, "--older-than", "90", "--source", "cli", "--yes", "--batch-size", "7")
    assert done.code == 0, done.err
    assert "deleted 25 session(s) and 50 message(s) in 5 batch(es)" in done.out
    assert count(url) == 5
    again = prune(cli, url, "--older-than", "90", "--yes", "--json").json()
    assert again["deleted"]["sessions"] == 3
    assert prune(cli, url, "--older-than", "90", "--yes").out.strip().endswith("nothing to prune")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--older-than", "0"],
        ["--older-than", "36501"],
        ["--older-than", "1.5"],
        ["--older-than", "ninety"],
        ["--older-than", "90", "--batch-size", "0"],
        ["--older-than", "90", "--batch-size", "10001"],
        ["--older-than", "90", "--source", "a\x01b"],
        ["--older-than", "90", "--source", "x" * 65],
    ],
)
def test_bad_options_are_refused(cli: Any, tmp_path: Path, argv: list[str]) -> None:
    SessionDB(tmp_path / "state.db").close()
    done = cli("--url", str(tmp_path / "state.db"), "db", "prune", *argv)
    assert done.code == 2, done.err
    assert "Traceback" not in done.err


def test_vacuum_only_above_the_free_share_unless_forced(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("big", "cli")
        for index in range(400):
            db.append_message("big", "user", f"{index} " + "x" * 800)
        db.end_session("big", "done")
    url = str(path)
    tight = cli("--url", url, "db", "vacuum", "--json").json()
    assert tight["vacuumed"] is False
    assert tight["before"]["free_ratio"] < 0.25
    with SessionDB(path) as db:
        assert db.delete_session("big") is True
    shown = cli("--url", url, "db", "vacuum")
    assert shown.code == 0, shown.err
    assert "pages free" in shown.out
    assert "vacuumed:" in shown.out
    after = cli("--url", url, "db", "vacuum", "--json").json()
    assert after["vacuumed"] is False
    assert after["before"]["freelist_count"] == 0
    forced = cli("--url", url, "db", "vacuum", "--force", "--json").json()
    assert forced["vacuumed"] is True
    assert forced["forced"] is True
    assert cli("--url", url, "db", "vacuum", "--min-free", "1.5").code == 2


def test_vacuum_on_every_backend(cli: Any, backend_url: URL) -> None:
    fill(backend_url, 3)
    done = cli("--url", url_arg(backend_url), "db", "vacuum", "--force", "--json")
    assert done.code == 0, done.err
    assert done.json()["vacuumed"] is True
