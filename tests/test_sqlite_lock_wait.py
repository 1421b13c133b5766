"""SQLite: a write that finds another connection holding the write lock waits for it in the
writer's thread (``drivers._when_free``), not in SQLite's busy handler: short capped sleeps,
so it goes through at the first try after the lock is free, and after ``busy_timeout`` it
fails as SQLite's handler would, having changed nothing.

The driver's clock and sleep are replaced by a fake one that records each sleep and
advances by it, so nothing here depends on how long anything takes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncmem import BackendUnavailableError, SQLBackend
from asyncmem.sql import drivers


class FakeClock:
    """``time`` for the driver: ``monotonic`` advances only by what ``sleep`` was asked for;
    ``on_sleep(n)`` runs at the ``n``-th sleep (from 1)."""

    def __init__(self, on_sleep: Callable[[int], None] = lambda n: None) -> None:
        self.now = time.monotonic()
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep
        self.thread: threading.Thread | None = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.thread = threading.current_thread()
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(len(self.sleeps))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(drivers, "time", fake)
    return fake


def _holder(path: Path) -> sqlite3.Connection:
    """Another connection to the file, holding its write lock (usable from any thread)."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


WRITES: dict[str, Callable[[SQLBackend], Any]] = {
    # A plain store alone in its batch is one statement in autocommit.
    "lone statement": lambda backend: backend.store("alice", "k", "v"),
    # A conversation turn is a transaction: BEGIN IMMEDIATE ... COMMIT.
    "transaction": lambda backend: backend.store("alice", "k", "v", {"session": "s"}),
}


@pytest.mark.parametrize("write", WRITES)
async def test_a_write_goes_through_at_the_first_try_after_the_lock_is_released(
    tmp_path: Path, clock: FakeClock, write: str
) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await backend.store("bob", "warm", "up")
        other = _holder(path)

        def release(n: int) -> None:
            if n == 3:
                other.execute("ROLLBACK")

        clock.on_sleep = release
        try:
            entry = await WRITES[write](backend)
        finally:
            other.close()
        # Three refused tries, each followed by a sleep; the fourth, the first after the
        # release, took the lock (SQLite's handler would have slept in SQLite instead).
        assert len(clock.sleeps) == 3
        assert clock.thread is not None
        assert clock.thread is not threading.current_thread()  # in the writer's thread
        assert all(
            0 < sleep <= drivers._LOCK_RETRY_FIRST * 2**n for n, sleep in enumerate(clock.sleeps)
        )
        assert entry.value == "v"
        found = await backend.retrieve("alice", "k")
        assert found is not None
        assert found.value == "v"


@pytest.mark.parametrize("write", WRITES)
async def test_a_write_blocked_past_busy_timeout_fails_after_capped_sleeps(
    tmp_path: Path, clock: FakeClock, write: str
) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}", busy_timeout=1.0) as backend:
        await backend.store("bob", "warm", "up")
        other = _holder(path)
        try:
            with pytest.raises(BackendUnavailableError, match="lock"):
                await WRITES[write](backend)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await backend.retrieve("alice", "k") is None
        # It waited busy_timeout, no more, and never slept longer than the cap: tries at
        # least every _LOCK_RETRY_MOST, never more often than every half of it once there.
        assert sum(clock.sleeps) == pytest.approx(1.0)
        assert max(clock.sleeps) <= drivers._LOCK_RETRY_MOST
        assert len(clock.sleeps) <= 1.0 / (drivers._LOCK_RETRY_MOST / 2) + 4
        # The store works once the lock is free.
        await backend.store("alice", "k", "v")
        assert (await backend.retrieve("alice", "k")) is not None
