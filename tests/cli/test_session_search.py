"""``hermes-state session search``: a table of hits by default, upstream's hit rows with
``--json``, its filters and its bounded ``--limit``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_state import SessionDB
from tests.conftest import CliResult


@pytest.fixture
def path(tmp_path: Path) -> Path:
    where = tmp_path / "state.db"
    with SessionDB(db_path=where) as db:
        db.create_session("s-cli", "cli", started_at=100.0)
        db.create_session("s-tg", "telegram", started_at=200.0)
        db.append_message("s-cli", "user", "deploy the zanzibar\nledger", timestamp=101.0)
        db.append_message("s-cli", "assistant", "zanzibar " + "word " * 80, timestamp=102.0)
        db.append_message("s-tg", "user", "zanzibar from telegram 大别山项目", timestamp=201.0)
    return where


def test_hits_are_a_table_one_line_each(cli: Callable[..., CliResult], path: Path) -> None:
    result = cli("session", "search", "zanzibar", "--url", str(path))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["MESSAGE", "SESSION", "SOURCE", "ROLE", "TIME", "SNIPPET"]
    assert len(lines) == 4
    assert any(">>>zanzibar<<< ledger" in line for line in lines)  # the newline flattened
    assert all(len(line) < 200 for line in lines)


def test_json_is_upstreams_hit_rows(cli: Callable[..., CliResult], path: Path) -> None:
    result = cli("session", "search", "大别山", "--url", str(path), "--json")
    assert result.code == 0, result.err
    [hit] = json.loads(result.out)
    assert hit["session_id"] == "s-tg"
    assert set(hit) == {
        "id",
        "session_id",
        "role",
        "snippet",
        "timestamp",
        "tool_name",
        "source",
        "model",
        "session_started",
        "context",
    }


def test_source_role_sort_and_limit(cli: Callable[..., CliResult], path: Path) -> None:
    def sessions(*argv: str) -> list[tuple[str, str]]:
        result = cli("session", "search", "zanzibar", *argv, "--url", str(path), "--json")
        assert result.code == 0, result.err
        return [(hit["session_id"], hit["role"]) for hit in json.loads(result.out)]

    assert sessions("--source", "telegram") == [("s-tg", "user")]
    assert sessions("--source", "telegram", "--source", "cli", "--role", "assistant") == [
        ("s-cli", "assistant")
    ]
    assert sessions("--sort", "newest") == [
        ("s-tg", "user"),
        ("s-cli", "assistant"),
        ("s-cli", "user"),
    ]
    assert sessions("--sort", "oldest", "--limit", "1") == [("s-cli", "user")]


def test_no_hit_says_so(cli: Callable[..., CliResult], path: Path) -> None:
    for query in ("quokka", "!!!", "   "):
        result = cli("session", "search", query, "--url", str(path))
        assert result.code == 0, result.err
        assert result.out.startswith("no messages match")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--limit", "0"), "from 1 to 500"),
        (("--limit", "501"), "from 1 to 500"),
        (("--limit", "many"), "whole number"),
        (("--sort", "sideways"), "relevance, newest or oldest"),
    ],
)
def test_bad_options_are_refused_with_their_bounds(
    cli: Callable[..., CliResult], path: Path, argv: tuple[str, ...], says: str
) -> None:
    result = cli("session", "search", "zanzibar", *argv, "--url", str(path))
    assert result.code == 2
    assert says in result.err
    assert "Traceback" not in result.err


def test_a_missing_database_is_an_error_not_a_new_file(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    missing = tmp_path / "none" / "state.db"
    result = cli("session", "search", "zanzibar", "--url", str(missing))
    assert result.code == 1
    assert "there is no database at" in result.err
    assert not missing.exists()
