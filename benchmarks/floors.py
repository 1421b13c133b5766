"""Hand-written floors: what a careful store of the same five operations costs, by hand.

Each floor owns its schema, made by the floor itself in its own file (SQLite) or its own
schema (PostgreSQL), so it shares nothing with asyncmem's schema, statements or search code
and a change to any of them leaves the floor as it was:

- :class:`AiosqliteFloor`: one aiosqlite connection in autocommit, WAL,
  ``synchronous=NORMAL``; a ``memories`` table and an FTS5 external-content index over key
  and value (``porter unicode61 remove_diacritics 2``) kept by insert/delete/update triggers;
  one statement per call; a query is the top ``limit`` by ``bm25()``.
- :class:`PgFloor`: a LIFO pool of asyncpg connections; a ``memories`` table with a
  generated ``tsvector`` column (English) and a GIN index on it; one statement per call; a
  query is the top ``limit`` by ``ts_rank``.

Both check expiry on every read, as the contract asks (no memory here has one). What they
leave out, because it is beyond the five operations: version history, conversation upkeep,
metadata filters, re-ranking, input validation.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from asyncmem import MemoryEntry

__all__ = ["AiosqliteFloor", "PgFloor", "floor_terms"]

_STOP = frozenset(
    """
    a about after again all also an and any are as at be because been before both but by can
    could did do does down during each few for from had has have he her here him his how i if
    in into is it its just me more most my no nor not now of off on once only or other our out
    over own same she so some such than that the their them then there these they this those
    through to too under until up very was we were what when where which while who whom why
    will with would you your
    """.split()
)
_WORD = re.compile(r"[^\W_]+")


def floor_terms(text: str) -> list[str]:
    """The distinct lower-cased words of a question, function words dropped (at most 32)."""
    return list(dict.fromkeys(w for w in _WORD.findall(text.lower()) if w not in _STOP))[:32]


_COLUMNS = "user_id, key, value, metadata, created_at, updated_at, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"

SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY,
    user_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    UNIQUE (user_id, key)
);
CREATE INDEX IF NOT EXISTS memories_user_updated ON memories (user_id, updated_at);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    key, value, content='memories', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, key, value) VALUES (new.id, new.key, new.value);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, key, value)
    VALUES ('delete', old.id, old.key, old.value);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE OF key, value ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, key, value)
    VALUES ('delete', old.id, old.key, old.value);
    INSERT INTO memories_fts (rowid, key, value) VALUES (new.id, new.key, new.value);
END;
"""
SQLITE_UPSERT = (
    "INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, key) DO UPDATE SET value = excluded.value, "
    "metadata = excluded.metadata, updated_at = excluded.updated_at, expires_at = NULL "
    "RETURNING created_at, updated_at"
)
SQLITE_RETRIEVE = f"SELECT {_COLUMNS} FROM memories WHERE user_id = ? AND key = ? AND {_LIVE}"
SQLITE_QUERY = (
    f"SELECT {', '.join('m.' + c for c in _COLUMNS.split(', '))}, -bm25(memories_fts) AS score "
    "FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
    "WHERE memories_fts MATCH ? AND m.user_id = ? "
    "AND (m.expires_at IS NULL OR m.expires_at > ?) ORDER BY bm25(memories_fts) LIMIT ?"
)
SQLITE_LIST = (
    f"SELECT key FROM memories WHERE user_id = ? AND {_LIVE} ORDER BY updated_at DESC, id DESC"
)
SQLITE_DELETE = "DELETE FROM memories WHERE user_id = ? AND key = ?"


def _entry(row: Any, score: float | None = None) -> MemoryEntry:
    metadata = json.loads(row[3]) if isinstance(row[3], str) else row[3]
    return MemoryEntry(row[0], row[1], row[2], metadata, row[4], row[5], score, row[6])


def _fts5(terms: Iterable[str]) -> str:
    return " OR ".join(f'"{term}"' for term in terms)  # words have no quote in them


