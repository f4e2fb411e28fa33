"""Message search at scale: ``search_messages`` p50/p95 over a mix of queries.

Requirement (issue 24): on 1,000,000 messages a search's p50 is at most 20 ms on SQLite and
PostgreSQL, and no slower than upstream's own ``search_messages`` on the same SQLite file in
the same run.

The fixture: ``--messages`` messages (sessions of 50), written with ``sqlite3.executemany``
in one transaction into a file the store created, so upstream's FTS5 triggers fill both
indexes as they would have; on PostgreSQL the same rows are loaded with ``COPY`` at revision
0007 and the search indexes built by upgrading to head. The texts are drawn from a fixed
seed: a common word ("error", in about 1 message of 10), a rare one ("zanzibar", in 20
messages), a phrase ("connection refused", about 1 in 200) and CJK text ("数据库连接失败",
about 1 in 100) among filler words.

The mix (:data:`MIX`): the common word, the rare word, the phrase and a CJK term of 5
characters (the trigram route), each ``limit=20`` by relevance. A short CJK term (2
characters, which every implementation answers with a LIKE scan of every message) is
measured on its own, outside the mix.

Contenders, interleaved per query in every round (the order rotating):

* ``sqlite3 MATCH`` (the baseline on SQLite): the bare ``messages_fts MATCH ? ORDER BY rank
  LIMIT 20`` (or the trigram table's, for CJK) through ``sqlite3``, ids only: what any FTS5
  search costs at least;
* ``SessionDB`` on SQLite: the whole call (sanitizing, snippets, each hit's context);
* ``upstream`` (with ``--upstream PATH``, a folder holding upstream's ``hermes_state.py``):
  upstream's ``search_messages`` on the same file, in a subprocess of ``--upstream-python``
  (default: this interpreter) that times each call itself and answers over a pipe, so the
  pipe is not counted; without the folder the row is skipped with a line saying so;
* ``SessionDB`` on PostgreSQL (with ``--pg-url`` or ``HERMES_STATE_BENCH_PG_URL`` /
  ``HERMES_STATE_TEST_PG_URL``), against ``SessionDB`` on SQLite measured in the same rounds.

Run alone: ``python -m bench.search --messages 1000000 --upstream /path/to/upstream``; in the
suite (``python -m bench --only search``) with 100,000 messages (10,000 with ``--quick``)
and the upstream folder from ``HERMES_STATE_BENCH_UPSTREAM``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Final

from hermes_state import SessionDB

from . import fixtures
from .common import BenchmarkError, Result, format_table, percentile, summarize

#: (label, query) of the measured mix.
MIX: Final = (
    ("common word", "error"),
    ("rare word", "zanzibar"),
    ("phrase", '"connection refused"'),
    ("CJK (trigram)", "数据库连接"),
)
#: Measured on its own: a 2-character CJK term is a LIKE scan in every implementation.
SHORT_CJK: Final = ("short CJK (LIKE scan)", "数据")
SESSION_MESSAGES: Final = 50
RARE_COUNT: Final = 20
_EPOCH: Final = 1_767_225_600.0
_FILLER: Final = tuple(
    f"{a}{b}"
    for a in ("al", "be", "co", "de", "ex", "fa", "go", "hu", "in", "jo", "ka", "lu")
    for b in ("ta", "ri", "mon", "vex", "dal", "nor", "pik", "sul", "tor", "wen", "zam", "quo")
)
_ROLES: Final = ("user", "assistant")
UPSTREAM_ENV: Final = "HERMES_STATE_BENCH_UPSTREAM"
UPSTREAM_PYTHON_ENV: Final = "HERMES_STATE_BENCH_UPSTREAM_PYTHON"


def _messages(count: int) -> Iterator[tuple[str, str, str, float]]:
    """(session id, role, content, timestamp) of ``count`` messages, the same every run."""
    chooser = random.Random(24)
    rare = set(chooser.sample(range(count), min(RARE_COUNT, count)))
    for index in range(count):
        words = chooser.choices(_FILLER, k=chooser.randint(8, 30))
        if chooser.random() < 0.1:
            words.insert(chooser.randrange(len(words)), "error")
        if chooser.random() < 0.005:
            words.insert(chooser.randrange(len(words)), "connection refused")
        if index in rare:
            words.append("zanzibar")
        if chooser.random() < 0.01:
            words.insert(chooser.randrange(len(words)), "数据库连接失败")
        session = fixtures.session_id(index // SESSION_MESSAGES)
        yield session, _ROLES[index % 2], " ".join(words), _EPOCH + index


def build_sqlite(path: Path, count: int) -> float:
    """The fixture file at ``path``; returns the seconds the insert took."""
    SessionDB(path).close()  # the store's schema, FTS5 tables and triggers
    started = time.perf_counter()
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("BEGIN")
        sessions = (count + SESSION_MESSAGES - 1) // SESSION_MESSAGES
        connection.executemany(
            "INSERT INTO sessions (id, source, started_at, message_count) VALUES (?, 'cli', ?, ?)",
            (
                (fixtures.session_id(i), _EPOCH + i * SESSION_MESSAGES, SESSION_MESSAGES)
                for i in range(sessions)
            ),
        )
        connection.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            _messages(count),
        )
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("ANALYZE")
    finally:
        connection.close()
    return time.perf_counter() - started


def build_postgresql(url: Any, count: int) -> float:
    """The same rows on the PostgreSQL database ``url`` (at revision 0007), then the search
    indexes of revision 0008 built over them; returns the seconds it took."""
    import psycopg

    from hermes_state import schema

    started = time.perf_counter()
    sessions = (count + SESSION_MESSAGES - 1) // SESSION_MESSAGES
    with psycopg.connect(fixtures.pg_conninfo(url)) as connection:
        with connection.cursor() as cursor:
            with cursor.copy(
                "COPY sessions (id, source, started_at, message_count) FROM STDIN"
            ) as copy:
                for i in range(sessions):
                    copy.write_row((fixtures.session_id(i), "cli", _EPOCH + i * 50, 50))
            with cursor.copy(
                "COPY messages (session_id, role, content, timestamp) FROM STDIN"
            ) as copy:
                for row in _messages(count):
                    copy.write_row(row)
        connection.commit()
    schema.upgrade(url)  # 0008: the tsvector and pg_trgm indexes, built over the rows
    with psycopg.connect(fixtures.pg_conninfo(url), autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE messages")
        connection.execute("VACUUM ANALYZE sessions")
    return time.perf_counter() - started


# -- contenders -----------------------------------------------------------------------------

Search = Callable[[str], int]


def _sqlite_match(path: Path) -> tuple[Search, Callable[[], None]]:
    connection = sqlite3.connect(path)

    def search(query: str) -> int:
        table = "messages_fts_trigram" if SessionDB._contains_cjk(query) else "messages_fts"
        expression = SessionDB._sanitize_fts5_query(query)
        if table == "messages_fts_trigram":
            expression = " ".join(f'"{t}"' for t in expression.strip('"').split())
        rows = connection.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT 20",
            (expression,),
        ).fetchall()
        return len(rows)

    return search, connection.close


def _store(db: SessionDB) -> Search:
    def search(query: str) -> int:
        return len(db.search_messages(query, limit=20))

    return search


_CHILD: Final = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from hermes_state import SessionDB
    db = SessionDB(db_path=Path(sys.argv[2]))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        query = json.loads(line)["query"]
        started = time.perf_counter()
        found = db.search_messages(query, limit=20)
        elapsed = time.perf_counter() - started
        print(json.dumps({"seconds": elapsed, "rows": len(found)}), flush=True)
    """
)


