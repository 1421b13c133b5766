"""Conversation turns: neighbour context, speaker and date words, kept right through every write."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from asyncmem import MemoryEntry, SQLBackend
from asyncmem.sql import conversations, search, statements
from asyncmem.sql.models import Memory
from asyncmem.sql.search import facets_of, session_of
from asyncmem.sql.statements import _DIALECTS, compile_sql
from asyncmem.sql.terms import neighbour_contexts, question_terms
from tests.backends import BACKEND_FACTORIES

SQL_BACKENDS = [name for name in ("sqlite", "postgresql") if name in BACKEND_FACTORIES]


@pytest.fixture(params=SQL_BACKENDS)
async def sql(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SQLBackend]:
    async with BACKEND_FACTORIES[request.param](tmp_path) as opened:
        assert isinstance(opened, SQLBackend)
        yield opened


@dataclass(frozen=True)
class Row:
    id: int
    user_id: str
    key: str
    value: str
    session: str | None
    context: str


async def _rows(backend: SQLBackend) -> list[Any]:
    statement = select(
        Memory.id, Memory.user_id, Memory.key, Memory.value, Memory.session, Memory.context
    ).order_by(Memory.id)
    rows = await backend._driver.fetch(compile_sql(statement, _DIALECTS[backend.dialect]), ())
    return [Row(*row) for row in rows]


def _expected_contexts(rows: list[Any]) -> dict[str, str]:
    """Every row's context computed from scratch: what the incremental upkeep must equal."""
    conversations: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        if row.session is not None:
            conversations.setdefault((row.user_id, row.session), []).append(row)
    expected = {f"{row.user_id}/{row.key}": "" for row in rows}
    for turns in conversations.values():
        for row, context in zip(turns, neighbour_contexts([t.value for t in turns]), strict=True):
            expected[f"{row.user_id}/{row.key}"] = context
    return expected


async def _check_contexts(backend: SQLBackend) -> None:
    rows = await _rows(backend)
    actual = {f"{row.user_id}/{row.key}": row.context for row in rows}
    assert actual == _expected_contexts(rows)


async def test_an_answer_is_found_through_the_question_before_it(sql: SQLBackend) -> None:
    turns = [
        ("t1", "Did you adopt anything from the shelter last weekend?"),
        ("t2", "Yes, a puppy!"),
        ("t3", "I also repainted the kitchen a pale green."),
    ]
    for key, value in turns:
        await sql.store("alice", key, value, {"session": "s1"})
    await sql.store("alice", "other", "My sister lives in Toronto.")
    keys = [hit.key for hit in await sql.query("alice", "What did I adopt from the shelter?")]
    assert keys[0] == "t1"
    assert "t2" in keys
    assert "other" not in keys


async def test_context_follows_updates_deletes_and_moves(sql: SQLBackend) -> None:
    for i in range(6):
        await sql.store("alice", f"t{i}", f"turn {i} word{i}", {"session": "a"})
    await _check_contexts(sql)
    await sql.store("alice", "t2", "turn 2 rewritten", {"session": "a"})
    await _check_contexts(sql)
    assert await sql.delete("alice", "t3")
    await _check_contexts(sql)
    await sql.store("alice", "t1", "turn 1 moved", {"session": "b"})
    await _check_contexts(sql)
    await sql.store("alice", "t4", "turn 4 plain now")
    await _check_contexts(sql)
    keys = [hit.key for hit in await sql.query("alice", "word3")]
    assert keys == []


async def test_context_never_crosses_users_or_sessions(sql: SQLBackend) -> None:
    await sql.store("alice", "a1", "alpaca farming", {"session": 1})
    await sql.store("bob", "b1", "bobsleigh racing", {"session": 1})
    await sql.store("alice", "a2", "a short reply", {"session": "1"})
    await sql.store("alice", "a3", "another reply", {"session": 1})
    await _check_contexts(sql)
    assert [hit.key for hit in await sql.query("bob", "alpaca")] == []
    assert [hit.key for hit in await sql.query("alice", "bobsleigh")] == []
    assert "a2" not in [hit.key for hit in await sql.query("alice", "alpaca")]
    assert "a3" in [hit.key for hit in await sql.query("alice", "alpaca")]


async def test_random_writes_keep_every_context_exact(sql: SQLBackend) -> None:
    rng = random.Random(11)
    users, sessions = ["alice", "bob"], ["x", "y", None]
    for step in range(120):
        user, key = rng.choice(users), f"k{rng.randrange(15)}"
        if rng.random() < 0.2:
            await sql.delete(user, key)
        else:
            session = rng.choice(sessions)
            metadata = {} if session is None else {"session": session}
            await sql.store(user, key, f"value {step} w{rng.randrange(50)}", metadata)
    await _check_contexts(sql)
    await sql.forget_user("bob")
    await _check_contexts(sql)


