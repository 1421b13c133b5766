"""A write that returned survives the process being killed at any moment (SQLite, SIGKILL).

A worker process (forked from a helper started with ``sys.executable``, see
``tests/_crash_worker.py``) stores, overwrites and deletes memories in one SQLite file and logs
each operation before it starts and after it returned. The test kills it with SIGKILL at a
random moment, then checks the file: ``PRAGMA integrity_check`` and the FTS5 index's own
integrity check pass, and the memories are exactly what the acknowledged operations left, plus
at most the one operation that was in flight. The same file is reused across kills, so each
cycle also recovers from the previous crash.

``ASYNCMEM_TEST_KILLS`` sets the number of kills (default 40).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncmem import SQLBackend
from asyncmem.sql.terms import neighbour_contexts
from tests._crash_worker import HOT_KEY, USER, Operation, operations
from tests.search_index import sqlite_problems

ROOT = Path(__file__).resolve().parent.parent
KILLS = int(os.environ.get("ASYNCMEM_TEST_KILLS", "40"))

State = dict[str, tuple[str, dict[str, Any]]]


class Zygote:
    """The helper process that forks one worker per kill cycle."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests._crash_worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self._buffer = b""

    def readline(self, timeout: float = 30.0) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.process.stdout], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("the crash worker did not answer in time")
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                raise EOFError("the crash worker exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def start(self, db: Path, seed: int, log: Path) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{db} {seed} {log}\n".encode())
        kind, pid = self.readline().split()
        assert kind == "pid"
        return int(pid)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    helper = Zygote()
    try:
        yield helper
    finally:
        helper.close()


def _acknowledged(log: Path) -> tuple[list[int], int | None]:
    """Indices of operations that returned, and the one that began without returning."""
    begun: int | None = None
    done: list[int] = []
    text = log.read_text() if log.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        mark, index = line.split()
        if mark == "B":
            begun = int(index)
        else:
            assert int(index) == begun
            done.append(begun)
            begun = None
    return done, begun


def _apply(state: State, op: Operation) -> State:
    after = dict(state)
    if op.kind == "store":
        after[op.key] = (op.value, dict(op.metadata or {}))
    else:
        after.pop(op.key, None)
    return after


def _check_contexts(raw: sqlite3.Connection) -> None:
    """Every turn's context is what a from-scratch recomputation gives: no kill left a write
    half applied (a turn gone or changed while its neighbours still hold its old words)."""
    conversations: dict[str, list[tuple[str, str, str]]] = {}
    found: dict[str, str] = {}
    for key, value, session, context in raw.execute(
        "SELECT key, value, session, context FROM memories WHERE user_id = ? ORDER BY id", (USER,)
    ):
        found[key] = context
        if session is not None:
            conversations.setdefault(session, []).append((key, value, context))
    expected = dict.fromkeys(found, "")
    for turns in conversations.values():
        contexts = neighbour_contexts([value for _, value, _ in turns])
        expected.update(
            (key, context) for (key, _, _), context in zip(turns, contexts, strict=True)
        )
    half_applied = sorted(key for key in found if found[key] != expected[key])
    assert half_applied == [], f"contexts left half applied: {half_applied}"


def _read_file(db: Path) -> State:
    """The memories in ``db``, read with the sqlite3 module after both integrity checks."""
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert sqlite_problems(raw) == []
        duplicates = raw.execute(
            "SELECT user_id, key FROM memories GROUP BY user_id, key HAVING COUNT(*) > 1"
        ).fetchall()
        assert duplicates == []
        _check_contexts(raw)
        rows = raw.execute(
            "SELECT key, value, metadata FROM memories WHERE user_id = ?", (USER,)
        ).fetchall()
    finally:
        raw.close()
    return {key: (value, json.loads(metadata)) for key, value, metadata in rows}


def _kill_at_random(pid: int, log: Path, rng: random.Random) -> None:
    """SIGKILL ``pid`` after a random number of acknowledged operations and a random delay."""
    wanted = rng.choice([0, 0, 1, 2, *range(3, 30)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, _ = _acknowledged(log)
        if len(done) >= wanted:
            break
        time.sleep(0.0005)
    time.sleep(rng.uniform(0, 0.004))
    with contextlib.suppress(ProcessLookupError):  # it may have finished every operation
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_acknowledged_writes_survive_sigkill(tmp_path: Path, zygote: Zygote) -> None:
    db = tmp_path / "memory.db"

    async def create() -> None:
        async with SQLBackend(f"sqlite:///{db}"):
            pass

    asyncio.run(create())
    rng = random.Random(int(os.environ.get("ASYNCMEM_TEST_SEED", "0")) or None)
    state: State = {}
    killed = acknowledged = in_flight_landed = 0
    for cycle in range(KILLS):
        seed = rng.randrange(1, 2**31)
        log = tmp_path / f"cycle-{cycle}.log"
        pid = zygote.start(db, seed, log)
        _kill_at_random(pid, log, rng)
        reaped, status = zygote.readline().split()
        assert reaped == "reaped"
        killed += os.WIFSIGNALED(int(status)) and os.WTERMSIG(int(status)) == signal.SIGKILL
        ops = operations(seed)
        done, begun = _acknowledged(log)
        for index in done:
            state = _apply(state, ops[index])
        acknowledged += len(done)
        found = _read_file(db)
        if begun is not None and found != state:
            state = _apply(state, ops[begun])
            in_flight_landed += 1
        assert found.keys() == state.keys(), f"seed {seed}: keys differ after the kill"
        assert found == state, f"seed {seed}: a value or its metadata differs after the kill"

    async def reopen() -> None:
        async with SQLBackend(f"sqlite:///{db}") as backend:
            assert sorted(await backend.list_keys(USER)) == sorted(state)
            for key, (value, metadata) in state.items():
                entry = await backend.retrieve(USER, key)
                assert entry is not None
                assert (entry.value, dict(entry.metadata)) == (value, metadata)
            if HOT_KEY in state:
                seed_word = state[HOT_KEY][0].split("/", 1)[0]
                hits = await backend.query(USER, f"grey cat {seed_word}", limit=1000)
                assert [hit.key for hit in hits].count(HOT_KEY) == 1

    asyncio.run(reopen())
    assert killed >= KILLS * 0.9, "most workers must die by SIGKILL, not finish"
    assert acknowledged > KILLS
    print(
        f"\nkills survived: {killed}, acknowledged operations checked: {acknowledged}, "
        f"in-flight operations that landed: {in_flight_landed}, memories: {len(state)}"
    )
