"""URLs and engines for the SQL store: one place that knows the dialects' settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from asyncmem.errors import InvalidInputError
from asyncmem.sql.files import check_private_file, default_path, prepare_sqlite_file

__all__ = [
    "BEGIN_OPTION",
    "check_private_file",
    "default_path",
    "default_url",
    "is_local",
    "make_engine",
    "normalize_url",
    "prepare_sqlite_file",
    "sqlite_path",
]

BEGIN_OPTION = "asyncmem_begin"
"""Execution option read by the SQLite ``begin`` hook: ``"IMMEDIATE"`` for writers, ``None``
for single-statement reads that need no explicit transaction."""

_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}
_BEGIN_MODES = frozenset({"DEFERRED", "IMMEDIATE", "EXCLUSIVE"})
_LOCAL_HOSTS = {None, "", "localhost", "127.0.0.1", "::1"}


def default_url() -> URL:
    return URL.create("sqlite+aiosqlite", database=str(default_path()))


def normalize_url(url: str | URL | None) -> URL:
    """Parse ``url`` and pick the async driver: ``sqlite://`` → aiosqlite, ``postgresql://`` →
    asyncpg. ``None`` is the embedded default."""
    if url is None:
        return default_url()
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise InvalidInputError("not a valid database URL") from exc
    backend = parsed.get_backend_name()
    if backend not in _DRIVERS:
        raise InvalidInputError(
            f"unsupported database {backend!r}: use a sqlite:// or postgresql:// URL"
        )
    driver = _DRIVERS[backend]
    if parsed.drivername != driver:
        parsed = parsed.set(drivername=driver)
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, or ``None`` for an in-memory database."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.database.startswith("file:"):
        return None
    return Path(url.database).expanduser()


def is_local(url: URL) -> bool:
    """True when the data stays on this machine."""
    return (
        url.get_backend_name() == "sqlite"
        or url.host in _LOCAL_HOSTS
        or (url.host or "").startswith("/")
    )


def make_engine(
    url: URL,
    *,
    busy_timeout: float = 5.0,
    timeout: float = 30.0,
    schema: str | None = None,
    statement_timeout: float | None = 30.0,
) -> AsyncEngine:
    """A SQLAlchemy engine for one-off work on the database: migrations and ``asyncmem db``.

    The store's own calls do not go through it (see :mod:`asyncmem.sql.drivers`). It opens
    a connection per use. SQLite connections get the same settings as the store's: WAL,
    ``synchronous=NORMAL``, a busy timeout, and ``BEGIN IMMEDIATE`` where a transaction
    asks for it (:data:`BEGIN_OPTION`). PostgreSQL connections get ``timeout`` seconds to
    connect, ``statement_timeout`` seconds for each statement (``None``: no limit, for a
    migration that rebuilds an index), and ``schema`` as their search path.
    """
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(url, poolclass=NullPool)
        _install_sqlite_hooks(engine, busy_timeout)
        return engine
    server_settings = {"application_name": "asyncmem"}
    if schema is not None:
        server_settings["search_path"] = schema
    connect_args = {
        "timeout": timeout,
        "command_timeout": statement_timeout,
        "server_settings": server_settings,
    }
    return create_async_engine(url, poolclass=NullPool, connect_args=connect_args)


def _install_sqlite_hooks(engine: AsyncEngine, busy_timeout: float) -> None:
    timeout_ms = max(0, int(busy_timeout * 1000))

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let the begin hook below own transactions instead of the sqlite3 module.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {timeout_ms}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA secure_delete = ON")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
        if mode in _BEGIN_MODES:
            connection.exec_driver_sql(f"BEGIN {mode}")
