"""Concurrent calls on SQLite are answered in batches, and each caller still gets its own
result or error: one trip to the writer's thread per batch of writes and a transaction per
write, so one caller's failure fails that caller only."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from asyncmem import BackendUnavailableError, SQLBackend
from asyncmem.sql import drivers
from tests.test_write_faults import InjectedFault, _check_whole


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, int]]:
    """(transactional, number of calls) of every batch the drivers run."""
    sizes: list[tuple[bool, int]] = []
    real = drivers._run_batch

    def counting(connection: Any, bodies: Any, hook: Any, transactional: bool, *rest: Any) -> Any:
        sizes.append((transactional, len(bodies)))
        return real(connection, bodies, hook, transactional, *rest)

    monkeypatch.setattr(drivers, "_run_batch", counting)
    return sizes


async def test_one_failing_caller_in_a_batch_fails_alone(
    tmp_path: Path, batch_sizes: list[tuple[bool, int]]
) -> None:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        await backend.store("alice", "t0", "a turn before", {"session": "s"})

        async def call(i: int) -> Any:
            if i == 7:
                return await backend._atomic(
                    "store", ["alice"], lambda tx: _write_then_fail(tx, backend)
                )
            metadata = {"session": "s"} if i % 3 == 0 else None
            return await backend.store("alice", f"k{i}", f"value {i} word{i}", metadata)

        results = await asyncio.gather(*(call(i) for i in range(40)), return_exceptions=True)
        failed = [i for i, result in enumerate(results) if isinstance(result, BaseException)]
        assert failed == [7]
        assert isinstance(results[7], BackendUnavailableError)
        assert isinstance(results[7].__cause__, InjectedFault)
        for i in range(40):
            if i != 7:
                entry = await backend.retrieve("alice", f"k{i}")
                assert entry is not None
                assert entry.value == f"value {i} word{i}"
        assert await backend.retrieve("alice", "bad") is None  # its transaction rolled back
        await _check_whole(backend)
    writes = [size for transactional, size in batch_sizes if transactional]
    assert max(writes) > 1, writes  # the failing call shared a batch with others


async def _write_then_fail(transaction: Any, backend: SQLBackend) -> None:
    """Write a memory, then fail as a lost connection would."""
    upsert = backend._sql.upsert
    args = upsert.args(
        user_id="alice",
        key="bad",
        value="never stored",
        metadata="{}",
        context="",
        now=1.0,
        facets="",
        words="",
        length=2,
        ttl=None,
        session=None,
    )
    await transaction.fetch(upsert, args)
    raise InjectedFault("after its first statement")


async def test_many_concurrent_calls_share_trips(
    tmp_path: Path, batch_sizes: list[tuple[bool, int]]
) -> None:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        stored = await asyncio.gather(
            *(backend.store(f"u{i % 4}", f"k{i}", f"value {i}") for i in range(200))
        )
        assert len(stored) == 200
        found = await asyncio.gather(*(backend.retrieve(f"u{i % 4}", f"k{i}") for i in range(200)))
        assert [entry.value for entry in found if entry is not None] == [
            f"value {i}" for i in range(200)
        ]
    writes = [size for transactional, size in batch_sizes if transactional]
    reads = [size for transactional, size in batch_sizes if not transactional]
    assert sum(writes) >= 200
    assert sum(reads) >= 200
    assert len(writes) < 50, "200 concurrent stores took a trip each"
    assert len(reads) < 50, "200 concurrent retrieves took a trip each"


async def test_a_call_cancelled_before_its_batch_never_runs(tmp_path: Path) -> None:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        await backend.store("alice", "warm", "up")
        first = asyncio.ensure_future(backend.store("alice", "a", "first"))
        second = asyncio.ensure_future(backend.store("alice", "b", "second"))
        await asyncio.sleep(0)  # both queued; the first batch takes "a"
        second.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
        assert await backend.retrieve("alice", "a") is not None
        if second.cancelled():
            assert await backend.retrieve("alice", "b") is None


async def test_closing_fails_calls_still_queued(tmp_path: Path) -> None:
    backend = SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}")
    await backend.open()
    calls = [asyncio.ensure_future(backend.store("alice", f"k{i}", "v")) for i in range(50)]
    await asyncio.sleep(0)
    await backend.aclose()
    results = await asyncio.gather(*calls, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert all(type(e).__name__ == "BackendClosedError" for e in errors), errors
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as reopened:
        kept = await reopened.list_keys("alice")
    assert len(kept) + len(errors) == 50  # each call either committed or failed, never both


async def test_a_cancelled_opening_leaves_no_connection_thread(tmp_path: Path) -> None:
    """aiosqlite's connection threads are not daemons: one left open keeps the process from
    exiting (an MCP client that disconnected at once left the server hanging)."""
    import threading

    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}"):
        pass
    before = set(threading.enumerate())
    for delay in (0, 0.001, 0.003, 0.01, 0.03):
        backend = SQLBackend(f"sqlite:///{path}")
        opening = asyncio.ensure_future(backend.open())
        await asyncio.sleep(delay)
        opening.cancel()
        await asyncio.gather(opening, return_exceptions=True)
        await backend.aclose()
        for _ in range(100):
            left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
            if not left:
                break
            await asyncio.sleep(0.01)
        assert left == [], f"threads left after cancelling at {delay} s: {left}"


def test_an_mcp_server_exits_when_the_client_leaves_at_once(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'memory.db'}"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    for attempt in ("a new file", "a file at head"):
        server = subprocess.Popen(
            [sys.executable, "-m", "asyncmem", "mcp", "--backend", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.write((json.dumps(initialize) + "\n").encode())
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["id"] == 1
        server.stdin.close()
        try:
            assert server.wait(timeout=30) == 0, attempt
        finally:
            server.kill()
            server.stdout.close()
