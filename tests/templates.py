"""Migrated databases made once per test session, so that a test's store opens at head.

Migrating costs ~0.1 s per SQLite file and 0.3-0.8 s per PostgreSQL schema on the test
machine, and most tests only want an empty store. So the session migrates once, with the real
migrations at head (a new revision needs no change here), and each test gets a copy:

- SQLite: one template file, checkpointed and closed (no ``-wal``), copied byte for byte into
  the test's ``tmp_path`` (mode 0600, as the store creates it).
- PostgreSQL: a small pool of migrated schemas. A schema a test is done with is emptied in the
  background while the next test runs: ``TRUNCATE ... RESTART IDENTITY`` of every table the
  catalog lists (``alembic_version`` kept), sequences, seed rows and materialized views put
  back as the migrations left them. A schema whose structure or revision a test changed, or
  that cannot be emptied, is dropped instead, and a new one migrated.

``TRUNCATE`` rather than ``DELETE``: deleting is ~1 ms against ~100 ms, but leaves dead rows
(autovacuum is off on the test server) and a heap whose physical order differs from a new
table's; a truncated table is a new, empty file, as in a fresh schema.

Tests that need a new database or schema (migration tests, ``database_url``, ``pg_database``,
``pg_schema``) still get one nobody has used; only its making and dropping happen in the
background (:class:`FreshDatabases`, :meth:`PostgresPool.drop_later`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncmem import SQLBackend

POOL_SIZE = 3
"""Schemas kept per session: one in use, the others being emptied in the background."""

_RESETTERS = 2
"""Schemas emptied at once: emptying one (~100 ms, mostly waiting for the disk) takes longer
than many tests do."""

_LOCK_TIMEOUT = "10s"
"""How long emptying a schema waits for a lock a test left held before giving the schema up."""

_FINGERPRINT = """
SELECT md5(string_agg(item, E'\\n' ORDER BY item)) FROM (
    SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' '
        || is_nullable || ' ' || coalesce(column_default, '') || ' '
        || coalesce(generation_expression, '') AS item
    FROM information_schema.columns WHERE table_schema = $1
    UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = $1
    UNION ALL SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = $1::regnamespace
    UNION ALL SELECT 'trigger ' || pg_get_triggerdef(t.oid)
    FROM pg_trigger AS t JOIN pg_class AS r ON r.oid = t.tgrelid
    WHERE r.relnamespace = $1::regnamespace AND NOT t.tgisinternal
    UNION ALL SELECT 'function ' || md5(pg_get_functiondef(p.oid))
    FROM pg_proc AS p WHERE p.pronamespace = $1::regnamespace AND p.prokind IN ('f', 'p')
    UNION ALL SELECT 'relation ' || relname || ' ' || relkind::text
    FROM pg_class WHERE relnamespace = $1::regnamespace
    UNION ALL SELECT 'type ' || typname FROM pg_type WHERE typnamespace = $1::regnamespace
) AS objects
"""
"""What a test must not change in a schema it shares: every object's definition."""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --- SQLite ----------------------------------------------------------------------------------


class SQLiteTemplate:
    """One migrated file, made on first use and copied for each test."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / "template.db"
        self._built = False

    async def copy_to(self, target: Path) -> None:
        """Put a migrated, empty database at ``target`` unless a file is there already (a
        test reopening its store keeps its data)."""
        if target.exists():
            return
        if not self._built:
            await self._build()
        await asyncio.to_thread(_copy_file, self._path, target)

    async def _build(self) -> None:
        async with SQLBackend(f"sqlite:///{self._path}", auto_migrate=True):
            pass
        await asyncio.to_thread(_checkpoint, self._path)
        self._built = True


def _checkpoint(path: Path) -> None:
    """Fold the WAL into the file and close, so the file alone is the whole database."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm", "-journal"):
        leftover = path.with_name(path.name + suffix)
        if leftover.exists():
            raise RuntimeError(f"the SQLite template left {leftover.name} behind")


def _copy_file(source: Path, target: Path) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out)


# --- PostgreSQL ------------------------------------------------------------------------------


@dataclass
class _Schema:
    """A migrated schema and what its migrations left in it, to put back after each test."""

    name: str
    fingerprint: str = ""
    sequences: dict[str, int | None] = field(default_factory=dict)
    seeds: dict[str, list[str]] = field(default_factory=dict)
    """Tables the migrations wrote rows into → their columns that take values."""
    matviews: list[str] = field(default_factory=list)

    @property
    def seed(self) -> str:
        """Where the seed rows are kept (a schema of its own, so no test sees them)."""
        return f"{self.name}_seed"


