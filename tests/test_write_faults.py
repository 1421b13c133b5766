"""A write that raised changed nothing; a write that returned is whole (issue: trust).

Every public write of the SQL store is interrupted at each statement boundary inside it, on
SQLite and PostgreSQL, by the driver's fault hook: the n-th statement the call sends fails as
a lost connection would. For each n the call must either raise and leave every table exactly
as it was, or (once n is past its last statement) return with its whole effect: the memory
written or gone, every neighbour context equal to a from-scratch recomputation, and no word
of a removed memory findable by ``query``. Then the same with real contention: another
connection holding SQLite's write lock with a short ``busy_timeout``, and another session
holding a user's PostgreSQL advisory lock with a short ``timeout``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from asyncmem import BackendUnavailableError, MemoryEntry, SQLBackend
from asyncmem.sql.models import Memory, MemoryVersion
from asyncmem.sql.statements import _DIALECTS, SQL, compile_sql
from asyncmem.sql.terms import neighbour_contexts
from tests.backends import BACKEND_FACTORIES, PG_URL, pg_schema
from tests.search_index import async_problems

SQL_BACKENDS = [name for name in ("sqlite", "postgresql") if name in BACKEND_FACTORIES]


class InjectedFault(ConnectionResetError):
    """What the hook raises: to the store it looks like a connection lost mid-call."""


class Faults:
    """Fail the ``at``-th statement (from 0) sent after :meth:`arm`; count what was sent."""

    def __init__(self) -> None:
        self.at: int | None = None
        self.sent = 0

    def arm(self, at: int) -> None:
        self.at, self.sent = at, 0

    def disarm(self) -> None:
        self.at = None

    def __call__(self, sql: SQL) -> None:
        if self.at is None:
            return
        index, self.sent = self.sent, self.sent + 1
        if index == self.at:
            raise InjectedFault("injected fault")


@pytest.fixture(params=SQL_BACKENDS)
async def sql(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SQLBackend]:
    async with BACKEND_FACTORIES[request.param](tmp_path) as opened:
        assert isinstance(opened, SQLBackend)
        yield opened


async def _select(backend: SQLBackend, statement: Any) -> list[tuple[Any, ...]]:
    sql = compile_sql(statement, _DIALECTS[backend.dialect])
    rows = await backend._driver.fetch(sql, ())
    return [tuple(row) for row in rows]


async def _snapshot(backend: SQLBackend) -> dict[str, Any]:
    """Everything the store keeps, the search index's own consistency included."""
    memories = await _select(
        backend,
        select(
            Memory.id,
            Memory.user_id,
            Memory.key,
            Memory.value,
            Memory.metadata_,
            Memory.created_at,
            Memory.updated_at,
            Memory.expires_at,
            Memory.session,
            Memory.context,
            Memory.facets,
        ).order_by(Memory.id),
    )
    versions = await _select(
        backend,
        select(MemoryVersion.user_id, MemoryVersion.key, MemoryVersion.value).order_by(
            MemoryVersion.id
        ),
    )
    return {"memories": memories, "versions": versions}


async def _check_whole(backend: SQLBackend) -> None:
    """Every context is what a from-scratch recomputation gives; the FTS index is intact."""
    rows = (await _snapshot(backend))["memories"]
    conversations: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in rows:
        if row[8] is not None:
            conversations.setdefault((row[1], row[8]), []).append(row)
    expected = {(row[1], row[2]): "" for row in rows}
    for turns in conversations.values():
        for row, context in zip(turns, neighbour_contexts([t[3] for t in turns]), strict=True):
            expected[row[1], row[2]] = context
    assert {(row[1], row[2]): row[9] for row in rows} == expected
    dialect = _DIALECTS[backend.dialect]

    async def fetch(sql: str) -> list[Any]:
        rows = await backend._driver.fetch(compile_sql(text(sql), dialect), ())
        return [tuple(row) for row in rows]

    assert await async_problems(fetch) == []


async def _conversation(backend: SQLBackend, ttl: float = 3600) -> None:
    """alice: a conversation of six turns with a word of their own each, two plain facts, a
    second conversation, and two turns that expire after ``ttl``; bob: a conversation."""
    for i in range(6):
        await backend.store("alice", f"t{i}", f"turn {i} says word{i}", {"session": "s"})
    await backend.store("alice", "fact", "alice keeps a grey cat")
    await backend.store("alice", "fact2", "alice rides a red bicycle")
    for i in range(3):
        await backend.store("alice", f"u{i}", f"other {i} says other{i}", {"session": "u"})
    await backend.store("alice", "e0", "fleeting ephemeral0", {"session": "s"}, ttl=ttl)
    await backend.store("alice", "e1", "fleeting ephemeral1", {"session": "u"}, ttl=ttl)
    for i in range(3):
        await backend.store("bob", f"t{i}", f"bob turn {i} says word{i}", {"session": "s"})