class _Upstream:
    """Upstream's ``search_messages`` in a subprocess, timed there, one query per line."""

    def __init__(self, source: Path, python: str, path: Path, folder: Path) -> None:
        script = folder / "upstream_search.py"
        script.write_text(_CHILD)
        env = {**os.environ, "HERMES_HOME": str(folder / "upstream-home")}
        self._process = subprocess.Popen(
            [python, str(script), str(source), str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.seconds = 0.0
        if not json.loads(self._line()).get("ready"):
            raise BenchmarkError("upstream's store did not open the file")

    def _line(self) -> str:
        stdout: IO[str] | None = self._process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise BenchmarkError(f"upstream's process ended (exit {self._process.wait()})")
        return line

    def search(self, query: str) -> int:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"query": query}) + "\n")
        stdin.flush()
        answer = json.loads(self._line())
        self.seconds = float(answer["seconds"])
        return int(answer["rows"])

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=60)


# -- measuring -----------------------------------------------------------------------------


def _rounds(
    contenders: dict[str, Search],
    queries: tuple[tuple[str, str], ...],
    rounds: int,
    warmup: int,
    timed_inside: dict[str, _Upstream] | None = None,
    capped: dict[str, int] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """``{query label: {contender: seconds per round}}``, every contender once per query per
    round, the first contender rotating; a ``capped`` contender (upstream's, whose searches
    take seconds at scale) only in the first rounds measured, and in no warm-up round."""
    names = list(contenders)
    samples: dict[str, dict[str, list[float]]] = {
        label: {n: [] for n in names} for label, _ in queries
    }
    for number in range(warmup + rounds):
        turn = names[number % len(names) :] + names[: number % len(names)]
        for label, query in queries:
            counts = {}
            for name in turn:
                limit = (capped or {}).get(name)
                if limit is not None and (number < warmup or number - warmup >= limit):
                    continue
                started = time.perf_counter()
                counts[name] = contenders[name](query)
                elapsed = time.perf_counter() - started
                if timed_inside and name in timed_inside:
                    elapsed = timed_inside[name].seconds
                if number >= warmup:
                    samples[label][name].append(elapsed)
            if not any(counts.values()):
                raise BenchmarkError(f"{label}: no contender found anything for {query!r}")
    return samples


def _p50_p95(values: list[float]) -> str:
    return f"p50 {percentile(values, 50) * 1e3:.2f} ms, p95 {percentile(values, 95) * 1e3:.2f} ms"


def _results(where: str, samples: dict[str, dict[str, list[float]]], baseline: str) -> list[Result]:
    results: list[Result] = []
    for label, by_contender in samples.items():
        notes = {name: _p50_p95(values) for name, values in by_contender.items()}
        results += summarize(
            "search",
            f"{where}: {label}",
            by_contender,
            baseline=baseline,
            ops_per_round=1,
            notes=notes,
        )
    return results


def _mix_summary(where: str, samples: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = []
    contenders = next(iter(samples.values())).keys()
    for name in contenders:
        values = [
            v for label, by in samples.items() if not label.startswith("short") for v in by[name]
        ]
        lines.append(
            f"  {where} {name}: mix p50 {percentile(values, 50) * 1e3:.2f} ms, "
            f"p95 {percentile(values, 95) * 1e3:.2f} ms ({len(values)} searches)"
        )
    return lines


def measure(
    count: int,
    *,
    rounds: int,
    upstream: Path | None,
    upstream_python: str,
    upstream_rounds: int = 5,
    pg: Any = None,
) -> tuple[list[Result], list[str]]:
    results: list[Result] = []
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-search-") as scratch:
        folder = Path(scratch)
        path = folder / "state.db"
        took = build_sqlite(path, count)
        size = path.stat().st_size / 2**20
        lines.append(f"  built {count:,} messages in SQLite in {took:.1f} s ({size:.0f} MiB)")
        match, close_match = _sqlite_match(path)
        db = SessionDB(path)
        contenders: dict[str, Search] = {"sqlite3 MATCH": match, "SessionDB": _store(db)}
        inside: dict[str, _Upstream] = {}
        with contextlib.ExitStack() as stack:
            stack.callback(close_match)
            stack.callback(db.close)
            if upstream is not None and (upstream / "hermes_state.py").is_file():
                child = _Upstream(upstream, upstream_python, path, folder)
                stack.callback(child.close)
                contenders["upstream"] = child.search
                inside["upstream"] = child
            else:
                lines.append(
                    f"  upstream: skipped (no hermes_state.py in {upstream})"
                    if upstream
                    else f"  upstream: skipped (--upstream / {UPSTREAM_ENV} not given)"
                )
            cap = {"upstream": upstream_rounds}
            samples = _rounds(contenders, MIX, rounds, 3, inside, cap)
            short = _rounds(contenders, (SHORT_CJK,), max(3, rounds // 5), 1, inside, cap)
            results += _results(f"SQLite {count:,}", {**samples, **short}, "sqlite3 MATCH")
            lines += _mix_summary("SQLite", samples)
            if pg is not None:
                with fixtures.server_database(pg, at_head=False) as url:
                    from hermes_state import schema

                    schema.upgrade(url, "0007_routing_key_repair")
                    took = build_postgresql(url, count)
                    lines.append(f"  built {count:,} messages on PostgreSQL in {took:.1f} s")
                    with SessionDB(url=url) as server:
                        pair = {
                            "SessionDB (SQLite)": _store(db),
                            "SessionDB (PostgreSQL)": _store(server),
                        }
                        pg_samples = _rounds(pair, MIX, rounds, 3)
                        pg_short = _rounds(pair, (SHORT_CJK,), max(3, rounds // 5), 1)
                        results += _results(
                            f"PostgreSQL {count:,}",
                            {**pg_samples, **pg_short},
                            "SessionDB (SQLite)",
                        )
                        lines += _mix_summary("PostgreSQL", pg_samples)
            else:
                fixtures.skipping("search on PostgreSQL")
    return results, lines


def run(quick: bool) -> list[Result]:
    raw = os.environ.get(UPSTREAM_ENV, "").strip()
    results, lines = measure(
        10_000 if quick else 100_000,
        rounds=10 if quick else 30,
        upstream=Path(raw) if raw else None,
        upstream_python=os.environ.get(UPSTREAM_PYTHON_ENV, "").strip() or sys.executable,
        pg=fixtures.pg_server(),
    )
    for line in lines:
        print(line, file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.search", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--messages", type=int, default=1_000_000, help="fixture size (default 1,000,000)"
    )
    parser.add_argument("--rounds", type=int, default=30, help="measured rounds (default 30)")
    parser.add_argument("--upstream", type=Path, help="a folder holding upstream's hermes_state.py")
    parser.add_argument(
        "--upstream-python",
        default=sys.executable,
        help="the interpreter upstream's code runs with",
    )
    parser.add_argument(
        "--upstream-rounds", type=int, default=5, help="rounds upstream takes part in (default 5)"
    )
    parser.add_argument("--pg-url", help="also measure on this PostgreSQL server")
    args = parser.parse_args(argv)
    if args.pg_url:
        os.environ[fixtures.PG_URL_ENVS[0]] = args.pg_url
    results, lines = measure(
        args.messages,
        rounds=args.rounds,
        upstream=args.upstream,
        upstream_python=args.upstream_python,
        upstream_rounds=args.upstream_rounds,
        pg=fixtures.pg_server(),
    )
    print("\n".join(lines))
    print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
