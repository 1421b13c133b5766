"""SQLite: a retrieve, store or delete that comes alone, while no batch is at work, runs on
the event loop's thread; calls that come together go to the readers' or the writer's thread as
one batch, and so do those that come while a batch is at work and one that SQLite would make
wait.

A trip to a worker thread costs the event loop more than a lookup or a small write itself (see
``asyncmem.sql.drivers._loop_connection``), so a lone call skips it; the loop still lets the
other tasks run before each one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from asyncmem import BackendClosedError, BackendUnavailableError, SQLBackend
from asyncmem.sql.compiled import SQL
from asyncmem.sql.drivers import _LOOP_WRITE_CHARS, _LOOP_WRITES_PER_CHECKPOINT
from asyncmem.sql.search import CONTEXT_AFTER, CONTEXT_BEFORE
from asyncmem.sql.terms import MERGE_AFTER
from tests.backends import sqlite_driver


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLBackend]:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        for i in range(50):
            await backend.store("alice", f"k{i}", f"value {i}")
        yield backend


async def _trace(backend: SQLBackend, trace: Callable[[str], None]) -> None:
    """From now on, call ``trace`` with each statement, on any of the store's connections."""
    driver = sqlite_driver(backend)
    loop = driver._loop
    assert loop is not None
    loop.set_trace_callback(trace)
    for thread in (*driver._readers, driver.writer):
        connection = thread._connection
        assert connection is not None
        await thread._execute(connection.set_trace_callback, trace)  # type: ignore[no-untyped-call]


async def _threads_of_retrieves(backend: SQLBackend) -> list[int]:
    """From now on, the thread each retrieve's statement runs in."""
    seen: list[int] = []

    def trace(statement: str) -> None:
        if statement.startswith("SELECT memories.user_id") and '."key" = ' in statement:
            seen.append(threading.get_ident())

    await _trace(backend, trace)
    return seen


class _Writes:
    """The thread each store's or delete's statement last started in, one entry per
    statement (SQLite traces a statement again at each trigger it fires, and a statement that
    was refused starts again elsewhere; its text holds its arguments)."""

    def __init__(self) -> None:
        self.threads: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.threads)

    def on(self, thread: int) -> int:
        return list(self.threads.values()).count(thread)


async def _threads_of_writes(backend: SQLBackend) -> _Writes:
    writes = _Writes()

    def trace(statement: str) -> None:
        if statement.startswith(("INSERT INTO memories ", "DELETE FROM memories ")):
            writes.threads[statement] = threading.get_ident()

    await _trace(backend, trace)
    return writes


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
    driver.fault_hook = _busy_once(refusals)
    try:
        entry = await store.retrieve("alice", "k7")
    finally:
        driver.fault_hook = None
    assert entry is not None
    assert entry.value == "value 7"
    assert len(refusals) == 1
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_a_retrieve_that_a_close_overtakes_is_a_closed_error(tmp_path: Path) -> None:
    backend = SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}")
    await backend.open()
    await backend.store("alice", "pet", "a grey cat")
    retrieving = asyncio.ensure_future(backend.retrieve("alice", "pet"))
    await asyncio.sleep(0)  # the retrieve waits in the lookup's yield
    await backend.aclose()
    with pytest.raises(BackendClosedError, match="closed before this call ran"):
        await retrieving


async def test_a_store_that_a_close_overtakes_is_a_closed_error_and_stores_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    backend = SQLBackend(f"sqlite:///{path}")
    await backend.open()
    await backend.store("alice", "pet", "a grey cat")
    storing = asyncio.ensure_future(backend.store("alice", "pet", "a dog"))
    await asyncio.sleep(0)  # the store waits in the loop's yield
    await backend.aclose()
    with pytest.raises(BackendClosedError, match="closed before this call ran"):
        await storing
    async with SQLBackend(f"sqlite:///{path}") as again:
        found = await again.retrieve("alice", "pet")
    assert found is not None
    assert found.value == "a grey cat"


async def test_closing_closes_the_loop_connection(tmp_path: Path) -> None:
    backend = SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}")
    await backend.open()
    loop = sqlite_driver(backend)._loop
    assert loop is not None
    await backend.aclose()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        loop.execute("SELECT 1")
    assert not Path(f"{tmp_path / 'memory.db'}-wal").exists()


def _busy_once(refusals: list[str]) -> Callable[[SQL], None]:
    def refuse(sql: SQL) -> None:
        if not refusals:
            refusals.append(sql.text)
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
            raise error

    return refuse


