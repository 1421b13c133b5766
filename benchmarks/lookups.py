"""What a lone SQLite retrieve costs the caller and the event loop's thread.

    PYTHONPATH=$PWD python benchmarks/lookups.py [--calls 10000] [--rounds 3]

Three ways to answer the same retrieves, one after the other on one event loop, over 500
memories of one user on tmpfs, each way ``--calls`` times per round, in turn:

- floor: the hand-written aiosqlite store of ``floors.py`` (one trip to its thread a call);
- asyncmem: ``SQLBackend.retrieve`` as shipped (a lookup that comes alone runs on the event
  loop's thread, ``SQLiteDriver.lookup``);
- asyncmem via reader: the same store with its lookup connection taken away, so every
  retrieve takes the trip to the reader's thread (the code before the lookups).

Reported per way: p50 and p99 of a call, and the event loop thread's CPU per call
(``time.thread_time``), which is what a trip to a thread costs the other tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import SQLBackend
from asyncmem.sql.drivers import SQLiteDriver
from benchmarks.floors import AiosqliteFloor
from benchmarks.harness import loadavg, ms, pct, positive, ratio, scratch_dir, table

KEYS = 500


async def _timed(call: Callable[[str], Awaitable[object]], calls: int) -> tuple[list[int], float]:
    samples = []
    cpu = time.thread_time_ns()
    for i in range(calls):
        start = time.perf_counter_ns()
        await call(f"k{i % KEYS}")
        samples.append(time.perf_counter_ns() - start)
    return samples, (time.thread_time_ns() - cpu) / calls


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=positive, default=10_000)
    parser.add_argument("--rounds", type=positive, default=3)
    args = parser.parse_args(argv)
    print(f"loadavg at start {loadavg()}", file=sys.stderr)
    with scratch_dir() as directory:
        floor = AiosqliteFloor(directory / "floor.db")
        await floor.open()
        try:
            async with (
                SQLBackend(f"sqlite:///{directory / 'lookups.db'}") as shipped,
                SQLBackend(f"sqlite:///{directory / 'reader.db'}") as via_reader,
            ):
                driver = via_reader._driver
                assert isinstance(driver, SQLiteDriver)
                lookups, driver._loop = driver._loop, None
                assert lookups is not None
                lookups.close()
                for i in range(KEYS):
                    value = f"value {i} about the weekend"
                    await floor.store("u", f"k{i}", value)
                    await shipped.store("u", f"k{i}", value)
                    await via_reader.store("u", f"k{i}", value)
                ways: dict[str, Callable[[str], Awaitable[object]]] = {
                    "floor": lambda key: floor.retrieve("u", key),
                    "asyncmem": lambda key: shipped.retrieve("u", key),
                    "asyncmem via reader": lambda key: via_reader.retrieve("u", key),
                }
                samples: dict[str, list[int]] = {name: [] for name in ways}
                cpu: dict[str, list[float]] = {name: [] for name in ways}
                for _ in range(args.rounds):
                    for name, call in ways.items():
                        found, per_call = await _timed(call, args.calls)
                        samples[name] += found
                        cpu[name].append(per_call)
        finally:
            await floor.aclose()
    p50 = {name: pct(found, 0.5) for name, found in samples.items()}
    loop = {name: sorted(values)[len(values) // 2] for name, values in cpu.items()}
    rows = [
        [
            name,
            ms(p50[name]),
            ms(pct(samples[name], 0.99)),
            f"{loop[name] / 1000:.1f} µs",
            ratio(p50[name], p50["floor"]),
            ratio(loop[name], loop["floor"]),
        ]
        for name in ways
    ]
    print(f"### A lone retrieve, SQLite on tmpfs ({args.rounds} × {args.calls:,} calls each)\n")
    print(table(["way", "p50", "p99", "loop CPU a call", "p50 ÷ floor", "loop CPU ÷ floor"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
