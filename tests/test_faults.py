"""Faults below the store: a full disk, a read-only file system or database, the database file
deleted or replaced while open, and (PostgreSQL) the server going away mid-run.

Each must give a typed asyncmem error (never a raw driver exception, never a hang), leave what
was stored intact, and let the store work again once the fault is gone.

Some tests mount a small tmpfs or a read-only bind mount, which needs root (or the right
capability); where mounting is not allowed they skip, and the SQLite-level versions of the same
faults (``max_page_count``, ``query_only``) still run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncmem import (
    AsyncmemError,
    BackendError,
    BackendUnavailableError,
    MemoryEntry,
    SQLBackend,
)
from tests.backends import PG_ENABLED, PG_URL, pg_schema
from tests.search_index import sqlite_problems

SECRET = "s3cret-memory-value"


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=10)


def _umount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True, timeout=10)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB file system of its own, mounted for this test."""
    target = tmp_path / "small"
    target.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(target))
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield target
    finally:
        _umount(target)


def _integrity(path: Path) -> list[tuple[Any, ...]]:
    raw = sqlite3.connect(path)
    try:
        rows = raw.execute("PRAGMA integrity_check").fetchall()
        assert sqlite_problems(raw) == []
        return rows
    finally:
        raw.close()


async def _same(backend: SQLBackend, kept: dict[str, MemoryEntry]) -> None:
    """Every memory in ``kept`` reads back exactly as stored."""
    for key, entry in kept.items():
        assert await backend.retrieve("alice", key) == entry, key


def _assert_typed(error: BaseException) -> None:
    assert isinstance(error, BackendError | BackendUnavailableError), repr(error)
    assert SECRET not in str(error)


async def on_sqlite_connections(backend: SQLBackend, pragma: str) -> None:
    """Inject a fault below the store: run ``pragma`` on each of its open SQLite connections.

    The store has no public hook for this on purpose; the test reaches into its driver."""
    driver = backend._driver
    for connection in (driver.writer, *driver._readers):  # type: ignore[attr-defined]
        await connection.execute_fetchall(pragma)
    if driver._loop is not None:  # type: ignore[attr-defined]
        driver._loop.execute(pragma).fetchall()  # type: ignore[attr-defined]


async def _fill_until_full(backend: SQLBackend, kept: dict[str, MemoryEntry]) -> AsyncmemError:
    chunk = (SECRET + " ") * 3000
    for i in range(10_000):
        try:
            kept[f"fill-{i}"] = await backend.store("alice", f"fill-{i}", f"{i} {chunk}")
        except AsyncmemError as exc:
            return exc
    raise AssertionError("the store never filled up")


async def _full_disk_scenario(backend: SQLBackend) -> None:
    kept = {"pet": await backend.store("alice", "pet", "a grey cat")}
    error = await _fill_until_full(backend, kept)
    _assert_typed(error)
    assert "full" in str(error)
    with pytest.raises(AsyncmemError) as again:
        await backend.store("alice", "pet", (SECRET + " ") * 3000)
    _assert_typed(again.value)
    await _same(backend, kept)
    assert len(await backend.list_keys("alice")) == len(kept)
    assert [hit.key for hit in await backend.query("alice", "grey cat")] == ["pet"]


async def test_database_size_cap_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        await on_sqlite_connections(backend, "PRAGMA max_page_count = 120")
        await _full_disk_scenario(backend)
        assert await backend.delete("alice", "fill-0") is True
        await backend.store("alice", "after", "room again")
    assert _integrity(path) == [("ok",)]


async def test_full_disk_is_a_typed_error(small_tmpfs: Path) -> None:
    path = small_tmpfs / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        await _full_disk_scenario(backend)
        for key in await backend.list_keys("alice"):
            if key.startswith("fill-"):
                with contextlib.suppress(AsyncmemError):
                    await backend.delete("alice", key)
    assert _integrity(path) == [("ok",)]
    async with SQLBackend(_url(path)) as backend:
        entry = await backend.retrieve("alice", "pet")
        assert entry is not None
        assert entry.value == "a grey cat"


