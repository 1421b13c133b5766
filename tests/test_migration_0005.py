"""Revision 0005 (CJK words): memories written before it become findable by words inside
unspaced Chinese and Japanese text, and stop being so on downgrade."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.search import facets_of
from tests.migrating import index_matches, insert_memories

ROWS = [
    ("cat", "我的猫叫咪咪，她喜欢吃鱼。", {"speaker": "Ann"}),
    ("miso", "私の猫はミソという名前です", {}),
    ("plain", "Alice has a grey cat", {"speaker": "Bo"}),
]


async def _facets(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT key, facets FROM memories"))
        return {row.key: row.facets for row in rows}


async def test_0004_memories_gain_cjk_words_and_lose_them_again(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        await migrate.upgrade(engine, "0004_context_after")
        for key, value, metadata in ROWS:  # as 0004's store wrote them: no CJK words
            await insert_memories(engine, "u", [(key, value, metadata)], facets=facets_of(metadata))
        before = await _facets(engine)
        assert await index_matches(engine, "咪咪") == set()

        await migrate.upgrade(engine, "0005_cjk_words")
        after = await _facets(engine)
        assert after == {key: facets_of(metadata, value) for key, value, metadata in ROWS}
        assert after["plain"] == before["plain"] == "Bo"
        assert after["cat"].startswith("Ann ")
        assert await index_matches(engine, "咪咪") == {"cat"}
        assert await index_matches(engine, "猫") == {"cat", "miso"}
        assert await index_matches(engine, "ミソ") == {"miso"}

        await migrate.downgrade(engine, "0004_context_after")
        assert await _facets(engine) == before
        assert await index_matches(engine, "咪咪") == set()
    finally:
        await engine.dispose()
