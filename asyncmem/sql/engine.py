"""URLs and engines for the SQL store: one place that knows the dialects' settings."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import platformdirs
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from asyncmem.errors import BackendUnavailableError, InvalidInputError

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


def default_path() -> Path:
    """The embedded store's file: ``memory.db`` in the platform's user data directory."""
    return platformdirs.user_data_path("asyncmem", appauthor=False) / "memory.db"


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


def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and each missing parent with mode 0700 (never the umask's)."""
    missing: list[Path] = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for new in reversed(missing):
        try:
            os.mkdir(new, 0o700)
        except FileExistsError:
            continue
        os.chmod(new, 0o700)


def check_private_file(path: Path) -> None:
    """Refuse a database file that another user owns or that others may write to.

    Such a file can be changed under the store by someone else, or was never this user's:
    either way its memories are not private. Raises
    :class:`~asyncmem.errors.BackendUnavailableError`.
    """
    found = os.stat(path)
    if found.st_uid != os.geteuid():
        raise BackendUnavailableError(
            "the database file is owned by another user; open it as its owner, or pass "
            "allow_shared_file=True if that is intended"
        )
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise BackendUnavailableError(
            "the database file is writable by other users (chmod 600 it), or pass "
            "allow_shared_file=True if that is intended"
        )


def prepare_sqlite_file(
    path: Path, busy_timeout: float = 5.0, *, allow_shared_file: bool = False
) -> None:
    """Create the directories (0700) and the database file (0600) if needed; put it in WAL
    mode. An existing file must be this user's and writable by no one else
    (:func:`check_private_file`) unless ``allow_shared_file``.

    Switching a file to WAL takes its exclusive lock without the busy timeout: SQLite fails
    it at once while another connection reads the file, so stores opening a new file
    together failed now and then (3 runs in 40 of six at once). Here the switch is retried
    until ``busy_timeout``; once the file is in WAL mode every connection opens it so
    without that lock. Blocking: call it in a thread.
    """
    _make_private_dirs(path.parent)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    if not allow_shared_file:
        check_private_file(path)
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=busy_timeout)) as connection:
                connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def make_engine(
    url: URL,
    *,
    busy_timeout: float = 5.0,
    timeout: float = 30.0,
    schema: str | None = None,
) -> AsyncEngine:
    """A SQLAlchemy engine for one-off work on the database: migrations and ``asyncmem db``.

    The store's own calls do not go through it (see :mod:`asyncmem.sql.drivers`). It opens
    a connection per use. SQLite connections get the same settings as the store's: WAL,
    ``synchronous=NORMAL``, a busy timeout, and ``BEGIN IMMEDIATE`` where a transaction
    asks for it (:data:`BEGIN_OPTION`). PostgreSQL connections get ``timeout`` seconds to
    connect and for each statement, and ``schema`` as their search path.
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
        "command_timeout": timeout,
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
