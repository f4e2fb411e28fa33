"""Message search on every backend and every kind of store: ``search_messages`` (its hits,
snippets and context, its routes for words, CJK text, substrings and tool results, its
filters, orders and pages, and queries no backend may choke on) and
``search_sessions_by_id``; the FTS5 expression a query becomes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import update

from hermes_state import SessionDB
from hermes_state.errors import InvalidInputError, InvalidInputTypeError
from hermes_state.models import messages
from hermes_state.search_query import MAX_QUERY_CHARS, query_terms
from tests.support.stores import HandClock

KEYS = [
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
]


@pytest.fixture
def db(new_any_store: Callable[..., SessionDB]) -> SessionDB:
    return new_any_store(clock=HandClock(5_000.0))


def say(db: SessionDB, session_id: str, role: str, content: Any, at: float, **fields: Any) -> int:
    return db.append_message(session_id, role, content, timestamp=at, **fields)


def set_message(db: SessionDB, message_id: int, **values: Any) -> None:
    statement = update(messages).where(messages.c.id == message_id).values(**values)
    db._execute_write(lambda conn: conn.execute(statement))


def found(rows: list[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]


@pytest.fixture
def talk(db: SessionDB) -> dict[str, int]:
    """Two sessions of three sources' worth of messages, ids by name."""
    db.create_session("s-cli", "cli", model="m-1", started_at=900.0)
    db.create_session("s-tg", "telegram", model="m-2", started_at=950.0)
    return {
        "ask": say(db, "s-cli", "user", "How do I deploy the zanzibar ledger?", 1_000.0),
        "answer": say(db, "s-cli", "assistant", "Run the zanzibar deploy script twice.", 1_001.0),
        "thanks": say(db, "s-cli", "user", "thanks, that worked", 1_002.0),
        "tg": say(db, "s-tg", "user", "zanzibar on telegram, see src/main.py line 4", 1_003.0),
    }


# -- hits ---------------------------------------------------------------------------------------


def test_a_hit_has_upstreams_keys_a_marked_snippet_and_its_neighbours(
    db: SessionDB, talk: dict[str, int]
) -> None:
    [hit] = db.search_messages("deploy script")
    assert list(hit) == KEYS
    assert hit["id"] == talk["answer"]
    assert (hit["session_id"], hit["role"], hit["source"], hit["model"]) == (
        "s-cli",
        "assistant",
        "cli",
        "m-1",
    )
    assert hit["timestamp"] == 1_001.0
    assert hit["session_started"] == 900.0
    assert hit["tool_name"] is None
    assert ">>>deploy<<<" in hit["snippet"]
    assert ">>>script<<<" in hit["snippet"]
    assert hit["context"] == [
        {"role": "user", "content": "How do I deploy the zanzibar ledger?"},
        {"role": "assistant", "content": "Run the zanzibar deploy script twice."},
        {"role": "user", "content": "thanks, that worked"},
    ]


