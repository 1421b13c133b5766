"""Revision 0009: an update that leaves a memory's index terms as they were leaves its
postings alone, the index stays exact either way, and the revision goes up and down over real
data without changing a row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


async def _problems(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:

        async def fetch(sql: str) -> list[Any]:
            return [tuple(row) for row in await conn.execute(text(sql))]

        return await async_problems(fetch)


async def _writes(engine: AsyncEngine, memory_id: int) -> tuple[Any, ...]:
    """What changes when a memory's postings are written again: on SQLite the user's count of
    writes since the last merge, on PostgreSQL the postings' physical row versions."""
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            found = await conn.execute(text("SELECT user_id, recent FROM search_users"))
        else:
            found = await conn.execute(
                text("SELECT term, ctid::text FROM search_terms WHERE memory_id = :m ORDER BY 1"),
                {"m": memory_id},
            )
        return tuple(tuple(row) for row in found)


async def _id(engine: AsyncEngine, user_id: str, key: str) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(
            text('SELECT id FROM memories WHERE user_id = :u AND "key" = :k'),
            {"u": user_id, "k": key},
        )
        return int(found.scalar_one())


async def test_storing_the_same_text_again_leaves_the_postings_alone(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        async with SQLBackend(database_url, auto_migrate=True) as backend:
            await backend.store("alice", "pet", "My cat Miso sleeps on the radiator")
            for i in range(3):
                await backend.store(
                    "alice", f"t{i}", f"turn {i} about the garden", {"session": "s"}
                )
            pet, turn = await _id(engine, "alice", "pet"), await _id(engine, "alice", "t1")
            before = await _writes(engine, pet), await _writes(engine, turn)

            await backend.store("alice", "pet", "My cat Miso sleeps on the radiator")
            await backend.store("alice", "t1", "turn 1 about the garden", {"session": "s"})
            assert (await _writes(engine, pet), await _writes(engine, turn)) == before

            # Other metadata with the same text: the speaker is indexed, so the terms change.
            await backend.store(
                "alice", "pet", "My cat Miso sleeps on the radiator", {"speaker": "Bo"}
            )
            assert await _writes(engine, pet) != before[0]
            assert (await backend.query("alice", "Bo"))[0].key == "pet"
            changed = await _writes(engine, pet)
            await backend.store("alice", "pet", "My dog Rex sleeps on the sofa")
            assert await _writes(engine, pet) != changed
            assert [e.key for e in await backend.query("alice", "Miso radiator")] == []
            assert (await backend.query("alice", "Rex"))[0].key == "pet"
        assert await _problems(engine) == []
    finally:
        await engine.dispose()


async def _rows(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        return [
            tuple(row) for row in await conn.execute(text("SELECT * FROM memories ORDER BY id"))
        ]


async def test_0009_up_and_down_keeps_every_row_and_an_exact_index(database_url: str) -> None:
    memories = SHIPPED["memories"]
    users = {memory["user_id"] for memory in memories}
    asked = [q for q in SHIPPED["queries"] if q["user_id"] in users][:60]
    engine = make_engine(normalize_url(database_url))
    try:
        async with SQLBackend(database_url, auto_migrate=True) as backend:
            for memory in memories:
                await backend.store(
                    memory["user_id"], memory["key"], memory["value"], memory.get("metadata")
                )
            before = [await backend.query(q["user_id"], q["question"]) for q in asked]
        rows = await _rows(engine)
        await migrate.downgrade(engine, "0008_append_turn")
        # 0008's triggers rewrite the postings on every update of the three columns.
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE memories SET words = words, context = context, length = length")
            )
        assert await _problems(engine) == []

        await migrate.upgrade(engine)
        assert await migrate.current(engine) == (migrate.HEAD,)
        assert await _rows(engine) == rows
        assert await _problems(engine) == []
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            assert [await backend.query(q["user_id"], q["question"]) for q in asked] == before
            assert sum(map(len, before)) > 0
            for memory in memories[:40]:  # the same text again, then other text
                await backend.store(memory["user_id"], memory["key"], memory["value"])
                await backend.store(memory["user_id"], memory["key"], memory["value"] + " again")
        assert await _problems(engine) == []
    finally:
        await engine.dispose()