async def test_lone_stores_and_deletes_run_on_the_loop(store: SQLBackend) -> None:
    threads = await _threads_of_writes(store)
    for i in range(200):
        await store.store("alice", f"new{i}", f"value new {i}")
    for i in range(100):
        assert await store.delete("alice", f"new{i}")
    here = threading.get_ident()
    assert len(threads) == 300
    on_loop = threads.on(here)
    # Through the writer: one in LOOP_WRITES_PER_CHECKPOINT + 1, whose commit checkpoints,
    # and the stores that may merge postings, the last reach + 1 of each MERGE_AFTER.
    reach = 1 + CONTEXT_BEFORE + CONTEXT_AFTER
    merging = reach * (200 // (MERGE_AFTER - reach) + 1)
    assert on_loop >= 300 - 300 // (_LOOP_WRITES_PER_CHECKPOINT + 1) - 1 - merging
    assert on_loop < 300
    assert [key for key in await store.list_keys("alice") if key.startswith("new")] == [
        f"new{i}" for i in range(199, 99, -1)
    ]


async def test_a_lone_turn_runs_on_the_loop(store: SQLBackend) -> None:
    sqlite_driver(store)._loop_writes = 0
    threads = await _threads_of_writes(store)
    for i in range(5):
        await store.store("alice", f"t{i}", f"turn {i} about the lake", {"session": "s"})
    assert await store.delete("alice", "t2")
    assert len(threads) == 7  # the delete tries the plain statement first
    assert threads.on(threading.get_ident()) == 7
    found = [e.key for e in await store.query("alice", "turn 2 lake")]
    assert "t2" not in found
    assert {"t1", "t3"} <= set(found)


async def test_writes_called_together_run_in_the_writers_thread(store: SQLBackend) -> None:
    threads = await _threads_of_writes(store)
    await asyncio.gather(*(store.store("alice", f"new{i}", f"value {i}") for i in range(50)))
    assert len(threads) == 50
    assert threads.on(threading.get_ident()) == 0
    assert len(await store.list_keys("alice")) == 100


async def test_a_large_write_runs_in_the_writers_thread(store: SQLBackend) -> None:
    threads = await _threads_of_writes(store)
    big = "word " * (_LOOP_WRITE_CHARS // 5 + 1)
    await store.store("alice", "big", big)
    assert len(threads) == 1
    assert threads.on(threading.get_ident()) == 0
    found = await store.retrieve("alice", "big")
    assert found is not None
    assert found.value == big


async def test_a_write_another_connection_holds_the_lock_for_waits_in_the_writer(
    store: SQLBackend, tmp_path: Path
) -> None:
    threads = await _threads_of_writes(store)
    other = sqlite3.connect(tmp_path / "memory.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        storing = asyncio.ensure_future(store.store("alice", "pet", "a grey cat"))
        await asyncio.sleep(0.05)
        assert not storing.done()
        other.execute("COMMIT")
        entry = await storing
    finally:
        other.close()
    assert entry.value == "a grey cat"
    assert len(threads) == 1
    assert threads.on(threading.get_ident()) == 0


async def test_a_write_that_sqlite_would_make_wait_goes_to_the_writer(store: SQLBackend) -> None:
    driver = sqlite_driver(store)
    threads = await _threads_of_writes(store)
    refusals: list[str] = []
    driver.fault_hook = _busy_once(refusals)
    try:
        await store.store("alice", "k7", "changed")
    finally:
        driver.fault_hook = None
    found = await store.retrieve("alice", "k7")
    assert found is not None
    assert found.value == "changed"
    assert len(refusals) == 1
    assert len(threads) == 1
    assert threads.on(threading.get_ident()) == 0


async def test_other_errors_of_a_call_on_the_loop_are_not_retried_and_change_nothing(
    store: SQLBackend,
) -> None:
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
        for call in (
            lambda: store.retrieve("alice", "k7"),
            lambda: store.store("alice", "k7", "changed"),
            lambda: store.delete("alice", "k8"),
        ):
            with pytest.raises(BackendUnavailableError, match="cannot be read or written"):
                await call()
    finally:
        driver.fault_hook = None
    assert len(calls) == 3
    found = [await store.retrieve("alice", key) for key in ("k7", "k8")]
    assert [entry.value for entry in found if entry is not None] == ["value 7", "value 8"]


async def test_the_wal_stays_bounded_under_lone_writes(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        for i in range(3000):
            await backend.store("alice", f"k{i % 1000}", f"value {i} " + "word " * 60)
        wal = Path(f"{path}-wal").stat().st_size
    # SQLite's automatic checkpoint keeps the WAL near 1,000 pages; with no checkpoint it
    # would hold every one of the 3,000 writes' pages.
    assert wal < 1500 * 4096


async def test_the_merge_threshold_is_the_schemas(store: SQLBackend, tmp_path: Path) -> None:
    with contextlib.closing(sqlite3.connect(tmp_path / "memory.db")) as connection:
        ((trigger,),) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'search_users_merge'"
        ).fetchall()
    assert f"WHEN new.recent >= {MERGE_AFTER} BEGIN" in trigger


async def test_a_write_that_would_merge_postings_runs_in_the_writers_thread(
    store: SQLBackend, tmp_path: Path
) -> None:
    """The write that moves a user's latest postings into ``search_terms`` (all 64 writes'
    at once) runs off the loop, however small it is itself."""
    sqlite_driver(store)._loop_writes = 0
    threads = await _threads_of_writes(store)
    here = threading.get_ident()
    most = MERGE_AFTER - 1 - CONTEXT_BEFORE - CONTEXT_AFTER
    due: list[bool] = []
    with contextlib.closing(sqlite3.connect(tmp_path / "memory.db")) as reading:
        for i in range(150):
            ((recent,),) = reading.execute(
                "SELECT recent FROM search_users WHERE user_id = 'alice'"
            ).fetchall()
            due.append(recent >= most)
            before = len(threads)
            if i % 3:
                await store.store("alice", f"new{i}", f"value {i}")
            else:
                await store.store("alice", f"turn{i}", f"turn {i}", {"session": "s"})
            assert len(threads) == before + 1
            ran_here = list(threads.threads.values())[-1] == here
            assert not (due[-1] and ran_here), f"write {i} merged on the loop"
    assert sum(due) >= 4
    assert threads.on(here) >= 150 - sum(due) - 150 // _LOOP_WRITES_PER_CHECKPOINT - 1
