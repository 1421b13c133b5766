"""Revision 0006 (per-user postings), on real data: a database written by 0005's store
upgrades to read exactly like one written by today's store, and downgrades to 0005's index
and contexts."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem import SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.search import facets_of, neighbour_words, session_of
from tests.migrating import index_matches
from tests.search_index import async_problems

DATA = Path(__file__).resolve().parent.parent / "asyncmem/evaluation/data"
SHIPPED: dict[str, Any] = json.loads(
    (DATA / "asyncmem-conversations-v1.json").read_text(encoding="utf-8")
)
COLUMNS = "id, user_id, key, value, session, context, facets"


async def _insert_as_0005(engine: AsyncEngine, memories: list[dict[str, Any]]) -> None:
    """The rows 0005's store wrote: session, facets (no caption's words: 0005 had none) and
    word contexts, in store order."""
    turns: dict[tuple[str, str], list[int]] = defaultdict(list)
    rows = []
    for n, memory in enumerate(memories):
        metadata = memory.get("metadata") or {}
        session = session_of(metadata)
        rows.append(
            {
                "user_id": memory["user_id"],
                "key": memory["key"],
                "value": memory["value"],
                "metadata": json.dumps(metadata),
                "session": session,
                "facets": facets_of(
                    {k: v for k, v in metadata.items() if k != "caption"}, memory["value"]
                ),
                "context": "",
            }
        )
        if session is not None:
            turns[memory["user_id"], session].append(n)
    for positions in turns.values():
        contexts = neighbour_words([rows[n]["value"] for n in positions])
        for n, context in zip(positions, contexts, strict=True):
            rows[n]["context"] = context
    cast = "CAST(:metadata AS JSONB)" if engine.dialect.name == "postgresql" else ":metadata"
    statement = text(
        "INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at, session, "
        f"context, facets) VALUES (:user_id, :key, :value, {cast}, 1, 1, :session, :context, "
        ":facets)"
    )
    async with engine.begin() as conn:
        await conn.execute(statement, rows)


async def _rows(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        result = await conn.execute(text(f"SELECT {COLUMNS} FROM memories ORDER BY id"))
        return [tuple(row) for row in result]


async def _answers(backend: SQLBackend, prefix: str = "") -> list[list[tuple[str, float | None]]]:
    return [
        [(hit.key, hit.score) for hit in await backend.query(prefix + q["user_id"], q["question"])]
        for q in SHIPPED["queries"][:60]
    ]


def _close(
    a: list[list[tuple[str, float | None]]], b: list[list[tuple[str, float | None]]]
) -> bool:
    return [[k for k, _ in hits] for hits in a] == [[k for k, _ in hits] for hits in b] and all(
        abs((x or 0.0) - (y or 0.0)) <= 1e-9
        for hits, others in zip(a, b, strict=True)
        for (_, x), (_, y) in zip(hits, others, strict=True)
    )


async def test_0005_rows_upgrade_to_todays_index_and_back(database_url: str) -> None:
    memories: list[dict[str, Any]] = SHIPPED["memories"]
    engine = make_engine(normalize_url(database_url))
    try:
        await migrate.upgrade(engine, "0005_cjk_words")
        await _insert_as_0005(engine, memories)
        before = await _rows(engine)
        word = "adopt"
        found_before = await index_matches(engine, word)
        assert found_before

        await migrate.upgrade(engine)
        async with engine.connect() as conn:

            async def fetch(sql: str) -> list[Any]:
                return [tuple(row) for row in await conn.execute(text(sql))]

            assert await async_problems(fetch) == []
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            upgraded = await _answers(backend)
            assert sum(map(len, upgraded)) > 0
            # The same memories written by today's store, as other users of the same database.
            for memory in memories:
                await backend.store(
                    "fresh:" + memory["user_id"],
                    memory["key"],
                    memory["value"],
                    memory.get("metadata"),
                )
            assert _close(await _answers(backend, "fresh:"), upgraded)
            for user in {m["user_id"] for m in memories}:
                await backend.forget_user("fresh:" + user)

        await migrate.downgrade(engine, "0005_cjk_words")
        after = await _rows(engine)
        # The facets keep a caption's words (0005's index reads them as they are); the rest is
        # as it was.
        assert [row[:6] for row in after] == [row[:6] for row in before]
        captioned = {
            (m["user_id"], m["key"]) for m in memories if (m.get("metadata") or {}).get("caption")
        }
        assert captioned
        for row, old in zip(after, before, strict=True):
            assert (row[6] != old[6]) == ((row[1], row[2]) in captioned), row[1:3]
        assert await index_matches(engine, word) == found_before
    finally:
        await engine.dispose()
