"""A process to be killed: ``python -m tests._crash_worker`` (see ``tests/test_durability.py``).

It imports asyncmem once and then, for each ``<db path> <seed> <log path>`` line on stdin,
forks a worker that opens the store and runs the operations of :func:`operations` for that
seed, one at a time. Before each operation the worker appends ``B <index>`` to the log, after
it returned ``A <index>``, each with one ``write(2)``, so a line in the log is in the kernel
before the next operation starts and survives the worker's SIGKILL. The parent reads the
worker's pid from stdout, kills it whenever it likes, and waits for ``reaped``.

Forking from an idle, already-imported process makes a kill cycle cost milliseconds instead of
the second a fresh interpreter needs, so a test can afford dozens of them.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from dataclasses import dataclass
from typing import Any

from asyncmem import SQLBackend

USER = "crash-user"
HOT_KEY = "hot"
MAX_OPERATIONS = 400


@dataclass(frozen=True)
class Operation:
    kind: str  # "store" or "delete"
    key: str
    value: str = ""
    metadata: dict[str, Any] | None = None


def make_value(seed: int, index: int, size: int) -> str:
    """A value of ``size`` characters that names its operation and mixes scripts."""
    head = f"{seed}/{index}/"
    body = "Miso the grey cat 🐈 שלום e\u0301 "
    return (head + body * (size // len(body) + 1))[:size]


def operations(seed: int) -> list[Operation]:
    """The operations a worker runs for ``seed``: new keys, overwrites of one hot key, and
    deletes of keys stored earlier in the same run. Mostly small values, some up to 100 kB so
    that kills also land in the middle of large writes and WAL checkpoints. A third of the
    stores are conversation turns (``metadata.session``), so kills also land inside the upkeep
    of their neighbours' contexts, and some plain stores and deletes hit former turns."""
    rng = random.Random(seed)
    stored: list[str] = []
    result: list[Operation] = []
    for index in range(MAX_OPERATIONS):
        roll = rng.random()
        size = rng.randint(1, 100_000) if rng.random() < 0.05 else rng.randint(1, 2000)
        metadata: dict[str, Any] = {
            "seed": seed,
            "index": index,
            "tag": rng.choice(["α", "β", "🐈", "x"]),
        }
        if rng.random() < 0.35:
            metadata["session"] = rng.choice(["s1", "s2", 3])
        if roll < 0.1 and stored:
            key = rng.choice(stored)
            result.append(Operation("store", key, make_value(seed, index, size), metadata))
        elif roll < 0.2:
            result.append(Operation("store", HOT_KEY, make_value(seed, index, size), metadata))
        elif roll < 0.3 and stored:
            result.append(Operation("delete", stored.pop(rng.randrange(len(stored)))))
        else:
            key = f"s{seed}-k{index}"
            stored.append(key)
            result.append(Operation("store", key, make_value(seed, index, size), metadata))
    return result


async def _work(path: str, seed: int, log_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    async with SQLBackend(f"sqlite:///{path}") as backend:
        for index, op in enumerate(operations(seed)):
            os.write(log, f"B {index}\n".encode())
            if op.kind == "store":
                await backend.store(USER, op.key, op.value, op.metadata)
            else:
                await backend.delete(USER, op.key)
            os.write(log, f"A {index}\n".encode())


def main() -> None:
    for line in sys.stdin:
        path, seed, log_path = line.split()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                asyncio.run(_work(path, int(seed), log_path))
            except BaseException:
                code = 1
            os._exit(code)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"reaped {status}", flush=True)


if __name__ == "__main__":
    main()