async def _expect_gone(backend: SQLBackend, user_id: str, word: str) -> None:
    hits = await backend.query(user_id, word, limit=100)
    assert hits == [], f"{word!r} is still found after it was removed"


Write = Callable[[SQLBackend], Awaitable[object]]
Check = Callable[[SQLBackend, object], Awaitable[None]]


async def _check_stored_turn(backend: SQLBackend, result: object) -> None:
    assert isinstance(result, MemoryEntry)
    assert (await backend.retrieve("alice", result.key)) is not None


async def _check_t2_gone(backend: SQLBackend, result: object) -> None:
    assert result in (True, 1, 2)
    assert await backend.retrieve("alice", "t2") is None
    await _expect_gone(backend, "alice", "word2")


async def _check_t2_rewritten(backend: SQLBackend, result: object) -> None:
    entry = await backend.retrieve("alice", "t2")
    assert entry is not None
    assert entry.value == "turn 2 rewritten"
    await _expect_gone(backend, "alice", "word2")


async def _check_t2_plain(backend: SQLBackend, result: object) -> None:
    entry = await backend.retrieve("alice", "t2")
    assert entry is not None
    assert (entry.value, entry.metadata) == ("now a plain fact", {})
    await _expect_gone(backend, "alice", "word2")


async def _check_forgotten(backend: SQLBackend, result: object) -> None:
    assert result == 13
    assert await backend.list_keys("alice") == []
    await _expect_gone(backend, "alice", "word2 grey cat ephemeral0")
    assert (await backend.query("bob", "word2"))[0].key == "t2"


async def _check_purged(backend: SQLBackend, result: object) -> None:
    assert result == 2
    await _expect_gone(backend, "alice", "ephemeral0 ephemeral1")


async def _import(backend: SQLBackend) -> object:
    now = time.time()
    entries = [
        MemoryEntry("alice", "t2", "imported plain", {}, now, now),
        MemoryEntry("alice", "t9", "imported turn", {"session": "u"}, now, now),
        MemoryEntry("carol", "c0", "carol says hello", {"session": "s"}, now, now),
    ]
    return await backend.import_entries(entries)


async def _check_imported(backend: SQLBackend, result: object) -> None:
    assert result == 3
    await _expect_gone(backend, "alice", "word2")
    assert (await backend.query("carol", "hello"))[0].key == "c0"


WRITES: dict[str, tuple[Write, Check]] = {
    "store a new last turn": (
        lambda b: b.store("alice", "t6", "turn 6 says word6", {"session": "s"}),
        _check_stored_turn,
    ),
    "store a turn again": (
        lambda b: b.store("alice", "t2", "turn 2 rewritten", {"session": "s"}),
        _check_t2_rewritten,
    ),
    "move a turn to another conversation": (
        lambda b: b.store("alice", "t2", "turn 2 moved", {"session": "u"}),
        _check_stored_turn,
    ),
    "store a plain memory over a turn": (
        lambda b: b.store("alice", "t2", "now a plain fact"),
        _check_t2_plain,
    ),
    "store_many over turns": (
        lambda b: b.store_many(
            "alice",
            [
                {"key": "t2", "value": "now a plain fact"},
                {"key": "t7", "value": "turn 7", "metadata": {"session": "s"}},
                {"key": "fact", "value": "the cat is black", "metadata": {"session": "u"}},
            ],
        ),
        _check_t2_plain,
    ),
    "delete a turn": (lambda b: b.delete("alice", "t2"), _check_t2_gone),
    "delete_many turns": (lambda b: b.delete_many("alice", ["t2", "u1"]), _check_t2_gone),
    "forget_user": (lambda b: b.forget_user("alice"), _check_forgotten),
    "purge_expired": (lambda b: b.purge_expired(), _check_purged),
    "import_entries over turns": (_import, _check_imported),
}


