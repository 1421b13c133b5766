"""The databases the shared backends start from (tests/templates.py): each test's store is
empty, at head and its own, and a schema a test changed is never handed out again."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from pathlib import Path

import asyncpg
import pytest

from asyncmem import SQLBackend
from asyncmem.sql.migrate import head_revision
from tests.backends import PG_ENABLED, PG_URL, sqlite_backend
from tests.templates import PostgresPool


def _revision(path: Path) -> list[str]:
    with sqlite3.connect(path) as raw:
        return [row[0] for row in raw.execute("SELECT version_num FROM alembic_version")]


async def test_a_sqlite_store_starts_as_a_private_copy_at_head(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    async with sqlite_backend(first) as store:
        assert stat.S_IMODE((first / "memory.db").stat().st_mode) == 0o600
        await store.store("alice", "pet", "a grey cat")
    async with sqlite_backend(second) as store:
        assert await store.list_keys("alice") == []
    async with sqlite_backend(first) as store:  # reopening keeps what the test wrote
        assert await store.list_keys("alice") == ["pet"]
    assert _revision(first / "memory.db") == [head_revision()]


async def _fetch(schema: str, sql: str) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(PG_URL.replace("+asyncpg", ""), timeout=10)
    try:
        return list(await connection.fetch(sql.replace("{schema}", f'"{schema}"')))
    finally:
        await connection.close()


async def _use(pool: PostgresPool) -> str:
    """Take a schema, write to every table, give it back."""
    schema = await pool.acquire()
    async with SQLBackend(PG_URL, schema=schema, max_versions=2) as store:
        for i in range(3):
            await store.store("alice", "pet", f"version {i}", {"session": "s"})
    pool.release(schema)
    return schema


async def _state(schema: str) -> dict[str, int]:
    counts = await _fetch(
        schema,
        "SELECT (SELECT count(*) FROM {schema}.memories) AS memories, "
        "(SELECT count(*) FROM {schema}.memory_versions) AS versions, "
        "(SELECT count(*) FROM {schema}.asyncmem_settings) AS settings, "
        "(SELECT count(*) FROM {schema}.alembic_version) AS revisions",
    )
    return dict(counts[0])


@pytest.mark.skipif(not PG_ENABLED, reason="PostgreSQL tests are switched off")
def test_a_postgresql_schema_comes_back_empty_or_not_at_all() -> None:
    pool = PostgresPool(PG_URL)
    try:
        used = asyncio.run(_use(pool))
        pool.settle()
        assert asyncio.run(_state(used)) == {
            "memories": 0,
            "versions": 0,
            "settings": 0,
            "revisions": 1,
        }

        async def again() -> tuple[str, int]:
            schema = await pool.acquire()
            async with SQLBackend(PG_URL, schema=schema) as store:
                await store.store("bob", "k", "v")
            rows = await _fetch(schema, "SELECT id FROM {schema}.memories")
            await _fetch(schema, "CREATE INDEX by_value ON {schema}.memories (value)")
            pool.release(schema)
            return schema, rows[0]["id"]

        assert asyncio.run(again()) == (used, 1)  # the same schema, its ids from 1 again
        pool.settle()
        assert asyncio.run(_fetch(used, f"SELECT FROM pg_namespace WHERE nspname = '{used}'")) == []
        assert asyncio.run(_use(pool)) != used
    finally:
        pool.close()
