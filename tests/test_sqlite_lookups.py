"""SQLite: a retrieve that comes alone, while no batch is at work, runs on the event loop's
thread; retrieves that come together go to the readers' thread as one batch, and so do those
that come while a batch is at work and one that SQLite would make wait.

A trip to a worker thread costs the event loop more than the lookup itself (see
``asyncmem.sql.drivers._lookup_connection``), so a lone lookup skips it; the loop still lets
the other tasks run before each one.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncmem import BackendClosedError, BackendUnavailableError, SQLBackend
from asyncmem.sql.compiled import SQL
from tests.backends import sqlite_driver


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLBackend]:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        for i in range(50):
            await backend.store("alice", f"k{i}", f"value {i}")
        yield backend


async def _threads_of_retrieves(backend: SQLBackend) -> list[int]:
    """From now on, the thread each retrieve's statement runs in, on any connection."""
    seen: list[int] = []

    def trace(statement: str) -> None:
        if statement.startswith("SELECT memories.user_id") and '."key" = ' in statement:
            seen.append(threading.get_ident())

    driver = sqlite_driver(backend)
    lookups = driver._lookups
    assert lookups is not None
    lookups.set_trace_callback(trace)
    for reader in driver._readers:
        connection = reader._connection
        assert connection is not None
        await reader._execute(connection.set_trace_callback, trace)  # type: ignore[no-untyped-call]
    return seen


async def test_a_lone_retrieve_runs_on_the_loop_and_lets_other_tasks_run(
    store: SQLBackend,
) -> None:
    threads = await _threads_of_retrieves(store)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    try:
        for i in range(300):
            entry = await store.retrieve("alice", f"k{i % 50}")
            assert entry is not None
            assert entry.value == f"value {i % 50}"
    finally:
        ticking.cancel()
    assert threads == [threading.get_ident()] * 300
    assert ticks >= 300, "a retrieve did not let the other tasks run"


async def test_retrieves_called_together_run_in_the_readers_thread(store: SQLBackend) -> None:
    threads = await _threads_of_retrieves(store)
    found = await asyncio.gather(*(store.retrieve("alice", f"k{i}") for i in range(50)))
    assert [entry.value for entry in found if entry is not None] == [
        f"value {i}" for i in range(50)
    ]
    assert len(threads) == 50
    assert threading.get_ident() not in threads


async def test_a_retrieve_while_a_write_is_at_work_goes_to_a_reader(store: SQLBackend) -> None:
    threads = await _threads_of_retrieves(store)
    writing = asyncio.ensure_future(store.store("alice", "new", "value new"))
    await asyncio.sleep(0)  # the store's trip to the writer's thread has begun
    entry = await store.retrieve("alice", "k3")
    await writing
    assert entry is not None
    assert entry.value == "value 3"
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_a_lookup_that_sqlite_would_make_wait_goes_to_a_reader(store: SQLBackend) -> None:
    driver = sqlite_driver(store)
    threads = await _threads_of_retrieves(store)
    refusals: list[str] = []

    def busy_once(sql: SQL) -> None:
        if not refusals:
            refusals.append(sql.text)
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
            raise error

    driver.fault_hook = busy_once
    try:
        entry = await store.retrieve("alice", "k7")
    finally:
        driver.fault_hook = None
    assert entry is not None
    assert entry.value == "value 7"
    assert len(refusals) == 1
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_other_errors_of_a_lookup_are_not_retried(store: SQLBackend) -> None:
    driver = sqlite_driver(store)
    calls: list[str] = []

    def broken(sql: SQL) -> None:
        calls.append(sql.text)
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = sqlite3.SQLITE_IOERR  # type: ignore[attr-defined]
        error.sqlite_errorname = "SQLITE_IOERR"  # type: ignore[attr-defined]
        raise error

    driver.fault_hook = broken
    try:
        with pytest.raises(BackendUnavailableError, match="cannot be read or written"):
            await store.retrieve("alice", "k7")
    finally:
        driver.fault_hook = None
    assert len(calls) == 1
    assert (await store.retrieve("alice", "k7")) is not None


async def test_a_retrieve_that_a_close_overtakes_is_a_closed_error(tmp_path: Path) -> None:
    backend = SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}")
    await backend.open()
    await backend.store("alice", "pet", "a grey cat")
    retrieving = asyncio.ensure_future(backend.retrieve("alice", "pet"))
    await asyncio.sleep(0)  # the retrieve waits in the lookup's yield
    await backend.aclose()
    with pytest.raises(BackendClosedError, match="closed before this call ran"):
        await retrieving


async def test_closing_closes_the_lookup_connection(tmp_path: Path) -> None:
    backend = SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}")
    await backend.open()
    lookups = sqlite_driver(backend)._lookups
    assert lookups is not None
    await backend.aclose()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        lookups.execute("SELECT 1")
    assert not Path(f"{tmp_path / 'memory.db'}-wal").exists()
