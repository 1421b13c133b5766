"""Revision 0011 (SQLite): a memory without context gets its postings without grouping, a turn
with its context as before; the index stays exact through every kind of write, and the
revision goes up and down over real data without changing a row or an answer."""

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


async def _fetch(engine: AsyncEngine, sql: str) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        return [tuple(row) for row in await conn.execute(text(sql))]


async def _problems(engine: AsyncEngine) -> list[str]:
    return await async_problems(lambda sql: _fetch(engine, sql))


async def _every_kind_of_write(backend: SQLBackend, tag: str) -> None:
    """Plain memories stored, stored over (with and without the same terms), turned into
    turns and back, turns appended and rewritten, and deletes of both."""
    for i in range(5):
        await backend.store("ann", f"{tag}-p{i}", f"plain note {i} about the garden shed {tag}")
        await backend.store(
            "ann", f"{tag}-t{i}", f"turn {i} on the bike ride {tag}", {"session": tag}
        )
    await backend.store("ann", f"{tag}-p0", f"plain note 0 about the garden shed {tag}")
    await backend.store(
        "ann", f"{tag}-p1", "a new text entirely, plums and pears", {"speaker": "Bo"}
    )
    await backend.store("ann", f"{tag}-p2", "now a turn", {"session": tag})
    await backend.store("ann", f"{tag}-t1", "no longer a turn, about the shed")
    await backend.store(
        "ann", f"{tag}-t2", f"turn 2 rewritten, the ride home {tag}", {"session": tag}
    )
    await backend.delete("ann", f"{tag}-p3")
    await backend.delete("ann", f"{tag}-t3")


async def test_every_write_keeps_the_postings_exact(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/memory.db"
    engine = make_engine(normalize_url(url))
    try:
        async with SQLBackend(url) as backend:
            await _every_kind_of_write(backend, "a")
            hits = await backend.query("ann", "plums pears")
            assert [hit.key for hit in hits][:1] == ["a-p1"]
        assert await _problems(engine) == []
    finally:
        await engine.dispose()


async def test_0011_up_and_down_keeps_every_row_and_every_answer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/memory.db"
    memories = SHIPPED["memories"]
    asked = SHIPPED["queries"][:60]
    engine = make_engine(normalize_url(url))
    try:
        async with SQLBackend(url) as backend:
            for memory in memories:
                await backend.store(
                    memory["user_id"], memory["key"], memory["value"], memory.get("metadata")
                )
            before = [await backend.query(q["user_id"], q["question"]) for q in asked]
        rows = await _fetch(engine, "SELECT * FROM memories ORDER BY id")

        await migrate.downgrade(engine, "0010_postings_in_place")
        assert await _fetch(engine, "SELECT * FROM memories ORDER BY id") == rows
        assert await _problems(engine) == []
        await migrate.upgrade(engine)
        assert await migrate.current(engine) == (migrate.HEAD,)
        assert await _fetch(engine, "SELECT * FROM memories ORDER BY id") == rows
        async with SQLBackend(url) as backend:
            after = [await backend.query(q["user_id"], q["question"]) for q in asked]
            await _every_kind_of_write(backend, "b")
        assert sum(map(len, before)) > 0
        assert [[(e.key, e.score) for e in hits] for hits in after] == [
            [(e.key, e.score) for e in hits] for hits in before
        ]
        assert await _problems(engine) == []
    finally:
        await engine.dispose()
