"""What a lone SQLite retrieve, store or delete costs the caller and the event loop's thread.

    PYTHONPATH=$PWD python benchmarks/lone_calls.py [--calls 5000] [--rounds 3] [--chars N]

Three ways to answer the same calls, one after the other on one event loop, on tmpfs, over
500 memories of one user: each round stores ``--calls`` new memories (a ``workload.py``
sentence each, or sentences joined up to ``--chars`` characters), retrieves ``--calls``
memories, then deletes the memories it stored; each way in turn for each operation:

- floor: the hand-written aiosqlite store of ``floors.py`` (one trip to its thread a call);
- asyncmem: ``SQLBackend`` as shipped (a call that comes alone runs on the event loop's
  thread: ``SQLiteDriver.lookup`` and ``SQLiteDriver._write_on_loop``);
- asyncmem via threads: the same store with its loop connection taken away, so every call
  takes the trip to a reader's or the writer's thread (the code before the loop's calls).

Reported per operation and way: p50 and p99 of a call, and the event loop thread's CPU per
call (``time.thread_time``): a trip to a thread costs the other tasks that much, and a call
on the loop its whole statement.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import SQLBackend
from asyncmem.sql.drivers import SQLiteDriver
from benchmarks.floors import AiosqliteFloor
from benchmarks.harness import loadavg, ms, pct, positive, ratio, scratch_dir, table
from benchmarks.workload import sentence

KEYS = 500
OPERATIONS = ("store", "retrieve", "delete")


async def _timed(call: Callable[[int], Awaitable[object]], calls: int) -> tuple[list[int], float]:
    samples = []
    cpu = time.thread_time_ns()
    for i in range(calls):
        start = time.perf_counter_ns()
        await call(i)
        samples.append(time.perf_counter_ns() - start)
    return samples, (time.thread_time_ns() - cpu) / calls


def _text(rng: random.Random, chars: int | None) -> str:
    if chars is None:
        return sentence(rng)
    text = sentence(rng)
    while len(text) < chars:
        text += " " + sentence(rng)
    return text[:chars]


def _calls(impl: Any, texts: list[str]) -> dict[str, Callable[[int], Awaitable[object]]]:
    return {
        "store": lambda i: impl.store("u", f"new{i}", texts[i]),
        "retrieve": lambda i: impl.retrieve("u", f"k{i % KEYS}"),
        "delete": lambda i: impl.delete("u", f"new{i}"),
    }


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=positive, default=5_000)
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--chars", type=positive, help="each stored text this long")
    args = parser.parse_args(argv)
    print(f"loadavg at start {loadavg()}", file=sys.stderr)
    rng = random.Random(5)
    texts = [_text(rng, args.chars) for _ in range(args.calls)]
    samples: dict[str, dict[str, list[int]]] = {op: {} for op in OPERATIONS}
    cpu: dict[str, dict[str, list[float]]] = {op: {} for op in OPERATIONS}
    with scratch_dir() as directory:
        floor = AiosqliteFloor(directory / "floor.db")
        await floor.open()
        try:
            async with (
                SQLBackend(f"sqlite:///{directory / 'shipped.db'}") as shipped,
                SQLBackend(f"sqlite:///{directory / 'threads.db'}") as via_threads,
            ):
                driver = via_threads._driver
                assert isinstance(driver, SQLiteDriver)
                loop, driver._loop = driver._loop, None
                assert loop is not None
                loop.close()
                ways = {"floor": floor, "asyncmem": shipped, "asyncmem via threads": via_threads}
                for impl in ways.values():
                    for i in range(KEYS):
                        await impl.store("u", f"k{i}", f"value {i} about the weekend")
                for _ in range(args.rounds):
                    for op in OPERATIONS:
                        for name, impl in ways.items():
                            found, per_call = await _timed(_calls(impl, texts)[op], args.calls)
                            samples[op].setdefault(name, []).extend(found)
                            cpu[op].setdefault(name, []).append(per_call)
        finally:
            await floor.aclose()
    rows = []
    for op in OPERATIONS:
        p50 = {name: pct(found, 0.5) for name, found in samples[op].items()}
        loop_cpu = {name: sorted(values)[len(values) // 2] for name, values in cpu[op].items()}
        rows += [
            [
                op,
                name,
                ms(p50[name]),
                ms(pct(samples[op][name], 0.99)),
                f"{loop_cpu[name] / 1000:.1f} µs",
                ratio(p50[name], p50["floor"]),
                ratio(loop_cpu[name], loop_cpu["floor"]),
            ]
            for name in samples[op]
        ]
    stored = "a sentence" if args.chars is None else f"{args.chars:,} characters"
    print(
        f"### Lone calls, SQLite on tmpfs ({args.rounds} × {args.calls:,} calls each; "
        f"each store {stored})\n"
    )
    headers = ["operation", "way", "p50", "p99", "loop CPU a call", "p50 ÷ floor", "CPU ÷ floor"]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
