"""Revision 0004 (one turn after): contexts and the index follow the window, both ways."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem import SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.search import neighbour_contexts
from tests.backends import PG_ENABLED, pg_database

TURNS = [
    ("t1", "Did you adopt anything from the shelter last weekend?"),
    ("t2", "Yes, a puppy!"),
    ("t3", "We named him Biscuit."),
    ("t4", "Biscuit sleeps all day."),
]


@pytest.fixture(params=["sqlite", *(["postgresql"] if PG_ENABLED else [])])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'memory.db'}"
        opened = make_engine(normalize_url(url))
        yield opened
        await opened.dispose()
    else:
        async with pg_database() as url:
            opened = make_engine(normalize_url(url))
            yield opened
            await opened.dispose()


async def _contexts(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT context FROM memories ORDER BY id"))
        return [row.context for row in rows]


async def _matching(engine: AsyncEngine, word: str) -> set[str]:
    """The keys the database's own index finds ``word`` in (value or context)."""
    sql = (
        "SELECT key FROM memories_fts WHERE memories_fts MATCH :w"
        if engine.dialect.name == "sqlite"
        else "SELECT key FROM memories WHERE search_vector @@ to_tsquery('english', :w)"
    )
    async with engine.connect() as conn:
        return {row.key for row in await conn.execute(text(sql), {"w": word})}


async def test_0003_contexts_become_one_turn_after_and_back(engine: AsyncEngine) -> None:
    await migrate.upgrade(engine, "0002_features")
    cast = "CAST(:m AS JSONB)" if engine.dialect.name == "postgresql" else ":m"
    async with engine.begin() as conn:
        for key, value in TURNS:
            await conn.execute(
                text(
                    "INSERT INTO memories (user_id, key, value, metadata, created_at, "
                    f"updated_at) VALUES ('alice', :k, :v, {cast}, 1, 1)"
                ),
                {"k": key, "v": value, "m": json.dumps({"session": "s1"})},
            )
    values = [value for _, value in TURNS]
    await migrate.upgrade(engine, "0003_context")
    assert await _contexts(engine) == neighbour_contexts(values, before=2, after=2)
    assert await _matching(engine, "biscuit") == {"t1", "t2", "t3", "t4"}

    await migrate.upgrade(engine, "0004_context_after")
    assert await _contexts(engine) == neighbour_contexts(values, before=2, after=1)
    assert await _matching(engine, "biscuit") == {"t2", "t3", "t4"}
    async with engine.connect() as conn:
        versions = await conn.execute(text("SELECT count(*) FROM memory_versions"))
        assert versions.scalar_one() == 0  # a rewritten context is not a new version

    await migrate.downgrade(engine, "0003_context")
    assert await _contexts(engine) == neighbour_contexts(values, before=2, after=2)
    assert await _matching(engine, "biscuit") == {"t1", "t2", "t3", "t4"}


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
