"""The SQL store: one class for SQLite (embedded, the default) and PostgreSQL."""

from __future__ import annotations

import asyncio
import math
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from sqlalchemy import (
    Double,
    Row,
    cast,
    column,
    delete,
    func,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.expression import ColumnClause, ColumnElement

from asyncmem.backend import (
    BackendBase,
    MemoryEntry,
    check_id,
    check_limit,
    check_metadata,
    check_text,
    check_value,
)
from asyncmem.errors import (
    AsyncmemError,
    BackendError,
    BackendUnavailableError,
    InvalidInputError,
    SchemaError,
)
from asyncmem.sql import migrate
from asyncmem.sql.engine import (
    BEGIN_OPTION,
    is_local,
    make_engine,
    normalize_url,
    prepare_sqlite_file,
    sqlite_path,
)
from asyncmem.sql.models import FTS_TABLE, TSVECTOR_COLUMN, Memory
from asyncmem.sql.search import fts5_expression, query_terms, tsquery_expression

__all__ = ["SQLBackend"]

_ENTRY_COLUMNS = (
    Memory.user_id,
    Memory.key,
    Memory.value,
    Memory.metadata_,
    Memory.created_at,
    Memory.updated_at,
)
_FTS = table(FTS_TABLE, column("rowid"))
_FTS_MATCH: ColumnClause[Any] = literal_column(FTS_TABLE)
_TSVECTOR: ColumnClause[Any] = literal_column(f"{Memory.__tablename__}.{TSVECTOR_COLUMN}")

_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PG_REASONS: dict[str, tuple[str, type[AsyncmemError]]] = {
    "08": ("cannot connect to the database server", BackendUnavailableError),
    "28": ("the database server refused the credentials", BackendUnavailableError),
    "3D": ("the database does not exist", BackendUnavailableError),
    "53": ("the database server is out of resources", BackendUnavailableError),
    "57014": ("the statement timed out", BackendUnavailableError),
    "57": ("the database server is shutting down or restarting", BackendUnavailableError),
    "42P01": ("the database schema is missing or outdated", SchemaError),
    "42703": ("the database schema is missing or outdated", SchemaError),
    "3F": ("the database schema is missing or outdated", SchemaError),
    "25006": ("the database is read-only", BackendError),
}
_SQLITE_UNAVAILABLE = {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN", "SQLITE_PROTOCOL"}
_SQLITE_REASONS = {
    "SQLITE_BUSY": "timed out waiting for the database lock",
    "SQLITE_LOCKED": "the database table is locked",
    "SQLITE_CANTOPEN": "cannot open the database file",
    "SQLITE_READONLY": "the database is read-only",
    "SQLITE_FULL": "the disk is full",
    "SQLITE_CORRUPT": "the database file is corrupt",
    "SQLITE_NOTADB": "the file is not a SQLite database",
}


def _entry(row: Row[Any], score: float | None = None) -> MemoryEntry:
    return MemoryEntry(
        user_id=row.user_id,
        key=row.key,
        value=row.value,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
        score=score,
    )


def _sqlstate(orig: BaseException | None) -> str:
    while orig is not None:
        state = getattr(orig, "sqlstate", None)
        if isinstance(state, str):
            return state
        orig = orig.__cause__
    return ""


def _reason(exc: sa_exc.DBAPIError) -> tuple[str, type[AsyncmemError]]:
    """A message free of SQL and values, and the error class it calls for."""
    orig = exc.orig
    if isinstance(orig, sqlite3.Error):
        name = getattr(orig, "sqlite_errorname", "SQLITE_ERROR")
        family = "_".join(name.split("_", 2)[:2])
        if str(orig).startswith(("no such table", "no such column")):
            return "the database schema is missing or outdated", SchemaError
        reason = _SQLITE_REASONS.get(family, f"SQLite error {name}")
        unavailable = family in _SQLITE_UNAVAILABLE or family == "SQLITE_IOERR"
        return reason, BackendUnavailableError if unavailable else BackendError
    state = _sqlstate(orig)
    for prefix in (state, state[:2]):
        if prefix and prefix in _PG_REASONS:
            reason, error = _PG_REASONS[prefix]
            return f"{reason} (SQLSTATE {state})", error
    if exc.connection_invalidated:
        return "the database connection was lost", BackendUnavailableError
    kind = type(orig).__name__ if orig is not None else type(exc).__name__
    return f"database error {kind}" + (f" (SQLSTATE {state})" if state else ""), BackendError


@contextmanager
def _translate(operation: str) -> Iterator[None]:
    """Map driver and SQLAlchemy errors to asyncmem's, once, at the boundary."""
    try:
        yield
    except AsyncmemError:
        raise
    except sa_exc.DBAPIError as exc:
        reason, error = _reason(exc)
        raise error(f"{operation} failed: {reason}") from exc
    except sa_exc.TimeoutError as exc:
        raise BackendUnavailableError(f"{operation} failed: no free connection in time") from exc
    except sa_exc.SQLAlchemyError as exc:
        raise BackendError(f"{operation} failed: {type(exc).__name__}") from exc
    except OSError as exc:
        raise BackendUnavailableError(
            f"{operation} failed: cannot reach the database ({type(exc).__name__})"
        ) from exc


class SQLBackend(BackendBase):
    """Memories in a SQL database through SQLAlchemy: SQLite by default, PostgreSQL on request.

    ``url`` is a SQLAlchemy URL (``sqlite:///path/memory.db``, ``postgresql://host/db``; the
    async driver is chosen for you); ``None`` is the embedded file in the user data directory.
    ``auto_migrate`` upgrades an older schema on open (default: on for SQLite, off for
    PostgreSQL, where an operator runs ``asyncmem db upgrade``). A schema newer than this code
    always raises :class:`SchemaError`.

    PostgreSQL only: ``schema`` puts the tables in that schema (created on open when
    ``auto_migrate``), so several stores can share one database; ``timeout`` bounds connecting
    and each statement, in seconds. ``pool_size``, ``max_overflow`` and ``pool_timeout`` size
    the connection pool on both dialects.

    Durability on SQLite: WAL with ``synchronous=NORMAL``. A returned write survives a crash
    of the process; a power loss may lose the last moments of writes but never corrupts the
    file. Writers take the lock up front (``BEGIN IMMEDIATE``) and wait up to
    ``busy_timeout`` seconds for other processes.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        auto_migrate: bool | None = None,
        busy_timeout: float = 5.0,
        schema: str | None = None,
        timeout: float = 30.0,
        pool_size: int = 5,
        max_overflow: int = 10,
        pool_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self._url = normalize_url(url)
        self.dialect = self._url.get_backend_name()
        if schema is not None and (self.dialect != "postgresql" or not _SCHEMA.fullmatch(schema)):
            raise InvalidInputError(
                "schema must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 "
                "characters) and is for PostgreSQL only"
            )
        self.schema = schema
        self.backend_name = f"sql ({self.dialect})"
        self.is_cloud = not is_local(self._url)
        self.auto_migrate = self.dialect == "sqlite" if auto_migrate is None else auto_migrate
        self._engine_options: dict[str, Any] = {
            "busy_timeout": busy_timeout,
            "pool_size": pool_size,
            "max_overflow": max_overflow,
            "pool_timeout": pool_timeout,
            "timeout": timeout,
            "schema": schema,
        }
        self._engine: AsyncEngine | None = None
        self._insert = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
        # One writer at a time inside this process; other processes wait on the file lock.
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._last_time = 0.0

    @property
    def url(self) -> str:
        """The database URL with any password masked."""
        return self._url.render_as_string(hide_password=True)

    @property
    def path(self) -> str | None:
        """The SQLite database file, or ``None`` for a server or an in-memory database."""
        found = sqlite_path(self._url)
        return None if found is None else str(found)

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine (open the backend first)."""
        if self._engine is None:
            raise BackendError("the backend is not open")
        return self._engine

    def __repr__(self) -> str:
        return f"SQLBackend({self.url!r})"

    async def _open(self) -> None:
        with _translate("open"):
            path = sqlite_path(self._url)
            if path is not None:
                await asyncio.to_thread(prepare_sqlite_file, path)
            engine = make_engine(self._url, **self._engine_options)
            try:
                await migrate.ensure_schema(
                    engine, auto_migrate=self.auto_migrate, schema=self.schema
                )
            except BaseException:
                await engine.dispose()
                raise
            self._engine = engine

    async def _close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    @asynccontextmanager
    async def _run(self, operation: str, *, write: bool = False) -> AsyncIterator[AsyncConnection]:
        """One connection and one transaction for one call, with errors translated."""
        await self._ready()
        with _translate(operation):
            if write and self._write_lock is not None:
                async with self._write_lock, self._transaction(write) as conn:
                    yield conn
            else:
                async with self._transaction(write) as conn:
                    yield conn

    @asynccontextmanager
    async def _transaction(self, write: bool) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            if self.dialect == "sqlite":
                conn = await conn.execution_options(
                    **{BEGIN_OPTION: "IMMEDIATE" if write else None}
                )
            async with conn.begin():
                yield conn

    def _timestamps(self) -> tuple[float | ColumnElement[float], float | ColumnElement[float]]:
        """When a write happens, as (time of an insert, time of an update), in commit order.

        SQLite: this process's clock, read under the write lock and never repeating.
        PostgreSQL: the server's clock. An insert uses the statement's start time; an update
        reads the clock after the row lock is granted, so of concurrent writers to one key
        the last to commit has the latest ``updated_at``.
        """
        if self.dialect == "postgresql":
            return (
                cast(func.extract("epoch", func.statement_timestamp()), Double),
                cast(func.extract("epoch", func.clock_timestamp()), Double),
            )
        now = max(time.time(), self._last_time + 1e-6)
        self._last_time = now
        return now, now

    async def is_available(self) -> bool:
        if self.closed:
            return False
        try:
            async with self._run("is_available") as conn:
                await conn.execute(text("SELECT 1"))
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
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        value = check_value(value)
        clean = check_metadata(metadata)
        async with self._run("store", write=True) as conn:
            inserted_at, updated_at = self._timestamps()
            insert = self._insert(Memory).values(
                user_id=user_id,
                key=key,
                value=value,
                metadata_=clean,
                created_at=inserted_at,
                updated_at=inserted_at,
            )
            upsert = insert.on_conflict_do_update(
                index_elements=[Memory.user_id, Memory.key],
                set_={
                    Memory.value: insert.excluded.value,
                    Memory.metadata_: insert.excluded["metadata"],
                    Memory.updated_at: updated_at,
                },
            ).returning(Memory.created_at, Memory.updated_at)
            row = (await conn.execute(upsert)).one()
        return MemoryEntry(user_id, key, value, clean, float(row.created_at), row.updated_at)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        check_id("user_id", user_id)
        check_id("key", key)
        statement = select(*_ENTRY_COLUMNS).where(Memory.user_id == user_id, Memory.key == key)
        async with self._run("retrieve") as conn:
            row = (await conn.execute(statement)).one_or_none()
        return None if row is None else _entry(row)

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
        if self.dialect == "sqlite":
            rank = func.bm25(_FTS_MATCH)
            statement = (
                select(*_ENTRY_COLUMNS, (-rank).label("score"))
                .select_from(_FTS.join(Memory, Memory.id == _FTS.c.rowid))
                .where(_FTS_MATCH.match(fts5_expression(terms)), Memory.user_id == user_id)
                .order_by(rank, Memory.id)
                .limit(limit)
            )
        else:
            tsquery = func.to_tsquery(
                literal_column("'english'::regconfig"), tsquery_expression(terms)
            )
            score = func.ts_rank_cd(_TSVECTOR, tsquery)
            statement = (
                select(*_ENTRY_COLUMNS, score.label("score"))
                .where(_TSVECTOR.bool_op("@@")(tsquery), Memory.user_id == user_id)
                .order_by(score.desc(), Memory.id)
                .limit(limit)
            )
        async with self._run("query") as conn:
            rows = (await conn.execute(statement)).all()
        return [_entry(row, float(row.score)) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        check_id("user_id", user_id)
        statement = (
            select(Memory.key)
            .where(Memory.user_id == user_id)
            .order_by(Memory.updated_at.desc(), Memory.id.desc())
        )
        async with self._run("list_keys") as conn:
            return list((await conn.scalars(statement)).all())

    async def delete(self, user_id: str, key: str) -> bool:
        check_id("user_id", user_id)
        check_id("key", key)
        statement = delete(Memory).where(Memory.user_id == user_id, Memory.key == key)
        async with self._run("delete", write=True) as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def forget_user(self, user_id: str) -> int:
        check_id("user_id", user_id)
        statement = delete(Memory).where(Memory.user_id == user_id)
        async with self._run("forget_user", write=True) as conn:
            result = await conn.execute(statement)
        return int(result.rowcount)

    async def scan(
        self, user_id: str | None = None, *, page_size: int = 500
    ) -> AsyncIterator[MemoryEntry]:
        """Every memory (of ``user_id``, or of all users for ``None``) in a stable order.

        Pages of ``page_size`` rows are read one transaction each, by primary key, so
        memory use stays flat however large the store is. For operators and ``export``.
        """
        if user_id is not None:
            check_id("user_id", user_id)
        page_size = check_limit(page_size)
        after: int | None = None
        while True:
            statement = select(Memory.id, *_ENTRY_COLUMNS).order_by(Memory.id).limit(page_size)
            if user_id is not None:
                statement = statement.where(Memory.user_id == user_id)
            if after is not None:
                statement = statement.where(Memory.id > after)
            async with self._run("scan") as conn:
                rows = (await conn.execute(statement)).all()
            for row in rows:
                yield _entry(row)
            if len(rows) < page_size:
                return
            after = rows[-1].id

    async def import_entries(self, entries: Iterable[MemoryEntry]) -> int:
        """Upsert ``entries`` with their own ``created_at`` and ``updated_at``, all or nothing.

        For restoring an export: unlike :meth:`store`, the timestamps are taken from the
        entries, so an export imported into an empty store reproduces it exactly, and
        importing the same entries twice changes nothing. Every entry is validated before
        anything is written; one transaction covers the whole call. A key given twice keeps
        its last entry. Returns the number of distinct memories written.
        """
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for entry in entries:
            user_id = check_id("user_id", entry.user_id)
            key = check_id("key", entry.key)
            created_at = _check_timestamp("created_at", entry.created_at)
            updated_at = _check_timestamp("updated_at", entry.updated_at)
            rows[(user_id, key)] = {
                "user_id": user_id,
                "key": key,
                "value": check_value(entry.value),
                "metadata": check_metadata(entry.metadata),
                "created_at": created_at,
                "updated_at": updated_at,
            }
        if not rows:
            await self._ready()
            return 0
        insert = self._insert(Memory)
        upsert = insert.on_conflict_do_update(
            index_elements=[Memory.user_id, Memory.key],
            set_={
                Memory.value: insert.excluded.value,
                Memory.metadata_: insert.excluded["metadata"],
                Memory.created_at: insert.excluded.created_at,
                Memory.updated_at: insert.excluded.updated_at,
            },
        )
        async with self._run("import_entries", write=True) as conn:
            await conn.execute(upsert, list(rows.values()))
        return len(rows)


def _check_timestamp(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number of unix seconds")
    return float(value)
