"""The compiled SQL the store sends to the drivers, and the question → search text functions.

These pin the SQLAlchemy behaviour the fast path relies on: compiled text with positional
placeholders and ``positiontup`` giving their order.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncmem import SQLBackend
from asyncmem.sql.compiled import COMPILED_FILE, as_json, compiled_for, load_statements
from asyncmem.sql.search import MAX_TERMS, fts5_expression, query_terms, tsquery_expression
from asyncmem.sql.statements import statements_for

PLACEHOLDER = {"sqlite": re.compile(r"\?"), "postgresql": re.compile(r"\$(\d+)")}


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_every_statement_binds_its_parameters_in_order(dialect: str) -> None:
    statements = statements_for(dialect)
    now = {"now"} if dialect == "sqlite" else set()
    upsert = {"user_id", "key", "value", "metadata", "ttl", "session", "context", "facets"}
    upsert |= {"words", "length"} | now
    expected = {
        "upsert": upsert,
        "upsert_many": {"user_id", "items"} | now,
        "retrieve": {"user_id", "key"} | now,
        "query": {"terms", "user_id", "limit"} | now,
        "list_keys": {"user_id", "limit", "offset"} | now,
        "delete": {"user_id", "key"} | now,
        "delete_many": {"user_id", "keys"} | now,
        "forget_user": {"user_id"} | now,
        "history": {"user_id", "key", "limit"} | now,
        "upsert_plain": upsert,
        "delete_plain": {"user_id", "key"} | now,
        "clock": now,
        "expired_turn_users": {"cutoff"},
        "purge_expired": {"cutoff"},
        "purge_expired_versions": {"cutoff"},
        "purge_expired_turns": {"cutoff"},
        "turns_tail": {"user_id", "session"},
        "turns_before": {"user_id", "session", "around"},
        "turns_from": {"user_id", "session", "around"},
        "turns_all": {"user_id", "session"},
        "set_context": {"id", "context"},
        "set_session": {"id", "new_session"},
        "clear_session": {"id", "session"},
        "set_setting": {"name", "value"},
        "ping": set(),
    }
    for name, wanted in expected.items():
        sql = getattr(statements, name)
        assert wanted <= set(sql.names), name
        assert set(sql.names) - wanted <= set(sql.defaults), name
        found = PLACEHOLDER[dialect].findall(sql.text)
        if dialect == "sqlite":
            assert len(found) == len(sql.names), name
        else:
            assert sorted({int(n) for n in found}) == list(range(1, len(sql.names) + 1)), name


def test_arguments_follow_the_compiled_order() -> None:
    upsert = statements_for("sqlite").upsert
    args = upsert.args(
        user_id="u",
        key="k",
        value="v",
        metadata="{}",
        now=1.5,
        ttl=None,
        session='"s"',
        context="c",
        facets="f",
        words="w",
        length=3,
    )
    assert dict(zip(upsert.names, args, strict=True)) == {
        "user_id": "u",
        "key": "k",
        "value": "v",
        "metadata": "{}",
        "now": 1.5,
        "ttl": None,
        "session": '"s"',
        "context": "c",
        "facets": "f",
        "words": "w",
        "length": 3,
    }
    query = statements_for("sqlite").query
    assert query.args(terms="[]", user_id="u", limit=3, now=1.0)[-1] == 0  # the OFFSET default


def test_statements_are_compiled_once() -> None:
    assert statements_for("sqlite") is statements_for("sqlite")


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("What is the name of her cat?", ["name", "cat"]),
        ("Cats, CATS and cats!", ["cats"]),
        ("don't stop", ["stop"]),
        ("snake_case and kebab-case", ["snake", "case", "kebab"]),
        ("Café ÉCOLE", ["café", "école"]),
        ("cafe\u0301", ["café"]),
        ("ﬁle", ["file"]),
        ("Где моя кошка", ["где", "моя", "кошка"]),
        ("", []),
        ("the of and", []),
        ("What is the name of my CAT, the cat?", ["name", "cat"]),
        ("Как зовут кошку", ["как", "зовут", "кошку"]),
        ('"; DROP TABLE x; --', ["drop", "table", "x"]),
        ("NEAR(a b) OR c*", ["near", "b", "c"]),
        ("\x00\ud800", []),
        ("100% of 2_000", ["100", "2", "000"]),
        ("मेरी बिल्ली का नाम?", ["मेरी", "बिल्ली", "का", "नाम"]),
        ("என் பூனை", ["என்", "பூனை"]),
        ("ذهبتُ إلى المدرسةِ", ["ذهبتُ", "إلى", "المدرسةِ"]),
        ("İSTANBUL'a İzmir", ["istanbul", "izmir"]),
        ("\u0301cat \u20dd", ["cat"]),
        ("cat\ufe0f ❤️ 1\ufe0f", ["cat", "1"]),
        ("🐈 🎹 ✨ — … ¿? «»", []),
    ],
)
def test_query_terms(text: str, terms: list[str]) -> None:
    assert query_terms(text) == terms


def test_query_terms_are_capped() -> None:
    words = " ".join(f"word{i}" for i in range(500))
    assert query_terms(words) == [f"word{i}" for i in range(MAX_TERMS)]


def test_expressions_quote_every_term() -> None:
    assert fts5_expression(["cat", "piano"]) == '"cat" OR "piano"'
    assert fts5_expression(['a"b']) == '"a""b"'
    assert tsquery_expression(["cat", "piano"]) == "'cat' | 'piano'"
    assert tsquery_expression(["it's"]) == "'it''s'"
    assert tsquery_expression(["a\\b"]) == "'a\\\\b'"


async def test_rows_have_the_columns_their_statements_declare(sql_store: SQLBackend) -> None:
    """Callers read rows by name; each statement declares those names (``SQL.columns``), and
    the rows the driver returns have exactly them, in that order."""
    sql = sql_store._sql
    await sql_store.store("alice", "k", "a grey cat", {"session": "s"})
    driver = sql_store._driver
    now = time.time()
    cases = [
        (sql.retrieve, sql.retrieve.args(user_id="alice", key="k", now=now)),
        (sql.query, sql.query.args(terms=_terms(sql_store), user_id="alice", limit=5, now=now)),
        (sql.list_keys, sql.list_keys.args(user_id="alice", limit=5, offset=0, now=now)),
        (sql.turns_tail, sql.turns_tail.args(user_id="alice", session='"s"')),
        (sql.clock, sql.clock.args(now=now)),
    ]
    for statement, args in cases:
        rows = await driver.fetch(statement, args)
        assert rows, statement.text
        assert list(rows[0].keys()) == list(statement.columns), statement.text
    upsert = sql.upsert_plain
    values = {
        "user_id": "alice",
        "key": "p",
        "value": "v",
        "metadata": "{}",
        "ttl": None,
        "session": None,
    }
    rows = await driver.fetch(
        upsert,
        upsert.args(context="", facets="", words="", length=1, now=now, **values),
        write=True,
    )
    assert list(rows[0].keys()) == list(upsert.columns)
    rows = await driver.fetch(
        sql.delete, sql.delete.args(user_id="alice", key="p", now=now), write=True
    )
    assert list(rows[0].keys()) == list(sql.delete.columns)


def _terms(backend: SQLBackend) -> str | list[str]:
    return '["cat"]' if backend.dialect == "sqlite" else ["cat"]


def test_the_shipped_compiled_statements_are_todays() -> None:
    """``compiled.json`` is what compiling the statements gives now: after changing a
    statement, run ``python -m asyncmem.sql.statements``."""
    shipped = json.loads(COMPILED_FILE.read_text(encoding="utf-8"))
    assert shipped["compiled_for"] == compiled_for()
    for dialect in ("sqlite", "postgresql"):
        assert shipped[dialect] == as_json(statements_for(dialect)), dialect
        assert load_statements(dialect) == statements_for(dialect)


def test_opening_a_store_at_head_needs_no_sqlalchemy(tmp_path: Path) -> None:
    """A process that opens an existing SQLite store, stores, queries and deletes (turns
    included) never imports SQLAlchemy or Alembic: that is most of a cold start."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    script = f"""
import asyncio, sys
from asyncmem import SQLBackend
async def main():
    async with SQLBackend({url!r}) as backend:
        await backend.store("alice", "t0", "a turn about cats", {{"session": "s"}})
        await backend.store("alice", "fact", "a grey cat")
        assert [hit.key for hit in await backend.query("alice", "grey cat")][0] == "fact"
        assert await backend.delete("alice", "t0")
        await backend.forget_user("alice")
asyncio.run(main())
print(sorted(name for name in ("sqlalchemy", "alembic") if name in sys.modules))
"""
    run = [sys.executable, "-c", script]
    first = subprocess.run(run, capture_output=True, text=True, check=True, timeout=120)
    assert first.stdout.strip() == "['alembic', 'sqlalchemy']"  # a new file is migrated
    again = subprocess.run(run, capture_output=True, text=True, check=True, timeout=120)
    assert again.stdout.strip() == "[]"