class PostgresPool:
    """Migrated schemas on the test server, handed to one test at a time."""

    def __init__(self, url: str) -> None:
        self._url = url.replace("+asyncpg", "")
        self._created: list[_Schema] = []
        self._alive = 0
        self._free: list[tuple[_Schema, concurrent.futures.Future[bool]]] = []
        self._in_use: dict[str, _Schema] = {}
        self._resetter = concurrent.futures.ThreadPoolExecutor(_RESETTERS, "asyncmem-test-reset")

    async def acquire(self) -> str:
        """An empty schema at head, for one test."""
        while True:
            ready = next((item for item in self._free if item[1].done()), None)
            if ready is None and self._free and self._alive >= POOL_SIZE:
                ready = self._free[0]
                await asyncio.wrap_future(ready[1])
            if ready is None:
                schema = await self._create()
                break
            self._free.remove(ready)
            if ready[1].result():
                schema = ready[0]
                break
            self._alive -= 1
        self._in_use[schema.name] = schema
        return schema.name

    def release(self, name: str) -> None:
        """Empty the schema in the background; a later test takes it when that is done."""
        schema = self._in_use.pop(name)
        self._free.append((schema, self._resetter.submit(asyncio.run, self._reset(schema))))

    def drop_later(self, name: str) -> None:
        """Drop a schema a test made for itself (``pg_schema``), without waiting for it."""
        schema = _Schema(name)
        self._created.append(schema)
        self._resetter.submit(asyncio.run, self._drop_quietly(schema))

    def settle(self) -> None:
        """Wait until every schema given back is emptied (or dropped)."""
        concurrent.futures.wait([future for _, future in self._free])

    def close(self) -> None:
        """Drop every schema this pool made."""
        self._resetter.shutdown(wait=True)
        if self._created:
            asyncio.run(self._drop_all())

    async def _connect(self) -> Any:
        import asyncpg

        return await asyncpg.connect(
            self._url, timeout=10, server_settings={"lock_timeout": _LOCK_TIMEOUT}
        )

    async def _create(self) -> _Schema:
        schema = _Schema(f"asyncmem_test_{uuid.uuid4().hex[:12]}")
        self._created.append(schema)
        async with SQLBackend(self._url, schema=schema.name, auto_migrate=True):
            pass
        connection = await self._connect()
        try:
            await self._snapshot(connection, schema)
        finally:
            await connection.close()
        self._alive += 1
        return schema

    async def _snapshot(self, connection: Any, schema: _Schema) -> None:
        """Remember the schema as the migrations left it."""
        own = _quote(schema.name)
        schema.fingerprint = await _fingerprint(connection, schema.name)
        for row in await connection.fetch(
            "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = $1",
            schema.name,
        ):
            schema.sequences[row["sequencename"]] = row["last_value"]
        schema.matviews = [
            row["matviewname"]
            for row in await connection.fetch(
                "SELECT matviewname FROM pg_matviews WHERE schemaname = $1", schema.name
            )
        ]
        for table in await _tables(connection, schema.name):
            if await connection.fetchval(f"SELECT EXISTS (SELECT FROM {own}.{_quote(table)})"):
                schema.seeds[table] = [
                    row["column_name"]
                    for row in await connection.fetch(
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER' "
                        "ORDER BY ordinal_position",
                        schema.name,
                        table,
                    )
                ]
        if schema.seeds:
            await connection.execute(f"CREATE SCHEMA {_quote(schema.seed)}")
            for table in schema.seeds:
                await connection.execute(
                    f"CREATE TABLE {_quote(schema.seed)}.{_quote(table)} AS "
                    f"TABLE {own}.{_quote(table)}"
                )

    async def _reset(self, schema: _Schema) -> bool:
        """Empty ``schema`` back to its migrated state; ``False`` (and dropped) if it cannot."""
        try:
            connection = await self._connect()
        except Exception:
            return False
        try:
            if await _fingerprint(connection, schema.name) != schema.fingerprint:
                await _drop(connection, schema)
                return False
            written = await _tables(connection, schema.name, written=True)
            await connection.execute(_reset_sql(schema, written))
            return True
        except Exception:
            with contextlib.suppress(Exception):
                await _drop(connection, schema)
            return False
        finally:
            await connection.close()

    async def _drop_quietly(self, schema: _Schema) -> None:
        """Drop in the background; what fails here, closing the pool drops (or reports)."""
        with contextlib.suppress(Exception):
            connection = await self._connect()
            try:
                await _drop(connection, schema)
            finally:
                await connection.close()

    async def _drop_all(self) -> None:
        connection = await self._connect()
        try:
            for schema in self._created:
                await _drop(connection, schema)
        finally:
            await connection.close()


async def _fingerprint(connection: Any, name: str) -> str:
    structure = await connection.fetchval(_FINGERPRINT, name)
    revisions = await connection.fetch(
        f"SELECT version_num FROM {_quote(name)}.alembic_version ORDER BY version_num"
    )
    return f"{structure} {[row['version_num'] for row in revisions]}"


