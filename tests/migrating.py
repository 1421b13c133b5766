"""Helpers for the revision tests: rows written as an older revision would hold them, and what
the database's own full-text index finds."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


async def insert_memories(
    engine: AsyncEngine,
    user_id: str,
    rows: Iterable[tuple[str, str, dict[str, Any]]],
    **columns: str,
) -> None:
    """Insert ``(key, value, metadata)`` rows with plain SQL (no store code), plus ``columns``
    (the same value for every row) that the revision at hand has."""
    cast = "CAST(:metadata AS JSONB)" if engine.dialect.name == "postgresql" else ":metadata"
    names = "".join(f", {name}" for name in columns)
    values = "".join(f", :{name}" for name in columns)
    statement = text(
        f"INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at{names}) "
        f"VALUES (:user_id, :key, :value, {cast}, 1, 1{values})"
    )
    async with engine.begin() as conn:
        for key, value, metadata in rows:
            await conn.execute(
                statement,
                {"user_id": user_id, "key": key, "value": value, "metadata": json.dumps(metadata)}
                | columns,
            )


async def index_matches(engine: AsyncEngine, word: str) -> set[str]:
    """The keys whose index entry (any field) holds ``word``: FTS5 or the ``tsvector``."""
    sql = (
        "SELECT key FROM memories_fts WHERE memories_fts MATCH :word"
        if engine.dialect.name == "sqlite"
        else "SELECT key FROM memories WHERE search_vector @@ to_tsquery('english', :word)"
    )
    async with engine.connect() as conn:
        rows = await conn.execute(text(sql), {"word": f'"{word}"'})
        return {row.key for row in rows}
