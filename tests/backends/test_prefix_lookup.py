"""resolve_session_id(prefix) on SQLite reaches the matching ids by key: the bound it adds to
the LIKE keeps every answer the LIKE alone gives (SQLite folds ASCII case) and uses the
primary key."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

from hermes_state import SessionDB
from hermes_state.plans.session_flags import prefix_pattern, prefix_range

IDS = [
    "abc-1",
    "ABC-2",
    "aBd",
    "ab_c",
    "ab%x",
    "b",
    "Zeta",
    "zeta",
    "é-accent",
    "É-accent",
    "a/b",
    "abc",
]


def test_the_bound_keeps_every_match_the_like_finds(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for number, session_id in enumerate(IDS):
            db.create_session(session_id, "cli", started_at=float(number))
    connection = sqlite3.connect(path)
    prefixes = {"", "a", "A", "ab", "aB", "abc", "ab_", "ab%", "z", "Z", "é", "a/", "b", "q"}
    prefixes |= {a + b for a, b in itertools.product("aAbB", "bBcC")}
    for prefix in sorted(prefixes):
        liked = {
            row[0]
            for row in connection.execute(
                "SELECT id FROM sessions WHERE id LIKE ? ESCAPE '/'", (prefix_pattern(prefix),)
            )
        }
        bounds = prefix_range(prefix)
        if bounds is None:
            assert prefix == ""
            continue
        ranged = {
            row[0]
            for row in connection.execute(
                "SELECT id FROM sessions WHERE id LIKE ? ESCAPE '/' AND id >= ? AND id < ?",
                (prefix_pattern(prefix), *bounds),
            )
        }
        assert ranged == liked, prefix
    connection.close()


def test_the_lookup_uses_the_primary_key(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for number in range(50):
            db.create_session(f"s-{number:03}", "cli", started_at=float(number))
        assert db.resolve_session_id("s-04") is None  # ten match
        assert db.resolve_session_id("S-049") == "s-049"  # ASCII case folds, as upstream's LIKE
    connection = sqlite3.connect(path)
    plan = " ".join(
        str(row[-1])
        for row in connection.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE id LIKE ? ESCAPE '/' "
            "AND id >= ? AND id < ? ORDER BY started_at DESC, id DESC LIMIT 2",
            ("s-04%", *prefix_range("s-04")),  # type: ignore[misc]
        )
    )
    connection.close()
    assert "USING INDEX sqlite_autoindex_sessions_1" in plan or "PRIMARY KEY" in plan, plan
