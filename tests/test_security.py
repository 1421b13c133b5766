"""Privacy of what is stored: private files, and no stored value or credential in any error
message, chained driver error, traceback, repr or log line, even with every logger at DEBUG."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from asyncmem import (
    AsyncmemError,
    BackendUnavailableError,
    InvalidInputError,
    SQLBackend,
    open_backend,
)
from tests.backends import PG_ENABLED, PG_URL, pg_schema
from tests.test_faults import on_sqlite_connections

SECRET = "zq-secret-memory-7731"
PASSWORD = "pw-hunter2-9931"
LOGGERS = ["", "asyncmem", "sqlalchemy", "alembic", "aiosqlite", "asyncpg"]


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_zero")
async def test_files_are_private_even_with_a_permissive_umask(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await backend.store("alice", "k", SECRET)
        sidecars = [Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(sidecar.exists() for sidecar in sidecars)
        assert _mode(path) == 0o600
        assert _mode(path.parent) == 0o700
        for sidecar in sidecars:
            assert _mode(sidecar) == 0o600, sidecar.name


@pytest.mark.usefixtures("umask_zero")
async def test_default_location_is_private_with_a_permissive_umask(tmp_path: Path) -> None:
    backend = open_backend()
    assert isinstance(backend, SQLBackend)
    assert backend.path is not None
    async with backend:
        await backend.store("alice", "k", SECRET)
    path = Path(backend.path)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700


def _chain_text(error: BaseException) -> str:
    """Everything a caller might print or log about ``error``: message, repr, the whole
    chained traceback with every cause's message."""
    return "\n".join([str(error), repr(error), *traceback.format_exception(error)])


async def _provoke_sqlite_errors(tmp_path: Path) -> list[BaseException]:
    errors: list[BaseException] = []

    async def expect(call: Any) -> None:
        try:
            await call()
        except AsyncmemError as exc:
            errors.append(exc)
        else:  # pragma: no cover - the test below fails on the count
            pass

    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}", busy_timeout=0.1) as backend:
        await backend.store("alice", "k", SECRET, {"note": SECRET})
        await backend.retrieve("alice", "k")
        await backend.query("alice", SECRET)
        for bad in (f"{SECRET}\x00", f"{SECRET}\ud800", SECRET * 100_000):
            await expect(lambda bad=bad: backend.store("alice", "k", bad))
        await expect(lambda: backend.store("alice", SECRET * 20, "v"))
        await expect(lambda: backend.store("alice", "k", "v", {"x": {SECRET}}))
        await expect(lambda: backend.store("alice", "k", "v", {SECRET: float("nan")}))
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            await expect(lambda: backend.store("alice", "k", SECRET + " while locked"))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await on_sqlite_connections(backend, "PRAGMA max_page_count = 40")
        await expect(lambda: backend.store("alice", "big", SECRET * 20_000))
    return errors


async def test_no_secret_in_errors_tracebacks_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    errors = await _provoke_sqlite_errors(tmp_path)
    assert len(errors) == 8
    assert any(isinstance(error, InvalidInputError) for error in errors)
    assert any(not isinstance(error, InvalidInputError) for error in errors)
    for error in errors:
        assert SECRET not in _chain_text(error), _chain_text(error)[-2000:]
    assert caplog.records, "the loggers were not capturing"
    assert any(record.name.startswith("sqlalchemy") for record in caplog.records)
    assert SECRET not in caplog.text


@pytest.mark.postgresql
async def test_no_password_or_secret_on_postgresql(caplog: pytest.LogCaptureFixture) -> None:
    if not PG_ENABLED:
        pytest.skip("PostgreSQL tests are switched off")
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    url = make_url(PG_URL).set(password=PASSWORD)  # trust auth: accepted and ignored
    errors: list[BaseException] = []
    async with pg_schema() as schema:
        backend = SQLBackend(url, schema=schema, auto_migrate=True, timeout=5)
        async with backend:
            await backend.store("alice", "k", SECRET, {"note": SECRET})
            await backend.query("alice", SECRET)
            assert PASSWORD not in repr(backend)
            assert PASSWORD not in backend.url
    for bad in (
        url.set(port=1),
        url.set(database="asyncmem_no_such_database"),
        url.set(username="asyncmem_no_such_role"),
    ):
        failing = SQLBackend(bad, timeout=5)
        try:
            await failing.store("alice", "k", SECRET)
        except AsyncmemError as exc:
            errors.append(exc)
        await failing.aclose()
    assert len(errors) == 3
    for error in errors:
        text = _chain_text(error)
        assert PASSWORD not in text
        assert SECRET not in text
    assert PASSWORD not in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.usefixtures("umask_zero")
async def test_every_directory_the_store_creates_is_private(tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    path = existing / "a" / "b" / "c" / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await backend.store("alice", "k", SECRET)
    for directory in (existing / "a", existing / "a" / "b", existing / "a" / "b" / "c"):
        assert _mode(directory) == 0o700, directory
    assert _mode(existing) == 0o755  # a directory that was there is left as it was


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
async def test_a_database_file_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await backend.store("alice", "k", SECRET)
    path.chmod(mode)
    with pytest.raises(BackendUnavailableError, match="writable by other users"):
        async with SQLBackend(f"sqlite:///{path}"):
            pass
    async with SQLBackend(f"sqlite:///{path}", allow_shared_file=True) as backend:
        entry = await backend.retrieve("alice", "k")
        assert entry is not None
        assert entry.value == SECRET
    assert _mode(path) == mode  # never changed behind the caller's back


async def test_a_database_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await backend.store("alice", "k", SECRET)
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(path, 12345, -1)
    with pytest.raises(BackendUnavailableError, match="owned by another user"):
        async with SQLBackend(f"sqlite:///{path}"):
            pass
    async with SQLBackend(f"sqlite:///{path}", allow_shared_file=True) as backend:
        assert await backend.retrieve("alice", "k") is not None