async def _tables(connection: Any, name: str, *, written: bool = False) -> list[str]:
    """Every table of the schema but Alembic's, as the catalog lists them now; with
    ``written`` only those a test wrote to: a table never written has no page (truncating
    costs ~20 ms a table, even an empty one)."""
    rows = await connection.fetch(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = $1 AND table_type = 'BASE TABLE' "
        "AND table_name <> 'alembic_version' AND (NOT $2 OR "
        "pg_relation_size(format('%I.%I', table_schema, table_name)::regclass) > 0) "
        "ORDER BY table_name",
        name,
        written,
    )
    return [row["table_name"] for row in rows]


def _reset_sql(schema: _Schema, tables: list[str]) -> str:
    """One transaction that leaves ``schema`` as its migrations did."""
    own = _quote(schema.name)
    statements = []
    if tables:
        listed = ", ".join(f"{own}.{_quote(table)}" for table in tables)
        statements.append(f"TRUNCATE {listed} RESTART IDENTITY CASCADE")
    for sequence, last_value in schema.sequences.items():
        qualified = f"{own}.{_quote(sequence)}"
        if last_value is None:
            statements.append(f"ALTER SEQUENCE {qualified} RESTART")
        else:
            statements.append(f"SELECT setval('{qualified}', {int(last_value)}, true)")
    if schema.seeds:
        # The rows as the migrations wrote them: no trigger (history, search) runs again.
        statements.append("SET LOCAL session_replication_role = replica")
        for table, columns in schema.seeds.items():
            names = ", ".join(_quote(column) for column in columns)
            statements.append(
                f"INSERT INTO {own}.{_quote(table)} ({names}) OVERRIDING SYSTEM VALUE "
                f"SELECT {names} FROM {_quote(schema.seed)}.{_quote(table)}"
            )
    statements.extend(f"REFRESH MATERIALIZED VIEW {own}.{_quote(v)}" for v in schema.matviews)
    return "BEGIN; " + "; ".join(statements) + "; COMMIT"


async def _drop(connection: Any, schema: _Schema) -> None:
    for name in (schema.name, schema.seed):
        await connection.execute(f"DROP SCHEMA IF EXISTS {_quote(name)} CASCADE")


class FreshDatabases:
    """New, empty databases (``CREATE DATABASE``, as ``pg_database`` always made them) for the
    tests that need a whole database: each is made while an earlier test runs and dropped
    after its test without waiting (a drop waits for a server checkpoint: 0.2-2.7 s here)."""

    def __init__(self, url: str) -> None:
        self._url = url.replace("+asyncpg", "")
        self._base = url.rpartition("/")[0]
        self._made: list[str] = []
        self._next: concurrent.futures.Future[str] | None = None
        self._worker = concurrent.futures.ThreadPoolExecutor(2, "asyncmem-test-databases")

    async def take(self) -> str:
        """The URL of a database nobody has used, the caller's until :meth:`give_back`."""
        made = self._next or self._worker.submit(asyncio.run, self._create())
        self._next = self._worker.submit(asyncio.run, self._create())
        name: str = await asyncio.wrap_future(made)
        return f"{self._base}/{name}"

    def give_back(self, url: str) -> None:
        self._worker.submit(asyncio.run, self._drop(url.rpartition("/")[2], quietly=True))

    def close(self) -> None:
        """Drop every database made, also the one made ahead and any a background drop
        missed."""
        self._worker.shutdown(wait=True)
        for name in self._made:
            asyncio.run(self._drop(name, quietly=False))

    async def _execute(self, sql: str) -> None:
        import asyncpg

        connection = await asyncpg.connect(self._url, timeout=10)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    async def _create(self) -> str:
        name = f"asyncmem_test_{uuid.uuid4().hex[:12]}"
        self._made.append(name)
        await self._execute(f"CREATE DATABASE {_quote(name)}")
        return name

    async def _drop(self, name: str, *, quietly: bool) -> None:
        try:
            await self._execute(f"DROP DATABASE IF EXISTS {_quote(name)} WITH (FORCE)")
        except Exception:
            if not quietly:
                raise


# --- the session's templates -----------------------------------------------------------------


@dataclass
class Templates:
    sqlite: SQLiteTemplate
    postgresql: PostgresPool | None
    databases: FreshDatabases | None


_current: Templates | None = None


def current() -> Templates | None:
    """The running test session's templates; ``None`` outside a session (fresh databases)."""
    return _current


@contextlib.contextmanager
def session(directory: Path, pg_url: str | None) -> Iterator[Templates]:
    global _current
    templates = Templates(
        SQLiteTemplate(directory),
        PostgresPool(pg_url) if pg_url else None,
        FreshDatabases(pg_url) if pg_url else None,
    )
    _current = templates
    try:
        yield templates
    finally:
        _current = None
        try:
            if templates.postgresql is not None:
                templates.postgresql.close()
        finally:
            if templates.databases is not None:
                templates.databases.close()