class AiosqliteFloor:
    """The SQLite floor on a file of its own (the schema is made on first open)."""

    name = "floor (aiosqlite)"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def open(self) -> None:
        self.conn = await aiosqlite.connect(self.path, isolation_level=None)
        await self.conn.executescript(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;"
        )
        await self.conn.executescript(SQLITE_SCHEMA)

    async def aclose(self) -> None:
        await self.conn.close()

    async def load(self, user_id: str, items: Sequence[tuple[str, str]]) -> None:
        """Preload ``items`` (key, value) of ``user_id`` in one transaction."""
        now = time.time()
        await self.conn.execute("BEGIN")
        await self.conn.executemany(
            SQLITE_UPSERT, [(user_id, key, value, "{}", now, now) for key, value in items]
        )
        await self.conn.execute("COMMIT")

    async def store(self, user_id: str, key: str, value: str) -> MemoryEntry:
        now = time.time()
        rows = await self.conn.execute_fetchall(
            SQLITE_UPSERT, (user_id, key, value, "{}", now, now)
        )
        created, updated = next(iter(rows))
        return MemoryEntry(user_id, key, value, {}, created, updated)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        rows = list(await self.conn.execute_fetchall(SQLITE_RETRIEVE, (user_id, key, time.time())))
        return _entry(rows[0]) if rows else None

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        terms = floor_terms(text)
        if not terms:
            return []
        rows = await self.conn.execute_fetchall(
            SQLITE_QUERY, (_fts5(terms), user_id, time.time(), limit)
        )
        return [_entry(row, row[7]) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        rows = await self.conn.execute_fetchall(SQLITE_LIST, (user_id, time.time()))
        return [row[0] for row in rows]

    async def delete(self, user_id: str, key: str) -> bool:
        cursor = await self.conn.execute(SQLITE_DELETE, (user_id, key))
        return cursor.rowcount > 0


def sqlite_floor_file(path: Path, data: Mapping[str, Sequence[tuple[str, str]]]) -> None:
    """Make the floor's schema in a new file at ``path`` and fill it (for other processes)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript("PRAGMA journal_mode = WAL;" + SQLITE_SCHEMA)
        now = time.time()
        with conn:
            conn.execute("BEGIN")
            for user_id, items in data.items():
                conn.executemany(
                    SQLITE_UPSERT, [(user_id, key, value, "{}", now, now) for key, value in items]
                )
    finally:
        conn.close()


PG_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS "{schema}";
CREATE TABLE IF NOT EXISTS "{schema}".memories (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id text NOT NULL,
    key text NOT NULL,
    value text NOT NULL,
    metadata jsonb NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    expires_at double precision,
    search tsvector GENERATED ALWAYS AS
        (to_tsvector('english'::regconfig, key || ' ' || value)) STORED,
    UNIQUE (user_id, key)
);
CREATE INDEX IF NOT EXISTS memories_user_updated ON "{schema}".memories (user_id, updated_at);
CREATE INDEX IF NOT EXISTS memories_search ON "{schema}".memories USING gin (search);
"""
PG_UPSERT = (
    "INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at) "
    "VALUES ($1, $2, $3, $4::jsonb, $5, $5) ON CONFLICT (user_id, key) DO UPDATE "
    "SET value = excluded.value, metadata = excluded.metadata, "
    "updated_at = excluded.updated_at, expires_at = NULL RETURNING created_at, updated_at"
)
PG_LIVE = "(expires_at IS NULL OR expires_at > $3)"
PG_RETRIEVE = f"SELECT {_COLUMNS} FROM memories WHERE user_id = $1 AND key = $2 AND {PG_LIVE}"
PG_QUERY = (
    f"SELECT {_COLUMNS}, ts_rank(search, q) AS score "
    "FROM memories, to_tsquery('english'::regconfig, $1) q "
    "WHERE search @@ q AND user_id = $2 AND (expires_at IS NULL OR expires_at > $3) "
    "ORDER BY score DESC, id LIMIT $4"
)
PG_LIST = (
    "SELECT key FROM memories WHERE user_id = $1 AND (expires_at IS NULL OR expires_at > $2) "
    "ORDER BY updated_at DESC, id DESC"
)
PG_DELETE = "DELETE FROM memories WHERE user_id = $1 AND key = $2"


class PgFloor:
    """The PostgreSQL floor in a schema of its own: ``size`` asyncpg connections in a LIFO
    pool (a lone caller always gets the same one)."""

    name = "floor (asyncpg)"

    def __init__(self, dsn: str, schema: str, size: int) -> None:
        self.dsn, self.schema, self.size = dsn, schema, size

    async def open(self) -> None:
        import asyncpg

        settings = {"search_path": self.schema}
        self.connections = [
            await asyncpg.connect(self.dsn, server_settings=settings) for _ in range(self.size)
        ]
        await self.connections[0].execute(PG_SCHEMA.format(schema=self.schema))
        self.slots: asyncio.LifoQueue[Any] = asyncio.LifoQueue()
        for connection in self.connections:
            self.slots.put_nowait(connection)

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections))

    async def _run(self, method: str, text: str, *args: Any) -> Any:
        connection = await self.slots.get()
        try:
            return await getattr(connection, method)(text, *args)
        finally:
            self.slots.put_nowait(connection)

    async def load(self, user_id: str, items: Sequence[tuple[str, str]]) -> None:
        now = time.time()
        rows = [(user_id, key, value, "{}", now) for key, value in items]
        connection = self.connections[0]
        async with connection.transaction():
            await connection.executemany(PG_UPSERT, rows)

    async def store(self, user_id: str, key: str, value: str) -> MemoryEntry:
        row = await self._run("fetchrow", PG_UPSERT, user_id, key, value, "{}", time.time())
        return MemoryEntry(user_id, key, value, {}, row[0], row[1])

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        row = await self._run("fetchrow", PG_RETRIEVE, user_id, key, time.time())
        return None if row is None else _entry(row)

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        terms = floor_terms(text)
        if not terms:
            return []
        match = " | ".join(terms)  # letters and digits only: no tsquery syntax
        rows = await self._run("fetch", PG_QUERY, match, user_id, time.time(), limit)
        return [_entry(row, float(row[7])) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        rows = await self._run("fetch", PG_LIST, user_id, time.time())
        return [row[0] for row in rows]

    async def delete(self, user_id: str, key: str) -> bool:
        status: str = await self._run("execute", PG_DELETE, user_id, key)
        return status != "DELETE 0"
