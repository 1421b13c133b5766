"""Revision 0003 (conversation context): a database filled at 0002 upgrades, reads, downgrades."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from asyncmem import SchemaError, SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.search import neighbour_words as neighbour_contexts
from tests.migrating import index_matches, insert_memories

TURNS = [
    ("t1", "Did you adopt anything from the shelter last weekend?", {"session": "s1"}),
    ("t2", "Yes, a puppy!", {"session": "s1", "speaker": "Ann", "date": "8 May 2023"}),
    ("t3", "We named him Biscuit.", {"session": "s1"}),
    ("fact", "Alice has a grey cat", {}),
    ("t4", "Another chat entirely.", {"session": 2}),
]


async def test_0002_database_gains_context_and_loses_it_again(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        await migrate.upgrade(engine, "0002_features")
        await insert_memories(engine, "alice", TURNS)

        await migrate.upgrade(engine, "0003_context")
        async with engine.connect() as conn:
            rows = (
                await conn.execute(text("SELECT key, session, context, facets FROM memories"))
            ).all()
        by_key = {row.key: row for row in rows}
        expected = neighbour_contexts([value for _, value, _ in TURNS[:3]], before=2, after=2)
        assert [by_key[k].context for k in ("t1", "t2", "t3")] == expected
        assert by_key["t1"].session == '"s1"'
        assert by_key["t4"].session == "2"
        assert by_key["t4"].context == ""
        assert by_key["fact"].session is None
        assert "may" in by_key["t2"].facets
        async with SQLBackend(database_url, auto_migrate=True) as backend:
            keys = [hit.key for hit in await backend.query("alice", "adopt from the shelter")]
            assert keys[0] == "t1"
            assert {"t2", "t3"} <= set(keys)
            assert "t4" not in keys
            await backend.store("alice", "t5", "He loves the park.", {"session": "s1"})
            assert "t3" in [hit.key for hit in await backend.query("alice", "park")]

        await migrate.downgrade(engine, "0002_features")
        with pytest.raises(SchemaError, match="0002_features"):
            async with SQLBackend(database_url, auto_migrate=False):
                pass
        assert await index_matches(engine, "puppy") == {"t2"}
        async with engine.connect() as conn:
            count = (await conn.execute(text("SELECT count(*) FROM memories"))).scalar_one()
            assert count == len(TURNS) + 1
            # 0002's history and expiry still work: storing over a memory keeps a version.
            await conn.execute(
                text(
                    "UPDATE memories SET value = 'Yes, a kitten!', updated_at = 2 WHERE key = 't2'"
                )
            )
            versions = (
                await conn.execute(text("SELECT value FROM memory_versions WHERE key = 't2'"))
            ).all()
            assert [row.value for row in versions] == ["Yes, a puppy!"]
            await conn.execute(text("UPDATE memories SET expires_at = 1 WHERE key = 't3'"))
            await conn.execute(text("DELETE FROM memories WHERE key = 't2'"))
            left = (
                await conn.execute(text("SELECT count(*) FROM memory_versions WHERE key = 't2'"))
            ).scalar_one()
            assert left == 0
            await conn.commit()
        await migrate.upgrade(engine)
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            assert "t5" in [hit.key for hit in await backend.query("alice", "park")]
            assert await backend.retrieve("alice", "t3") is None
            await backend.store("alice", "t1", "Did you adopt a dog?", {"session": "s1"})
            assert len(await backend.history("alice", "t1")) == 2
    finally:
        await engine.dispose()