async def test_query_only_database_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        kept = {"pet": await backend.store("alice", "pet", "a grey cat")}
        await on_sqlite_connections(backend, "PRAGMA query_only = ON")
        for call in (
            lambda: backend.store("alice", "pet", SECRET),
            lambda: backend.store("alice", "new", SECRET),
            lambda: backend.delete("alice", "pet"),
            lambda: backend.forget_user("alice"),
        ):
            with pytest.raises(BackendError, match="read-only") as raised:
                await call()
            _assert_typed(raised.value)
        await _same(backend, kept)
        assert await backend.list_keys("alice") == ["pet"]
    assert _integrity(path) == [("ok",)]


@contextlib.contextmanager
def _immutable(*paths: Path) -> Iterator[None]:
    """Files even root cannot write through descriptors it already holds (``chattr +i``)."""
    done: list[Path] = []
    try:
        for path in paths:
            result = subprocess.run(
                ["chattr", "+i", str(path)], check=False, capture_output=True, timeout=10
            )
            if result.returncode != 0:
                pytest.skip("cannot make a file immutable here (needs root and ext4/xfs)")
            done.append(path)
        yield
    finally:
        for path in done:
            subprocess.run(["chattr", "-i", str(path)], check=True, timeout=10)


async def test_database_file_made_read_only_while_open(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        kept = {"pet": await backend.store("alice", "pet", "a grey cat")}
        wal = Path(f"{path}-wal")
        with _immutable(path, wal):
            for call in (
                lambda: backend.store("alice", "pet", SECRET),
                lambda: backend.store("alice", "new", SECRET),
                lambda: backend.delete("alice", "pet"),
                lambda: backend.forget_user("alice"),
            ):
                with pytest.raises(AsyncmemError) as raised:
                    await asyncio.wait_for(call(), timeout=30)
                _assert_typed(raised.value)
            await _same(backend, kept)
        kept["new"] = await backend.store("alice", "new", "writable again")
        await _same(backend, kept)
    assert _integrity(path) == [("ok",)]


async def test_read_only_bind_mount_cannot_be_opened_for_writing(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    path = small_tmpfs / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        await backend.store("alice", "pet", "a grey cat")
    view = tmp_path / "read-only-view"
    view.mkdir()
    _mount("--bind", str(small_tmpfs), str(view))
    try:
        _mount("-o", "remount,bind,ro", str(view))
        before = path.read_bytes()
        backend = SQLBackend(_url(view / "memory.db"))
        assert await backend.is_available() is False
        with pytest.raises(AsyncmemError) as raised:
            await backend.store("alice", "pet", SECRET)
        _assert_typed(raised.value)
        await backend.aclose()
        assert path.read_bytes() == before
    finally:
        _umount(view)


# --- the database file deleted or replaced while open ----------------------------------------


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()


async def test_database_file_deleted_while_open(tmp_path: Path) -> None:
    """SQLite keeps writing to a deleted file's inode: the writes would vanish on close.

    The store must notice that its file is gone and say so instead of acknowledging writes
    nobody will ever read."""
    path = tmp_path / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        await backend.store("alice", "pet", "a grey cat")
        _remove_database(path)
        for call in (
            lambda: backend.store("alice", "new", SECRET),
            lambda: backend.retrieve("alice", "pet"),
            lambda: backend.list_keys("alice"),
            lambda: backend.query("alice", "cat"),
            lambda: backend.delete("alice", "pet"),
        ):
            with pytest.raises(BackendUnavailableError, match="deleted or replaced") as raised:
                await call()
            _assert_typed(raised.value)
        assert await backend.is_available() is False
    assert not path.exists()
    async with SQLBackend(_url(path)) as fresh:
        assert await fresh.list_keys("alice") == []
        await fresh.store("alice", "pet", "a new start")


async def test_database_file_replaced_while_open(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    other = tmp_path / "other.db"
    async with SQLBackend(_url(other)) as backend:
        theirs = await backend.store("bob", "pet", "a brown dog")
    async with SQLBackend(_url(path)) as backend:
        await backend.store("alice", "pet", "a grey cat")
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{path}{suffix}").unlink()
        shutil.copyfile(other, tmp_path / "incoming.db")
        os.replace(tmp_path / "incoming.db", path)
        snapshot = path.read_bytes()
        with pytest.raises(BackendUnavailableError, match="deleted or replaced") as raised:
            await backend.store("alice", "new", SECRET)
        _assert_typed(raised.value)
        with pytest.raises(BackendUnavailableError):
            await backend.forget_user("bob")
        assert path.read_bytes() == snapshot
    assert _integrity(path) == [("ok",)]
    async with SQLBackend(_url(path)) as reopened:
        assert await reopened.retrieve("bob", "pet") == theirs
        assert await reopened.retrieve("alice", "pet") is None


# --- PostgreSQL going away mid-run -----------------------------------------------------------


class Proxy:
    """A TCP relay to the PostgreSQL server that the test can cut, freeze and restore: from the
    store's side, a server restart, a network partition and the server coming back."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._generation = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        generation = self._generation
        self._writers.add(writer)
        if self._server is None or not self._server.is_serving():
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        if generation != self._generation:  # cut while this one was connecting
            writer.transport.abort()
            up_writer.transport.abort()
            return
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        await asyncio.gather(*pumps, return_exceptions=True)
        self._tasks.difference_update(pumps)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.transport.abort()

    async def cut(self) -> None:
        """Drop every connection and refuse new ones, like a server that restarts.

        Connections still arriving are dropped for a moment before the listening socket is
        closed: Python 3.11's asyncio leaks a socket accepted just as its server closes."""
        self._generation += 1
        for _ in range(2):
            for writer in list(self._writers):
                writer.transport.abort()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await asyncio.sleep(0.1)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        await asyncio.sleep(0.05)  # let the aborted transports finish closing their sockets
        self.flowing.set()


@pytest.fixture
async def pg_proxy() -> AsyncIterator[Proxy]:
    if not PG_ENABLED:
        pytest.skip("PostgreSQL tests are switched off")
    from sqlalchemy.engine import make_url

    parsed = make_url(PG_URL)
    proxy = Proxy((parsed.host or "127.0.0.1", parsed.port or 5432))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.cut()


@pytest.mark.postgresql
async def test_postgresql_restart_mid_run(pg_proxy: Proxy) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(PG_URL).set(host="127.0.0.1", port=pg_proxy.port)
    async with pg_schema() as schema:
        backend = SQLBackend(url, schema=schema, auto_migrate=True, timeout=2)
        async with backend:
            kept = {f"k{i}": await backend.store("alice", f"k{i}", f"value {i}") for i in range(5)}

            pg_proxy.flowing.clear()  # a partition: the server stops answering
            with pytest.raises(BackendUnavailableError) as frozen:
                await asyncio.wait_for(backend.store("alice", "during", SECRET), timeout=20)
            _assert_typed(frozen.value)

            await pg_proxy.cut()  # the server is gone
            for call in (
                lambda: backend.store("alice", "down", SECRET),
                lambda: backend.retrieve("alice", "k0"),
            ):
                with pytest.raises(BackendUnavailableError) as down:
                    await asyncio.wait_for(call(), timeout=20)
                _assert_typed(down.value)
            assert await asyncio.wait_for(backend.is_available(), timeout=20) is False

            await pg_proxy.start()  # and back, on the same port
            await asyncio.wait_for(backend.store("alice", "after", "back again"), timeout=20)
            for key, entry in kept.items():
                assert await backend.retrieve("alice", key) == entry
            keys = set(await backend.list_keys("alice"))
            assert keys - {"during"} == {*kept, "after"}


@pytest.mark.postgresql
async def test_postgresql_unreachable_never_hangs() -> None:
    if not PG_ENABLED:
        pytest.skip("PostgreSQL tests are switched off")
    backend = SQLBackend(f"postgresql://postgres@127.0.0.1:1/{uuid.uuid4().hex}", timeout=2)
    with pytest.raises(BackendUnavailableError):
        await asyncio.wait_for(backend.store("alice", "k", SECRET), timeout=20)
    await backend.aclose()
