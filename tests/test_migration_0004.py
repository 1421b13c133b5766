"""Revision 0004 (one turn after): contexts and the index follow the window, both ways."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem import SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.search import neighbour_words as neighbour_contexts
from tests.migrating import index_matches, insert_memories

TURNS = [
    ("t1", "Did you adopt anything from the shelter last weekend?"),
    ("t2", "Yes, a puppy!"),
    ("t3", "We named him Biscuit."),
    ("t4", "Biscuit sleeps all day."),
]


async def _contexts(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT context FROM memories ORDER BY id"))
        return [row.context for row in rows]


async def test_0003_contexts_become_one_turn_after_and_back(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        await _check_round_trip(engine)
    finally:
        await engine.dispose()


async def _check_round_trip(engine: AsyncEngine) -> None:
    await migrate.upgrade(engine, "0002_features")
    await insert_memories(
        engine, "alice", [(key, value, {"session": "s1"}) for key, value in TURNS]
    )
    values = [value for _, value in TURNS]
    await migrate.upgrade(engine, "0003_context")
    assert await _contexts(engine) == neighbour_contexts(values, before=2, after=2)
    assert await index_matches(engine, "biscuit") == {"t1", "t2", "t3", "t4"}

    await migrate.upgrade(engine, "0004_context_after")
    assert await _contexts(engine) == neighbour_contexts(values, before=2, after=1)
    assert await index_matches(engine, "biscuit") == {"t2", "t3", "t4"}
    async with engine.connect() as conn:
        versions = await conn.execute(text("SELECT count(*) FROM memory_versions"))
        assert versions.scalar_one() == 0  # a rewritten context is not a new version

    await migrate.downgrade(engine, "0003_context")
    assert await _contexts(engine) == neighbour_contexts(values, before=2, after=2)
    assert await index_matches(engine, "biscuit") == {"t1", "t2", "t3", "t4"}


async def test_the_store_writes_what_the_migration_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    async with SQLBackend(url) as backend:
        for key, value in TURNS:
            await backend.store("alice", key, value, {"session": "s1"})
    engine = make_engine(normalize_url(url))
    try:
        stored = await _contexts(engine)
        await migrate.downgrade(engine, "0003_context")
        await migrate.upgrade(engine)
        assert await _contexts(engine) == stored
    finally:
        await engine.dispose()
