"""SQLite: a call that is one statement runs as that statement only, and each write is a
transaction of its own, in a batch or not.

A write statement (a plain store or delete) runs in autocommit, without ``BEGIN IMMEDIATE`` /
``COMMIT`` around it; a write of several statements (a conversation turn) runs in
``BEGIN IMMEDIATE`` … ``COMMIT`` holding that call's statements only. Either way a call that
raised changed nothing, and the connection is left with no transaction open.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from asyncmem import SchemaError, SQLBackend
from asyncmem.sql import drivers
from asyncmem.sql.compiled import SQL
from tests.backends import sqlite_driver


class Fault(Exception):
    pass


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLBackend]:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        yield backend


async def _traced(backend: SQLBackend) -> list[str]:
    """Every statement the writer connection and the loop's connection run from now on
    (SQLite's trace); a lone write runs on the loop's."""
    seen: list[str] = []
    driver = sqlite_driver(backend)
    writer = driver.writer
    connection = writer._connection
    assert connection is not None
    await writer._execute(connection.set_trace_callback, seen.append)  # type: ignore[no-untyped-call]
    assert driver._loop is not None
    driver._loop.set_trace_callback(seen.append)
    return seen


def _without_reads(seen: list[str]) -> list[str]:
    """The statements but reads (a write on the loop first asks whether it is heavy)."""
    return [statement for statement in seen if not statement.startswith("SELECT")]


async def _in_transaction(backend: SQLBackend) -> bool:
    """Whether the writer connection or the loop's is left inside a transaction."""
    driver = sqlite_driver(backend)
    writer = driver.writer
    connection = writer._connection
    assert connection is not None
    found: bool = await writer._execute(lambda: connection.in_transaction)  # type: ignore[no-untyped-call]
    assert driver._loop is not None
    return found or driver._loop.in_transaction


async def test_a_lone_plain_write_is_one_statement(store: SQLBackend) -> None:
    seen = await _traced(store)
    await store.store("alice", "k", "v")
    assert await store.delete("alice", "k") is True
    assert not [s for s in seen if s.startswith(("BEGIN", "COMMIT", "SAVEPOINT"))], seen
    ours = [s.split()[0] for s in seen if s.startswith(("INSERT INTO memories ", "DELETE FROM"))]
    assert set(ours) == {"INSERT", "DELETE"}  # (the trace repeats a statement per step)


async def test_a_turn_still_runs_in_begin_immediate(store: SQLBackend) -> None:
    seen = await _traced(store)
    await store.store("alice", "t1", "a turn", {"session": "s"})
    written = _without_reads(seen)
    assert written[0] == "BEGIN IMMEDIATE"
    assert written[-1] == "COMMIT"


async def test_concurrent_writes_share_a_trip_and_commit_one_by_one(
    store: SQLBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's transaction holds one call's statements: a batch-wide one held the file's
    write lock across every other call's statements (see ``drivers._run_batch``)."""
    trips: list[int] = []
    real = drivers._run_batch

    def counting(connection: Any, bodies: Any, *rest: Any) -> Any:
        trips.append(len(bodies))
        return real(connection, bodies, *rest)

    monkeypatch.setattr(drivers, "_run_batch", counting)
    seen = await _traced(store)
    await asyncio.gather(
        *(
            store.store("alice", f"k{i}", f"value {i}", {"session": "s"} if i % 4 == 0 else None)
            for i in range(24)
        )
    )
    assert max(trips) > 1, trips  # the calls shared trips to the writer's thread
    assert len(await store.list_keys("alice")) == 24
    assert "SAVEPOINT asyncmem_call" not in seen
    inside: set[str] | None = None
    turns = 0
    for statement in seen:
        if statement == "BEGIN IMMEDIATE":
            assert inside is None, "a transaction began inside another"
            inside = set()
        elif statement == "COMMIT":
            assert inside is not None
            assert len(inside) == 1, inside  # one call's upsert, and nothing of another call
            (key,) = inside
            assert int(key[1:]) % 4 == 0, key  # a turn; plain stores need no transaction
            turns += 1
            inside = None
        elif found := re.match(r"INSERT INTO memories \(.*?VALUES \('alice', '(k\d+)'", statement):
            if inside is None:
                assert int(found.group(1)[1:]) % 4, found.group(1)  # a plain store, alone
            else:
                inside.add(found.group(1))
    assert turns == 6


async def test_a_lone_write_that_fails_changes_nothing(store: SQLBackend) -> None:
    await store.store("alice", "k", "before")
    driver = sqlite_driver(store)

    def hook(sql: SQL) -> None:
        if sql.text.startswith("INSERT"):
            raise Fault("before the statement")

    driver.fault_hook = hook
    with pytest.raises(Fault):
        await store.store("alice", "k", "after")
    driver.fault_hook = None
    assert not await _in_transaction(store)
    entry = await store.retrieve("alice", "k")
    assert entry is not None
    assert entry.value == "before"


async def test_a_lone_turn_that_fails_changes_nothing(store: SQLBackend) -> None:
    """A turn's store on the loop's connection is rolled back whole, like in the writer's."""
    for i in range(3):
        await store.store("alice", f"t{i}", f"turn {i} about the lake", {"session": "s"})
    driver = sqlite_driver(store)
    seen = await _traced(store)

    def hook(sql: SQL) -> None:
        if sql.text.startswith("UPDATE memories"):  # the neighbours' upkeep, after the upsert
            raise Fault("after the upsert")

    driver.fault_hook = hook
    with pytest.raises(Fault):
        await store.store("alice", "t3", "turn 3 about the boat", {"session": "s"})
    driver.fault_hook = None
    trail = _without_reads(seen)
    assert trail[0] == "BEGIN IMMEDIATE"
    assert trail[-1] == "ROLLBACK"
    assert any(s.startswith("INSERT INTO memories ") for s in trail)
    assert not await _in_transaction(store)
    assert await store.retrieve("alice", "t3") is None
    assert [e.key for e in await store.query("alice", "boat")] == []


async def test_a_lone_write_sqlite_refuses_leaves_no_transaction(store: SQLBackend) -> None:
    """A statement that fails inside SQLite (here: a constraint) is rolled back by SQLite."""
    driver = sqlite_driver(store)
    bad = SQL("INSERT INTO memories (id, user_id) VALUES (1, NULL)", (), {})
    with pytest.raises(sqlite3.IntegrityError):
        await driver.fetch(bad, (), write=True)
    assert not await _in_transaction(store)
    await store.store("alice", "k", "v")
    assert (await store.retrieve("alice", "k")) is not None


async def test_errors_still_translate(store: SQLBackend) -> None:
    driver = sqlite_driver(store)
    missing = SQL("DELETE FROM no_such_table RETURNING 1", (), {})
    with pytest.raises(SchemaError):
        await store._fetch("delete", missing, (), write=True)
    with pytest.raises(SchemaError):
        await store._fetch("retrieve", SQL("SELECT * FROM no_such_table", (), {}), ())
    assert driver.fault_hook is None