def test_context_stops_at_the_session_ends_and_shows_multimodal_text(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    first = say(db, "s1", "user", [{"type": "text", "text": "picture of a quokka"}], 10.0)
    say(db, "s1", "assistant", "x" * 500, 11.0)
    [hit] = db.search_messages("quokka")
    assert hit["id"] == first
    assert hit["context"][0] == {"role": "user", "content": "picture of a quokka"}
    assert hit["context"][1] == {"role": "assistant", "content": "x" * 200}


def test_fields_keeps_only_the_keys_asked_for_in_upstreams_order(
    db: SessionDB, talk: dict[str, int]
) -> None:
    rows = db.search_messages("ledger", fields=["snippet", "id"])
    assert rows == [{"id": talk["ask"], "snippet": rows[0]["snippet"]}]
    assert db.search_messages("ledger", fields=[]) == [{}]


def test_boolean_operators_phrases_and_prefixes(db: SessionDB, talk: dict[str, int]) -> None:
    assert set(found(db.search_messages("zanzibar"))) == {talk["ask"], talk["answer"], talk["tg"]}
    assert set(found(db.search_messages("ledger OR telegram"))) == {talk["ask"], talk["tg"]}
    assert set(found(db.search_messages("zanzibar NOT telegram"))) == {talk["ask"], talk["answer"]}
    assert found(db.search_messages('"deploy script"')) == [talk["answer"]]
    assert talk["thanks"] in found(db.search_messages("work*"))


@pytest.mark.parametrize("query", ["src/main.py", "main.py", "#4", "line,", "ledger?"])
def test_terms_with_punctuation_are_found(db: SessionDB, talk: dict[str, int], query: str) -> None:
    assert db.search_messages(query), query


@pytest.mark.parametrize(
    "query",
    ["", "   ", "!!!", "---", '""', "***", "AND", "OR NOT", "()", "%_%", "'", "\x00", ":^+{}"],
)
def test_a_query_of_punctuation_or_operators_alone_finds_nothing(
    db: SessionDB, talk: dict[str, int], query: str
) -> None:
    assert db.search_messages(query) == []


@pytest.mark.parametrize("char", list("!\"#$%&'(),-./:;<=>?@[\\]^`{|}~+*_"))
def test_no_character_is_a_syntax_error_on_any_backend(
    db: SessionDB, talk: dict[str, int], char: str
) -> None:
    for query in (f"zanzibar{char}ledger", f"{char}zanzibar", f"zanzibar {char}", char * 3):
        db.search_messages(query)
        db.search_messages(query, role_filter=["tool"])


def test_a_query_is_read_up_to_its_first_2048_characters(
    db: SessionDB, talk: dict[str, int]
) -> None:
    long_query = "zanzibar " + "x" * (MAX_QUERY_CHARS * 3)
    assert db.search_messages(long_query) == []  # the x-run is one term nobody wrote
    padded = "zanzibar" + " " * (MAX_QUERY_CHARS - 8) + "nowhere-to-be-found"
    assert len(found(db.search_messages(padded))) == 3  # what follows the cap is not read
    db.search_messages('"' * 5_000 + "(" * 5_000)


# -- CJK and substrings ---------------------------------------------------------------------


def test_cjk_terms_of_any_length_are_found(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    long_term = say(db, "s1", "user", "我们明天去大别山项目现场", 10.0)
    short_term = say(db, "s1", "assistant", "广西的桂林很美", 11.0)
    say(db, "s1", "user", "nothing here", 12.0)
    assert found(db.search_messages("大别山项目")) == [long_term]
    assert found(db.search_messages("桂林")) == [short_term]
    assert found(db.search_messages("别")) == [long_term]
    assert set(found(db.search_messages("广西 OR 大别山"))) == {long_term, short_term}
    [hit] = db.search_messages("大别山项目")
    assert "大别山项目" in hit["snippet"].replace(">>>", "").replace("<<<", "")


def test_a_latin_word_glued_to_cjk_text_is_found(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    glued = say(db, "s1", "user", "修改youer服务端配置", 10.0)
    assert found(db.search_messages("youer")) == [glued]


def test_korean_and_japanese_text_is_found(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    korean = say(db, "s1", "user", "안녕하세요 세계", 10.0)
    japanese = say(db, "s1", "user", "こんにちは世界", 11.0)
    assert found(db.search_messages("안녕하세요")) == [korean]
    assert found(db.search_messages("こんにちは")) == [japanese]


def test_tool_results_are_searched_whole_with_the_tool_role(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    output = "log line\n" * 2_000 + "the needle is at the very end"
    tool = say(db, "s1", "tool", output, 10.0, tool_name="terminal", tool_call_id="c1")
    say(db, "s1", "user", "a needle in a haystack", 11.0)
    rows = db.search_messages("needle", role_filter=["tool"])
    assert found(rows) == [tool]
    assert rows[0]["tool_name"] == "terminal"
    assert "needle" in rows[0]["snippet"]


def test_reasoning_is_searched_only_when_asked(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    thought = say(db, "s1", "assistant", "Done.", 10.0, reasoning="pondering the quokka")
    assert db.search_messages("quokka") == []
    assert found(db.search_messages("quokka", include_reasoning=True)) == [thought]


# -- filters, visibility, orders, pages ---------------------------------------------------------


def test_source_and_role_filters(db: SessionDB, talk: dict[str, int]) -> None:
    assert found(db.search_messages("zanzibar", source_filter=["telegram"])) == [talk["tg"]]
    assert set(found(db.search_messages("zanzibar", exclude_sources=["telegram"]))) == {
        talk["ask"],
        talk["answer"],
    }
    assert db.search_messages("zanzibar", source_filter=[]) == []  # upstream: IN () matches none
    assert len(db.search_messages("zanzibar", exclude_sources=[])) == 3
    assert found(db.search_messages("zanzibar", role_filter=["assistant"])) == [talk["answer"]]
    assert len(db.search_messages("zanzibar", role_filter=[])) == 3
    both = db.search_messages("zanzibar", source_filter=["cli"], role_filter=["user"])
    assert found(both) == [talk["ask"]]


def test_rewound_and_hidden_rows_are_left_out_compacted_ones_are_found(
    db: SessionDB, talk: dict[str, int]
) -> None:
    set_message(db, talk["ask"], active=0)
    set_message(db, talk["answer"], active=0, compacted=1)
    set_message(db, talk["tg"], display_kind="hidden")
    assert found(db.search_messages("zanzibar")) == [talk["answer"]]
    assert set(found(db.search_messages("zanzibar", include_inactive=True))) == {
        talk["ask"],
        talk["answer"],
    }


def test_newest_and_oldest_order_by_time(db: SessionDB, talk: dict[str, int]) -> None:
    newest = [talk["tg"], talk["answer"], talk["ask"]]
    assert found(db.search_messages("zanzibar", sort="newest")) == newest
    assert found(db.search_messages("zanzibar", sort=" OLDEST ")) == newest[::-1]
    assert set(found(db.search_messages("zanzibar", sort="sideways"))) == set(newest)


def test_relevance_puts_the_denser_match_first(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    say(db, "s1", "user", "quokka " + "filler words " * 40, 10.0)
    dense = say(db, "s1", "user", "quokka quokka quokka", 11.0)
    assert found(db.search_messages("quokka"))[0] == dense


def test_limit_and_offset_page_through_the_hits(db: SessionDB, talk: dict[str, int]) -> None:
    everything = found(db.search_messages("zanzibar", sort="oldest"))
    pages = [
        found(db.search_messages("zanzibar", sort="oldest", limit=2, offset=start))
        for start in (0, 2)
    ]
    assert pages == [everything[:2], everything[2:]]
    assert db.search_messages("zanzibar", limit=0) == []
    assert db.search_messages("zanzibar", offset=50) == []


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({"limit": -1}, InvalidInputError, "between 0 and 10000"),
        ({"limit": 10_001}, InvalidInputError, "between 0 and 10000"),
        ({"offset": -5}, InvalidInputError, "between 0 and 1000000"),
        ({"limit": "20"}, InvalidInputTypeError, "limit"),
        ({"source_filter": "cli"}, InvalidInputTypeError, "list of names"),
        ({"role_filter": [3]}, InvalidInputTypeError, "role_filter"),
        ({"fields": "id"}, InvalidInputTypeError, "collection of field names"),
        ({"fields": ["id", "content"]}, InvalidInputError, "unknown search result field"),
        ({"include_inactive": "yes"}, InvalidInputTypeError, "include_inactive"),
        ({"query": 7}, InvalidInputTypeError, "query"),
    ],
)
def test_bad_input_is_refused_with_what_to_do(
    db: SessionDB, arguments: dict[str, Any], error: type[Exception], says: str
) -> None:
    call: dict[str, Any] = {"query": "zanzibar", **arguments}
    with pytest.raises(error, match=says):
        db.search_messages(**call)


# -- sessions by id ---------------------------------------------------------------------------


def test_sessions_by_id_rank_exact_then_prefix_then_substring(db: SessionDB) -> None:
    for session_id, at in (("xab-1", 1.0), ("ab", 2.0), ("ab-2", 3.0), ("zz", 4.0)):
        db.create_session(session_id, "cli", started_at=at)
    assert [row["id"] for row in db.search_sessions_by_id("AB")] == ["ab", "ab-2", "xab-1"]
    assert [row["id"] for row in db.search_sessions_by_id("ab", limit=1)] == ["ab"]
    assert db.search_sessions_by_id("  ") == []
    assert db.search_sessions_by_id("ab", limit=0) == []


# -- the FTS5 expression ------------------------------------------------------------------------

_sanitize = SessionDB._sanitize_fts5_query


@pytest.mark.parametrize(
    ("query", "expression"),
    [
        ("hello world", "hello world"),
        ('"exact phrase"', '"exact phrase"'),
        ("os.path.join", '"os.path.join"'),
        ("scripts/deploy.sh", '"scripts/deploy.sh"'),
        ("user@example.com", '"user@example.com"'),
        ("61.2%", '"61.2%"'),
        ("chat-send*", '"chat-send"*'),
        ("deploy*", "deploy*"),
        ("TODO: fix", "TODO  fix"),
        ("func()", "func"),
        ("hello AND", "hello"),
        ("OR world", "world"),
        ("a OR OR b", "a OR  b"),
        ("issue --- main", "issue  main"),
        ("***", ""),
        ("C++", "C"),
        ("大别山项目", "大别山项目"),
    ],
)
def test_a_query_becomes_an_fts5_expression(query: str, expression: str) -> None:
    assert _sanitize(query) == expression


def test_every_expression_parses_in_fts5() -> None:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE VIRTUAL TABLE t USING fts5(content)")
    alphabet = "ab 大\"'*-.:/@%#()^+{}[]<>|~!?,;=$&\\`_\t\nANDORNOT"
    import random

    chooser = random.Random(24)
    for _ in range(3_000):
        query = "".join(chooser.choice(alphabet) for _ in range(chooser.randint(1, 16)))
        expression = _sanitize(query)
        if expression:
            connection.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expression,))


def test_the_servers_read_the_expression_as_or_groups_of_terms() -> None:
    groups = query_terms(_sanitize('deploy "the script" OR -x NOT ledger*'))
    assert [[(t.text, t.negated, t.phrase, t.prefix) for t in group] for group in groups] == [
        [("deploy", False, False, False), ("the script", False, True, False)],
        [("-x", False, True, False), ("ledger", True, False, True)],
    ]


def test_pages_past_the_ranked_candidates_still_reach_every_hit(db: SessionDB) -> None:
    """Relevance ranks a bounded set of the newest matches (1,000 on SQLite, 200 on
    PostgreSQL); a page reaching past it ranks as many as it reaches, so paging through a
    common word still returns every hit once."""
    db.create_session("s1", "cli")
    batch = [{"role": "user", "content": f"common word number {n}"} for n in range(1_030)]
    db.append_messages_batch("s1", batch)
    seen: list[int] = []
    for start in range(0, 1_100, 250):
        seen += found(db.search_messages("common", limit=250, offset=start, fields=["id"]))
    assert len(seen) == len(set(seen)) == 1_030
