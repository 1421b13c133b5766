"""The SQL store: one class for SQLite (embedded, the default) and PostgreSQL."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL

from asyncmem.backend import (
    BackendBase,
    MemoryEntry,
    check_id,
    check_limit,
    check_metadata,
    check_text,
    check_value,
)
from asyncmem.errors import AsyncmemError, InvalidInputError
from asyncmem.sql import migrate
from asyncmem.sql.drivers import (
    Driver,
    PostgresDriver,
    SQLiteDriver,
    translate_errors,
    translated,
)
from asyncmem.sql.engine import (
    is_local,
    make_engine,
    normalize_url,
    prepare_sqlite_file,
    sqlite_path,
)
from asyncmem.sql.models import Memory
from asyncmem.sql.search import fts5_expression, query_terms, tsquery_expression
from asyncmem.sql.statements import _DIALECTS, SQL, Statements, compile_sql, statements_for

__all__ = ["SQLBackend"]

_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _metadata(raw: Any) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return loaded


def _entry(row: Any, score: float | None = None) -> MemoryEntry:
    return MemoryEntry(row[0], row[1], row[2], _metadata(row[3]), row[4], row[5], score)


class SQLBackend(BackendBase):
    """Memories in a SQL database: SQLite by default, PostgreSQL on request.

    ``url`` is a SQLAlchemy URL (``sqlite:///path/memory.db``, ``postgresql://host/db``; the
    async driver is chosen for you); ``None`` is the embedded file in the user data directory.
    ``auto_migrate`` upgrades an older schema on open (default: on for SQLite, off for
    PostgreSQL, where an operator runs ``asyncmem db upgrade``). A schema newer than this code
    always raises :class:`~asyncmem.errors.SchemaError`.

    SQLite: WAL with ``synchronous=NORMAL``. A returned write survives a crash of the process;
    a power loss may lose the last moments of writes but never corrupts the file. Each write is
    one statement holding the write lock only while it runs; writers in other processes wait up
    to ``busy_timeout`` seconds. ``readers`` connections serve reads next to the writer.

    PostgreSQL: ``schema`` puts the tables in that schema (created on open when
    ``auto_migrate``), so several stores can share one database; ``timeout`` bounds connecting
    and each statement, in seconds; ``pool_size`` caps the connections.

    The schema lives in the ORM model (:mod:`asyncmem.sql.models`) and Alembic; the statements
    are built from that model and compiled once (:mod:`asyncmem.sql.statements`), then each
    call is one round trip on the driver connection.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        auto_migrate: bool | None = None,
        busy_timeout: float = 5.0,
        readers: int = 2,
        schema: str | None = None,
        timeout: float = 30.0,
        pool_size: int = 10,
    ) -> None:
        super().__init__()
        self._url = normalize_url(url)
        self.dialect = self._url.get_backend_name()
        if self.dialect == "sqlite" and sqlite_path(self._url) is None:
            raise InvalidInputError(
                "in-memory SQLite is not supported: give a file path (a temporary directory "
                "works), or use the null backend"
            )
        if schema is not None and (self.dialect != "postgresql" or not _SCHEMA.fullmatch(schema)):
            raise InvalidInputError(
                "schema must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 "
                "characters) and is for PostgreSQL only"
            )
        self.schema = schema
        self.backend_name = f"sql ({self.dialect})"
        self.is_cloud = not is_local(self._url)
        self.auto_migrate = self.dialect == "sqlite" if auto_migrate is None else auto_migrate
        self._busy_timeout = busy_timeout
        self._timeout = timeout
        self._sql: Statements = statements_for(self.dialect)
        self._driver: Driver
        if self.dialect == "sqlite":
            self._driver = SQLiteDriver(
                sqlite_path(self._url), busy_timeout=busy_timeout, readers=readers
            )
        else:
            self._driver = PostgresDriver(
                self._url, pool_size=pool_size, timeout=timeout, schema=schema
            )
        self._last_time = 0.0

    @property
    def url(self) -> str:
        """The database URL with any password masked."""
        return self._url.render_as_string(hide_password=True)

    @property
    def path(self) -> str | None:
        """The SQLite database file, or ``None`` for a server."""
        found = sqlite_path(self._url)
        return None if found is None else str(found)

    def __repr__(self) -> str:
        return f"SQLBackend({self.url!r})"

    async def _open(self) -> None:
        with translate_errors("open"):
            path = sqlite_path(self._url)
            if path is not None:
                await asyncio.to_thread(prepare_sqlite_file, path)
            engine = make_engine(
                self._url,
                busy_timeout=self._busy_timeout,
                timeout=self._timeout,
                schema=self.schema,
            )
            try:
                await migrate.ensure_schema(
                    engine, auto_migrate=self.auto_migrate, schema=self.schema
                )
            finally:
                await engine.dispose()
            await self._driver.open()

    async def _close(self) -> None:
        await self._driver.close()

    async def _fetch(
        self, operation: str, sql: SQL, args: Sequence[Any], *, write: bool = False
    ) -> list[Any]:
        """Run one statement for ``operation`` (opening first if need be); return its rows."""
        await self._ready()
        try:
            return await self._driver.fetch(sql, args, write=write)
        except Exception as exc:
            error = translated(operation, exc)
            if error is None or error is exc:
                raise
            raise error from exc

    async def _execute(self, operation: str, sql: SQL, args: Sequence[Any]) -> int:
        """Run one writing statement for ``operation``; return how many rows it changed."""
        await self._ready()
        try:
            return await self._driver.execute(sql, args)
        except Exception as exc:
            error = translated(operation, exc)
            if error is None or error is exc:
                raise
            raise error from exc

    def _now(self) -> float:
        """This process's clock, never repeating, for SQLite writes (which it serialises)."""
        now = max(time.time(), self._last_time + 1e-6)
        self._last_time = now
        return now

    async def is_available(self) -> bool:
        if self.closed:
            return False
        try:
            await self._fetch("is_available", self._sql.ping, ())
        except AsyncmemError:
            return False
        return True

    async def store(
        self,
        user_id: str,
        key: str,
        value: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryEntry:
        check_id("user_id", user_id)
        check_id("key", key)
        check_value(value)
        clean = check_metadata(metadata)
        args = self._sql.upsert.args(
            user_id=user_id, key=key, value=value, metadata=json.dumps(clean), now=self._now()
        )
        (row,) = await self._fetch("store", self._sql.upsert, args, write=True)
        return MemoryEntry(user_id, key, value, clean, row[0], row[1])

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        check_id("user_id", user_id)
        check_id("key", key)
        args = self._sql.retrieve.args(user_id=user_id, key=key)
        rows = await self._fetch("retrieve", self._sql.retrieve, args)
        return _entry(rows[0]) if rows else None

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        """Memories of ``user_id`` ranked by relevance to the question ``text``.

        The text is split into words; common function words are dropped and the rest OR-ed,
        so memories that share more (and rarer) words with the question rank higher: FTS5
        bm25 on SQLite, ``ts_rank_cd`` on PostgreSQL, both with English stemming. Text with
        no searchable words returns ``[]``.
        """
        check_id("user_id", user_id)
        check_text(text)
        check_limit(limit)
        terms = query_terms(text)
        if not terms:
            await self._ready()
            return []
        expression = (
            fts5_expression(terms) if self.dialect == "sqlite" else tsquery_expression(terms)
        )
        args = self._sql.query.args(match=expression, user_id=user_id, limit=limit)
        rows = await self._fetch("query", self._sql.query, args)
        return [_entry(row, float(row[6])) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        check_id("user_id", user_id)
        args = self._sql.list_keys.args(user_id=user_id)
        rows = await self._fetch("list_keys", self._sql.list_keys, args)
        return [row[0] for row in rows]

    async def delete(self, user_id: str, key: str) -> bool:
        check_id("user_id", user_id)
        check_id("key", key)
        args = self._sql.delete.args(user_id=user_id, key=key)
        return await self._execute("delete", self._sql.delete, args) > 0

    async def forget_user(self, user_id: str) -> int:
        check_id("user_id", user_id)
        args = self._sql.forget_user.args(user_id=user_id)
        return await self._execute("forget_user", self._sql.forget_user, args)

    async def scan(
        self, user_id: str | None = None, *, page_size: int = 500
    ) -> AsyncIterator[MemoryEntry]:
        """Every memory (of ``user_id``, or of all users for ``None``) in a stable order.

        Pages of ``page_size`` rows are read one statement each, by primary key, so memory
        use stays flat however large the store is. For operators and ``export``.
        """
        if user_id is not None:
            check_id("user_id", user_id)
        page_size = check_limit(page_size)
        sql = _scan_sql(self.dialect, user_id is not None)
        after = 0
        while True:
            args = sql.args(user_id=user_id, after=after, limit=page_size)
            rows = await self._fetch("scan", sql, args)
            for row in rows:
                yield _entry(row)
            if len(rows) < page_size:
                return
            after = rows[-1][6]

    async def import_entries(self, entries: Iterable[MemoryEntry]) -> int:
        """Upsert ``entries`` with their own ``created_at`` and ``updated_at``, all or nothing.

        For restoring an export: unlike :meth:`store`, the timestamps are taken from the
        entries, so an export imported into an empty store reproduces it exactly, and
        importing the same entries twice changes nothing. Every entry is validated before
        anything is written, and one statement writes them all, so a call either writes
        every entry or none. At most :data:`MAX_IMPORT_BATCH` distinct memories a call; a
        key given twice keeps its last entry. Returns the number of memories written.
        """
        rows: dict[tuple[str, str], tuple[Any, ...]] = {}
        for entry in entries:
            user_id = check_id("user_id", entry.user_id)
            key = check_id("key", entry.key)
            rows[(user_id, key)] = (
                user_id,
                key,
                check_value(entry.value),
                json.dumps(check_metadata(entry.metadata)),
                _check_timestamp("created_at", entry.created_at),
                _check_timestamp("updated_at", entry.updated_at),
            )
        if len(rows) > MAX_IMPORT_BATCH:
            raise InvalidInputError(f"import at most {MAX_IMPORT_BATCH} memories a call")
        if not rows:
            await self._ready()
            return 0
        sql = _import_sql(self.dialect, len(rows))
        named = {
            f"{field}_{n}": value
            for n, row in enumerate(rows.values())
            for field, value in zip(_IMPORT_FIELDS, row, strict=True)
        }
        await self._execute("import_entries", sql, sql.args(**named))
        return len(rows)


_IMPORT_FIELDS = ("user_id", "key", "value", "metadata_", "created_at", "updated_at")
MAX_IMPORT_BATCH = 1000
"""Most memories one :meth:`SQLBackend.import_entries` call takes (one statement's worth)."""


def _check_timestamp(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number of unix seconds")
    return float(value)


@functools.cache
def _scan_sql(dialect_name: str, one_user: bool) -> SQL:
    """A page of memories after a primary key, with that key last in each row."""
    columns = (Memory.user_id, Memory.key, Memory.value, Memory.metadata_)
    statement = (
        select(*columns, Memory.created_at, Memory.updated_at, Memory.id)
        .where(Memory.id > bindparam("after"))
        .order_by(Memory.id)
        .limit(bindparam("limit"))
    )
    if one_user:
        statement = statement.where(Memory.user_id == bindparam("user_id"))
    return compile_sql(statement, _DIALECTS[dialect_name])


@functools.lru_cache(maxsize=8)
def _import_sql(dialect_name: str, count: int) -> SQL:
    """One statement upserting ``count`` memories with the timestamps given, in that order."""
    values: list[dict[str, Any]] = [
        {name: bindparam(f"{name}_{n}") for name in _IMPORT_FIELDS} for n in range(count)
    ]
    insert = (sqlite.insert if dialect_name == "sqlite" else postgresql.insert)(Memory)
    statement = insert.values(values)
    upsert = statement.on_conflict_do_update(
        index_elements=[Memory.user_id, Memory.key],
        set_={
            Memory.value: statement.excluded.value,
            Memory.metadata_: statement.excluded["metadata"],
            Memory.created_at: statement.excluded.created_at,
            Memory.updated_at: statement.excluded.updated_at,
        },
    )
    return compile_sql(upsert, _DIALECTS[dialect_name])
