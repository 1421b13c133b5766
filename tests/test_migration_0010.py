"""Revision 0010 (PostgreSQL): an update of a memory's terms rewrites only the postings that
changed, the index stays exact, and the revision goes up and down restoring 0009's function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem import SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from tests.search_index import async_problems

DATA = Path(__file__).resolve().parent.parent / "asyncmem/evaluation/data"
SHIPPED: dict[str, Any] = json.loads(
    (DATA / "asyncmem-conversations-v1.json").read_text(encoding="utf-8")
)
BEFORE = "0009_unchanged_terms"


def _postgresql_only(engine: AsyncEngine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL only: on SQLite the revision changes nothing")


async def _problems(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:

        async def fetch(sql: str) -> list[Any]:
            return [tuple(row) for row in await conn.execute(text(sql))]

        return await async_problems(fetch)


async def _id(engine: AsyncEngine, user_id: str, key: str) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(
            text('SELECT id FROM memories WHERE user_id = :u AND "key" = :k'),
            {"u": user_id, "k": key},
        )
        return int(found.scalar_one())


async def _versions(engine: AsyncEngine, memory_id: int) -> dict[str, str]:
    """Each posting's term and physical row version (a rewritten row gets another)."""
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT term, ctid::text AS at FROM search_terms WHERE memory_id = :m"),
            {"m": memory_id},
        )
        return {row.term: row.at for row in found}


async def _new_neighbour(engine: AsyncEngine, memory_id: int) -> dict[str, int]:
    """Give a turn's context one more term, as the turn after it does, and count what that
    did to ``search_terms`` (this transaction's own counters; rolled back)."""
    async with engine.connect() as conn, conn.begin() as transaction:
        context = (
            await conn.execute(text("SELECT context FROM memories WHERE id = :m"), {"m": memory_id})
        ).scalar_one()
        grown = json.dumps(json.loads(context or "{}") | {"zeppelin": 3})
        await conn.execute(
            text("UPDATE memories SET context = :c WHERE id = :m"), {"c": grown, "m": memory_id}
        )
        counts = await conn.execute(
            text(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del "
                "FROM pg_stat_xact_user_tables "
                "WHERE relid = 'search_terms'::regclass"
            )
        )
        row = counts.one()
        await transaction.rollback()
    return {"ins": row.n_tup_ins, "upd": row.n_tup_upd, "del": row.n_tup_del}


async def _function(engine: AsyncEngine) -> tuple[str, Any]:
    """The search trigger function's source and ``search_terms``' storage options."""
    async with engine.connect() as conn:
        source = (
            await conn.execute(
                text("SELECT prosrc FROM pg_proc WHERE proname = 'asyncmem_search_terms'")
            )
        ).scalar_one()
        options = (
            await conn.execute(
                text("SELECT reloptions FROM pg_class WHERE oid = 'search_terms'::regclass")
            )
        ).scalar_one()
        return str(source), options


async def test_a_changed_value_keeps_the_postings_of_its_unchanged_terms(
    database_url: str,
) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        _postgresql_only(engine)
        async with SQLBackend(database_url, auto_migrate=True) as backend:
            await backend.store("alice", "pet", "Miso naps beside warm radiators")
            pet = await _id(engine, "alice", "pet")
            before = await _versions(engine, pet)
            # Same word count: the unchanged terms keep their weight and the memory's length.
            await backend.store("alice", "pet", "Miso naps beside cold windows")
            after = await _versions(engine, pet)
            kept = set(before) & set(after)
            assert {"miso", "nap", "pet"} <= kept
            assert {term: after[term] for term in kept} == {term: before[term] for term in kept}
            assert set(before) - set(after)  # radiators, warm: deleted
            assert set(after) - set(before)  # windows, cold: inserted
            assert [e.key for e in await backend.query("alice", "radiators")] == []
            assert (await backend.query("alice", "windows"))[0].key == "pet"
        assert await _problems(engine) == []
    finally:
        await engine.dispose()


async def test_a_turn_after_a_turn_updates_its_postings_and_deletes_none(
    database_url: str,
) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        _postgresql_only(engine)
        async with SQLBackend(database_url, auto_migrate=True) as backend:
            for i in range(4):
                await backend.store(
                    "alice", f"t{i}", f"turn {i} about the garden shed", {"session": "s"}
                )
            last = await _id(engine, "alice", "t3")
            postings = len(await _versions(engine, last))
            # Every posting's length grows by the new context term: updated, none deleted.
            assert await _new_neighbour(engine, last) == {"ins": 1, "upd": postings, "del": 0}
            await migrate.downgrade(engine, BEFORE)
            # 0009's function deletes every posting of the turn and inserts them back.
            assert await _new_neighbour(engine, last) == {
                "ins": postings + 1,
                "upd": 0,
                "del": postings,
            }
            await migrate.upgrade(engine)
            await backend.store("alice", "t4", "turn 4 about the zeppelin", {"session": "s"})
            assert (await backend.query("alice", "zeppelin"))[0].key == "t4"
        assert await _problems(engine) == []
    finally:
        await engine.dispose()


async def _rows(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        return [
            tuple(row) for row in await conn.execute(text("SELECT * FROM memories ORDER BY id"))
        ]


async def test_0010_up_and_down_keeps_every_row_and_an_exact_index(database_url: str) -> None:
    """Turns appended before and after a round trip leave an exact index; the downgrade puts
    0009's function and storage options back as they were."""
    memories = SHIPPED["memories"]
    users = {memory["user_id"] for memory in memories}
    asked = [q for q in SHIPPED["queries"] if q["user_id"] in users][:60]
    half = len(memories) // 2
    engine = make_engine(normalize_url(database_url))
    try:
        await migrate.upgrade(engine, BEFORE)
        postgresql = engine.dialect.name == "postgresql"
        before = await _function(engine) if postgresql else None
        await migrate.upgrade(engine)
        assert await migrate.current(engine) == (migrate.HEAD,)
        if postgresql:
            source, options = await _function(engine)
            assert before is not None
            assert source != before[0]
            assert options == ["fillfactor=80"]
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            for memory in memories[:half]:
                await backend.store(
                    memory["user_id"], memory["key"], memory["value"], memory.get("metadata")
                )
        assert await _problems(engine) == []
        rows = await _rows(engine)

        await migrate.downgrade(engine, BEFORE)
        if postgresql:
            assert await _function(engine) == before
        assert await _rows(engine) == rows
        assert await _problems(engine) == []
        await migrate.upgrade(engine)
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            for memory in memories[half:]:
                await backend.store(
                    memory["user_id"], memory["key"], memory["value"], memory.get("metadata")
                )
            answers = [await backend.query(q["user_id"], q["question"]) for q in asked]
            assert sum(map(len, answers)) > 0
            for memory in memories[:40]:  # other text, then the same text again
                await backend.store(memory["user_id"], memory["key"], memory["value"] + " again")
                await backend.store(memory["user_id"], memory["key"], memory["value"] + " again")
        assert await _problems(engine) == []
    finally:
        await engine.dispose()