@pytest.mark.parametrize(("before", "after"), [(1, 2), (3, 0), (0, 1), (2, 2)])
async def test_every_window_shape_keeps_contexts_exact(
    before: int, after: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The upkeep reads and rewrites only the turns a change can reach; a window that is not
    # the shipped one (before ≠ after) finds a wrong reach at once, checked after every write.
    monkeypatch.setattr(search, "CONTEXT_BEFORE", before)
    monkeypatch.setattr(search, "CONTEXT_AFTER", after)
    statements.statements_for.cache_clear()
    try:
        rng = random.Random(before * 10 + after)
        async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
            for step in range(80):
                key = f"k{rng.randrange(10)}"
                if rng.random() < 0.25:
                    await backend.delete("alice", key)
                else:
                    session = rng.choice(["x", "x", "y", None])
                    metadata = {} if session is None else {"session": session}
                    await backend.store("alice", key, f"v{step} w{rng.randrange(40)}", metadata)
                await _check_contexts(backend)
    finally:
        statements.statements_for.cache_clear()


async def test_concurrent_turns_of_one_conversation_keep_contexts_exact(sql: SQLBackend) -> None:
    await asyncio.gather(
        *(sql.store("alice", f"t{i}", f"turn {i}", {"session": "s"}) for i in range(24)),
        *(sql.delete("alice", f"t{i}") for i in range(0, 24, 5)),
        *(sql.store("alice", f"t{i}", f"moved {i}", {"session": "z"}) for i in range(1, 24, 7)),
    )
    await _check_contexts(sql)


async def test_a_turn_store_that_fails_midway_changes_nothing(
    sql: SQLBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        await sql.store("alice", f"t{i}", f"turn {i} word{i}", {"session": "s"})
    before = await _rows(sql)

    async def broken(*args: Any) -> None:
        raise RuntimeError("after the upsert, before the neighbours")

    async def the_long_way(*args: Any) -> None:
        return None

    # PostgreSQL's one-statement path for a new last turn is all or nothing by itself (see
    # test_write_faults); here the transaction every other turn write takes.
    monkeypatch.setattr(conversations, "append_turn", the_long_way)
    monkeypatch.setattr(conversations, "_write_contexts", broken)
    with pytest.raises(RuntimeError):
        await sql.store("alice", "t3", "turn 3 word3", {"session": "s"})
    with pytest.raises(RuntimeError):
        await sql.store("alice", "t1", "turn 1 rewritten", {"session": "s"})
    assert await _rows(sql) == before
    monkeypatch.undo()
    await sql.store("alice", "t3", "turn 3 word3", {"session": "s"})
    await _check_contexts(sql)


class _Sent:
    """A fault hook that fails nothing and counts the statements a call sends."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, sql: Any) -> None:
        self.texts.append(sql.text)


@pytest.mark.skipif("postgresql" not in BACKEND_FACTORIES, reason="PostgreSQL is off")
async def test_postgresql_stores_a_new_last_turn_in_one_statement(tmp_path: Path) -> None:
    async with BACKEND_FACTORIES["postgresql"](tmp_path) as sql:
        assert isinstance(sql, SQLBackend)
        sent = _Sent()
        sql._driver.fault_hook = sent
        for i in range(6):
            sent.texts.clear()
            await sql.store("alice", f"t{i}", f"turn {i} word{i}", {"session": "s"})
            assert len(sent.texts) == 1, (i, sent.texts)
        await _check_contexts(sql)
        # Stored again, or moved: the transaction (BEGIN and the lock are one trip).
        sent.texts.clear()
        await sql.store("alice", "t2", "turn 2 again", {"session": "s"})
        assert len(sent.texts) > 1
        await _check_contexts(sql)
        # Another store (another process) added a turn: this one's guess is stale, so the
        # function writes nothing, the last turns are read, and the write goes through.
        async with SQLBackend(sql.url, schema=sql.schema) as other:
            await other.store("alice", "t6", "turn 6 word6", {"session": "s"})
        sent.texts.clear()
        await sql.store("alice", "t7", "turn 7 word7", {"session": "s"})
        assert len(sent.texts) == 3
        await _check_contexts(sql)
        sent.texts.clear()
        await sql.store("alice", "t8", "turn 8 word8", {"session": "s"})
        assert len(sent.texts) == 1
        await _check_contexts(sql)
        sql._driver.fault_hook = None


@pytest.mark.skipif("postgresql" not in BACKEND_FACTORIES, reason="PostgreSQL is off")
async def test_two_postgresql_stores_writing_one_conversation_keep_contexts_exact(
    tmp_path: Path,
) -> None:
    """Each store's remembered last turns go stale as the other writes: every write is still
    exact, in turn and concurrently."""
    async with BACKEND_FACTORIES["postgresql"](tmp_path) as sql:
        assert isinstance(sql, SQLBackend)
        async with SQLBackend(sql.url, schema=sql.schema) as other:
            rng = random.Random(3)
            stores = [sql, other]
            for step in range(60):
                store, key = rng.choice(stores), f"k{rng.randrange(20)}"
                if rng.random() < 0.15:
                    await store.delete("alice", key)
                else:
                    session = rng.choice(["x", "x", "y"])
                    await store.store(
                        "alice", key, f"v{step} w{rng.randrange(30)}", {"session": session}
                    )
            await _check_contexts(sql)
            await asyncio.gather(
                *(
                    stores[i % 2].store("alice", f"c{i}", f"turn {i} w{i}", {"session": "x"})
                    for i in range(30)
                )
            )
            await _check_contexts(sql)


async def test_sqlite_one_trip_transaction_refuses_other_awaits(tmp_path: Path) -> None:
    async with SQLBackend(f"sqlite:///{tmp_path}/m.db") as backend:
        upsert = backend._sql.upsert

        async def body(transaction: Any) -> None:
            args = upsert.args(
                user_id="u",
                key="k",
                value="v",
                metadata="{}",
                context="",
                now=1.0,
                facets="",
                words="",
                length=1,
                ttl=None,
                session=None,
            )
            await transaction.fetch(upsert, args)
            await asyncio.sleep(0)

        with pytest.raises(RuntimeError, match="awaited something else"):
            await backend._driver.atomic(body)
        assert await backend.retrieve("u", "k") is None
        await backend.store("u", "k", "still writable", {"session": "s"})
        assert (await backend.query("u", "writable"))[0].key == "k"


async def test_speaker_and_date_words_are_searchable(sql: SQLBackend) -> None:
    await sql.store(
        "alice",
        "t1",
        "We finally booked the flights.",
        {"session": "s", "speaker": "Melanie Ortiz", "date": "1:56 pm on 8 May, 2023"},
    )
    await sql.store(
        "alice", "t2", "The flights were cheap.", {"session": "t", "date": "2023-06-01"}
    )
    assert (await sql.query("alice", "flights in May"))[0].key == "t1"
    assert (await sql.query("alice", "flights in June"))[0].key == "t2"
    assert [hit.key for hit in await sql.query("alice", "What did Melanie say?")] == ["t1"]
    assert [hit.key for hit in await sql.query("alice", "Ortiz")] == ["t1"]


def test_facets_and_sessions_from_metadata() -> None:
    assert facets_of({"speaker": "Ann", "date": "2023-05-08"}) == (
        "Ann 2023-05-08 monday 8 may 2023"
    )
    assert facets_of({"speaker": True, "date": ["2023-05-08"]}) == ""
    assert session_of({"session": 7}) == "7"


async def test_batches_keep_every_context_exact(sql: SQLBackend) -> None:
    await sql.store("alice", "t0", "first words", {"session": "a"})
    await sql.store("alice", "p", "a plain fact")
    await sql.store_many(
        "alice",
        [
            {"key": "t1", "value": "second words", "metadata": {"session": "a"}},
            {"key": "t0", "value": "first rewritten", "metadata": {"session": "b"}},
            {"key": "p", "value": "now a turn", "metadata": {"session": "a"}},
            {"key": "t2", "value": "third words", "metadata": {"session": "a"}},
        ],
    )
    await _check_contexts(sql)
    await sql.store_many("alice", [{"key": "t1", "value": "left the chat"}])
    await _check_contexts(sql)
    assert await sql.delete_many("alice", ["t2", "p"]) == 2
    await _check_contexts(sql)
    await sql.import_entries(
        [
            MemoryEntry("bob", "i0", "imported one", {"session": 1}, 1.0, 1.0),
            MemoryEntry("bob", "i1", "imported two", {"session": 1}, 2.0, 2.0),
            MemoryEntry("alice", "t0", "back in a", {"session": "a"}, 3.0, 3.0),
        ]
    )
    await _check_contexts(sql)
    await sql.import_entries([MemoryEntry("bob", "i0", "plain now", {}, 4.0, 4.0)])
    await _check_contexts(sql)


async def test_a_neighbour_arriving_is_not_a_new_version(sql: SQLBackend) -> None:
    await sql.store("alice", "t1", "Did you adopt anything?", {"session": "s"})
    for i in range(2, 6):
        await sql.store("alice", f"t{i}", f"reply {i}", {"session": "s"})
    assert [entry.value for entry in await sql.history("alice", "t1")] == [
        "Did you adopt anything?"
    ]
    await sql.store("alice", "t1", "Did you adopt a cat?", {"session": "s"})
    assert len(await sql.history("alice", "t1")) == 2


async def test_filters_and_expiry_apply_to_ranked_turns(sql: SQLBackend) -> None:
    await sql.store("alice", "t1", "Did you adopt anything?", {"session": "s", "tag": "x"})
    await sql.store("alice", "t2", "Yes, a puppy!", {"session": "s", "tag": "y"})
    await sql.store("alice", "t3", "adopt adopt", {"session": "s", "tag": "y"}, ttl=0.001)
    await asyncio.sleep(0.01)
    keys = [hit.key for hit in await sql.query("alice", "adopt", where={"tag": "y"})]
    assert keys == ["t2"]


async def test_purged_turns_leave_their_neighbours_contexts(sql: SQLBackend) -> None:
    await sql.store("alice", "t1", "first turn", {"session": "s"})
    await sql.store("alice", "t2", "zebra crossing", {"session": "s"}, ttl=0.001)
    await sql.store("alice", "t3", "third turn", {"session": "s"})
    await sql.store("alice", "p", "a plain fact", ttl=0.001)
    await asyncio.sleep(0.01)
    assert await sql.purge_expired() == 2
    await _check_contexts(sql)
    assert await sql.query("alice", "zebra") == []


async def test_turns_stay_exact_without_aiosqlite_private_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should aiosqlite drop the private names the one-trip path uses, turns still work."""
    from asyncmem.sql import drivers

    monkeypatch.setattr(drivers, "_inline_runner", lambda writer: None)
    async with SQLBackend(f"sqlite:///{tmp_path}/m.db") as sql:
        for i in range(5):
            await sql.store("alice", f"t{i}", f"turn {i} word{i}", {"session": "s"})
        await sql.delete("alice", "t2")
        await _check_contexts(sql)
        assert (await sql.query("alice", "word3"))[0].key == "t3"


def test_the_one_trip_path_finds_aiosqlite_internals() -> None:
    """The fast path is in use with the aiosqlite this project installs."""
    import sqlite3

    import aiosqlite

    from asyncmem.sql import drivers

    async def probe() -> bool:
        async with aiosqlite.connect(":memory:") as connection:
            found = drivers._inline_runner(connection)
            return found is not None and isinstance(found[1], sqlite3.Connection)

    assert asyncio.run(probe())


async def test_the_rerank_reads_the_query_columns_as_it_would_the_metadata(
    sql: SQLBackend,
) -> None:
    """``query`` re-ranks from its own session, speaker and caption columns without decoding
    each candidate's metadata: the same order and scores as the re-rank over the decoded
    metadata, whatever JSON types those keys hold."""
    shapes: list[dict[str, Any]] = [
        {"session": 1, "speaker": "Ann Lee"},
        {"session": "1", "speaker": "Bo"},
        {"session": 1.5, "speaker": 7},
        {"session": True, "caption": "a red kite over the dunes"},
        {"session": {"nested": 1}, "caption": ["not", "a", "string"]},
        {"speaker": None, "caption": 3},
        {"session": 1, "caption": "kite festival"},
        {},
    ]
    for i in range(40):
        await sql.store(
            "alice",
            f"m{i}",
            f"turn {i}: Ann flew the kite {'again ' * (i % 4)}near the dunes",
            shapes[i % len(shapes)],
        )
    question = "what did Ann say about the kite and the dunes?"
    found = await sql.query("alice", question, limit=10)
    terms = search.query_terms(question)
    asked = question_terms(terms)
    sql_text, _ = sql._filter("query", ())
    rows = await sql._fetch(
        "query",
        sql_text,
        sql_text.args(
            terms=json.dumps(asked) if sql.dialect == "sqlite" else asked,
            user_id="alice",
            limit=search.candidate_count(10),
            now=time.time(),
        ),
    )
    metadata = [
        json.loads(row["metadata"]) if isinstance(row["metadata"], str) else row["metadata"]
        for row in rows
    ]
    expected = search.rerank(
        terms,
        [float(row["score"]) for row in rows],
        metadata,
        10,
        values=[row["value"] for row in rows],
        temporal=search.is_temporal(question),
    )
    assert [(hit.key, hit.score) for hit in found] == [
        (rows[i]["key"], pytest.approx(score)) for i, score in expected
    ]
    assert {json.dumps(hit.metadata, sort_keys=True) for hit in found} <= {
        json.dumps(shape, sort_keys=True) for shape in shapes
    }