@pytest.mark.parametrize("write", list(WRITES))
async def test_a_write_interrupted_at_any_statement_changes_nothing(
    sql: SQLBackend, write: str
) -> None:
    if write == "purge_expired":
        await _conversation(sql, ttl=0.05)
        await asyncio.sleep(0.1)
    else:
        await _conversation(sql)
    run, check = WRITES[write]
    faults = Faults()
    sql._driver.fault_hook = faults
    before = await _snapshot(sql)
    for at in range(100):
        faults.arm(at)
        raised: BackendUnavailableError | None = None
        try:
            result = await run(sql)
        except BackendUnavailableError as error:
            raised = error
        faults.disarm()
        if raised is not None:
            assert await _snapshot(sql) == before, f"{write}: raised at statement {at}"
            assert isinstance(raised.__cause__, InjectedFault), raised
            continue
        assert faults.sent == at, f"{write}: returned although statement {at} failed"
        await _check_whole(sql)
        await check(sql, result)
        break
    else:
        pytest.fail(f"{write} never completed")
    # Every boundary was tried: the calls with a fault at statement 0 .. at-1 all raised.
    assert at >= 1


async def test_sqlite_writes_blocked_by_another_writer_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}", busy_timeout=0.05) as backend:
        await _conversation(backend, ttl=0.05)
        await asyncio.sleep(0.1)
        before = await _snapshot(backend)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            for write, (run, _) in WRITES.items():
                with pytest.raises(BackendUnavailableError, match="lock"):
                    await run(backend)
                assert await _snapshot(backend) == before, write
            other.execute("ROLLBACK")
        finally:
            other.close()
        await backend.delete("alice", "t2")
        await _check_whole(backend)
        await _expect_gone(backend, "alice", "word2")


@pytest.mark.skipif("postgresql" not in BACKEND_FACTORIES, reason="PostgreSQL is off")
async def test_postgresql_writes_behind_a_held_user_lock_change_nothing() -> None:
    import asyncpg

    async with (
        pg_schema() as schema,
        SQLBackend(PG_URL, schema=schema, auto_migrate=True, timeout=1) as backend,
    ):
        await _conversation(backend)
        await asyncio.sleep(0.1)
        before = await _snapshot(backend)
        holder = await asyncpg.connect(PG_URL.replace("+asyncpg", ""))
        try:
            lock = backend._sql.lock_user
            assert lock is not None
            locking = lock.text.replace("pg_advisory_xact_lock", "pg_advisory_lock")
            await holder.fetch(locking, "alice")
            for write, (run, _) in WRITES.items():
                if write == "store a new last turn" or write.startswith("delete"):
                    with pytest.raises(BackendUnavailableError):
                        await run(backend)
                    assert await _snapshot(backend) == before, write
        finally:
            await holder.close()
        assert await backend.delete("alice", "t2") is True
        await _check_whole(backend)
        await _expect_gone(backend, "alice", "word2")


@pytest.mark.skipif("postgresql" not in BACKEND_FACTORIES, reason="PostgreSQL is off")
async def test_a_pooled_connection_that_died_is_replaced_without_a_failed_call() -> None:
    """The server ended the connection while it sat idle in the pool (a restart does that)
    and the event loop never ran in between, so the pool could not know before the call:
    3cc52d2 failed that call with SQLSTATE 08003."""
    async with (
        pg_schema() as schema,
        SQLBackend(PG_URL, schema=schema, auto_migrate=True, pool_size=1) as backend,
    ):
        await backend.store("alice", "k", "v")
        for call in ("retrieve", "store", "delete", "store a turn"):
            (row,) = await backend._driver.fetch(SQL("SELECT pg_backend_pid()", (), {}), ())
            # Blocking on purpose: the loop must not see the connection close.
            subprocess.run(  # noqa: ASYNC221
                [sys.executable, "-c", _TERMINATE, PG_URL.replace("+asyncpg", ""), str(row[0])],
                check=True,
                timeout=30,
            )
            if call == "retrieve":
                assert await backend.retrieve("alice", "k") is not None
            elif call == "store":
                await backend.store("alice", "k2", "v2")
            elif call == "delete":
                assert await backend.delete("alice", "k2") is True
            else:
                await backend.store("alice", "t", "a turn", {"session": "s"})


_TERMINATE = """
import asyncio, sys, asyncpg
async def main():
    connection = await asyncpg.connect(sys.argv[1])
    assert await connection.fetchval("SELECT pg_terminate_backend($1)", int(sys.argv[2]))
    await connection.close()
asyncio.run(main())
"""


def test_a_server_size_limit_is_invalid_input_naming_the_limit() -> None:
    """SQLSTATE 54000 (a value past one of PostgreSQL's size limits, such as a tsvector's
    1 MB) is the caller's input, not a backend failure."""
    import asyncpg

    from asyncmem import InvalidInputError
    from asyncmem.sql.drivers import translated

    error = translated("store", asyncpg.exceptions.ProgramLimitExceededError("too long"))
    assert isinstance(error, InvalidInputError)
    assert "size limit" in str(error)
    assert "54000" in str(error)
