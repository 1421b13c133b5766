"""The backends the shared suites run on: a name → an async context manager factory.

Each factory gets the test's ``tmp_path`` and yields an open backend that no other test sees.

PostgreSQL runs unless ``ASYNCMEM_TEST_PG_URL`` is ``off``; by default it is the local server
(``postgresql://postgres@127.0.0.1:5432/test``). A server that cannot be reached fails the
tests: it never skips them.

In a test session the SQLite file is a copy of a template migrated once, and the PostgreSQL
schema one of a few migrated once and emptied after each test (:mod:`tests.templates`);
outside one, each store migrates a new file or schema.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from asyncmem import MemoryBackend, NullBackend, SQLBackend
from asyncmem.sql.drivers import SQLiteDriver
from tests import templates

BackendFactory = Callable[[Path], AbstractAsyncContextManager[MemoryBackend]]

PG_URL = os.environ.get("ASYNCMEM_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PG_ENABLED = PG_URL.lower() not in {"", "off", "0", "no"}


@asynccontextmanager
async def null_backend(tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    async with NullBackend() as backend:
        yield backend


def sqlite_driver(backend: SQLBackend) -> SQLiteDriver:
    """The SQLite driver under ``backend``, for tests that reach below the store on purpose."""
    driver = backend._driver
    assert isinstance(driver, SQLiteDriver)
    return driver


async def sqlite_at_head(path: Path) -> None:
    """Put an empty database at head at ``path`` (a copy of the session's template), for a
    test whose store need not migrate a new file; outside a session the store migrates it."""
    session = templates.current()
    if session is not None:
        await session.sqlite.copy_to(path)


@asynccontextmanager
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    path = tmp_path / "memory.db"
    await sqlite_at_head(path)
    async with SQLBackend(f"sqlite:///{path}") as backend:
        yield backend


async def _pg_execute(sql: str, database_url: str = PG_URL) -> None:
    import asyncpg

    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""), timeout=10)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@asynccontextmanager
async def pg_schema() -> AsyncIterator[str]:
    """A fresh schema name; the schema (created by whoever uses it) is dropped afterwards."""
    name = f"asyncmem_test_{uuid.uuid4().hex[:12]}"
    session = templates.current()
    try:
        yield name
    finally:
        if session is not None and session.postgresql is not None:
            session.postgresql.drop_later(name)
        else:
            await _pg_execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@asynccontextmanager
async def pg_database() -> AsyncIterator[str]:
    """A fresh, empty database on the test server; yields its URL and drops it afterwards."""
    session = templates.current()
    databases = None if session is None else session.databases
    if databases is not None:
        url = await databases.take()
        try:
            yield url
        finally:
            databases.give_back(url)
        return
    name = f"asyncmem_test_{uuid.uuid4().hex[:12]}"
    await _pg_execute(f'CREATE DATABASE "{name}"')
    base, _, _ = PG_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        await _pg_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def postgresql_backend(tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    session = templates.current()
    pool = None if session is None else session.postgresql
    if pool is None:
        async with (
            pg_schema() as schema,
            SQLBackend(PG_URL, schema=schema, auto_migrate=True) as backend,
        ):
            yield backend
        return
    schema = await pool.acquire()
    try:
        async with SQLBackend(PG_URL, schema=schema, auto_migrate=True) as backend:
            yield backend
    finally:
        pool.release(schema)


@asynccontextmanager
async def honcho_backend(tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    """The real honcho-ai SDK on the fake server, or the live one at ASYNCMEM_TEST_HONCHO_URL."""
    from tests.fake_honcho import honcho_backend as open_honcho

    async with open_honcho(tmp_path) as backend:
        yield backend


BACKEND_FACTORIES: dict[str, BackendFactory] = {
    "honcho": honcho_backend,
    "null": null_backend,
    "sqlite": sqlite_backend,
}
if PG_ENABLED:
    BACKEND_FACTORIES["postgresql"] = postgresql_backend

NON_PERSISTENT = frozenset({"null"})
SQL = frozenset({"sqlite", "postgresql"})
"""The ``SQLBackend`` dialects: what only the SQL store offers (import, scan) runs on these."""
"""Backends that store nothing: they run the input and lifecycle tests, not the semantics."""
