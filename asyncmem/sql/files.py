"""The SQLite file: where it lives, how it is created private, and its URL, without SQLAlchemy.

Opening the embedded store needs only these (and the compiled statements of
:mod:`asyncmem.sql.compiled`), so a process that only stores and queries never imports
SQLAlchemy, whose import costs more than the rest of a command-line call. A URL that is more
than ``sqlite:///path`` is parsed by SQLAlchemy (:func:`asyncmem.sql.engine.normalize_url`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from asyncmem.errors import BackendUnavailableError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = [
    "DatabaseURL",
    "check_private_file",
    "default_path",
    "parse_url",
    "prepare_sqlite_file",
]


def default_path() -> Path:
    """The embedded store's file: ``memory.db`` in the platform's user data directory."""
    return platformdirs.user_data_path("asyncmem", appauthor=False) / "memory.db"


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


_SIMPLE_SQLITE = re.compile(r"sqlite(?:\+(?:aiosqlite|pysqlite))?:///(?P<database>[^?#%]+)")
"""``sqlite:///relative/path`` or ``sqlite:////absolute/path``: nothing to unquote, no query."""


@dataclass(frozen=True, slots=True)
class DatabaseURL:
    """A database URL as the store needs it: the dialect, the SQLite file, the URL to show."""

    dialect: str
    path: Path | None
    """The SQLite file (``~`` expanded), ``None`` for a server or an in-memory database."""
    shown: str
    """The URL with any password hidden."""
    parsed: URL | None = None
    """SQLAlchemy's parse of it, when it was needed (every URL but a plain SQLite path)."""
    local: bool = True

    def sqlalchemy(self) -> URL:
        """The URL for SQLAlchemy (migrations): parsed now if it has not been yet."""
        if self.parsed is not None:
            return self.parsed
        from sqlalchemy.engine import URL

        return URL.create("sqlite+aiosqlite", database=str(self.path))


def parse_url(url: str | URL | None) -> DatabaseURL:
    """``url`` for the store: ``None`` is the embedded file; ``sqlite:///path`` is read here;
    anything else goes through SQLAlchemy, which also picks the async driver."""
    database: str | None = None
    if url is None:
        database = str(default_path())
    elif isinstance(url, str) and (simple := _SIMPLE_SQLITE.fullmatch(url)):
        database = simple["database"]
    if database is not None and database != ":memory:" and not database.startswith("file:"):
        return DatabaseURL("sqlite", Path(database).expanduser(), f"sqlite+aiosqlite:///{database}")
    from asyncmem.sql.engine import is_local, normalize_url, sqlite_path

    parsed = normalize_url(url)
    return DatabaseURL(
        parsed.get_backend_name(),
        sqlite_path(parsed),
        parsed.render_as_string(hide_password=True),
        parsed,
        is_local(parsed),
    )
