"""Batches against single calls, and what erasing a user costs, on asyncmem's SQL store.

    python benchmarks/batches.py                     # SQLite, 1,000 items, 5 repeats
    python benchmarks/batches.py --items 1000 --repeat 5 --pg postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/batches.py --forget-sizes 2000,20000,100000 --dir /dev/shm

- store: ``--items`` awaited ``store`` calls, one after another, into a fresh store;
- store_many: one ``store_many`` call with the same items into another fresh store;
- delete vs delete_many likewise (the items just stored);
- forget_user: erase one user of 10 memories from a store of N other memories. On SQLite this
  includes the FTS5 ``optimize`` that rewrites the index so no word of the user is left in it.
Each number is the median over ``--repeat`` runs; every run uses a new database, warmed up
with one write of each kind first.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import SQLBackend

WORDS = "garden piano river lantern orchard violin harbour meadow pepper kettle".split()


def items(count: int, tag: str = "") -> list[dict[str, Any]]:
    return [
        {
            "key": f"{tag}k{i}",
            "value": f"memory {i}: {WORDS[i % 10]} {WORDS[(i * 7) % 10]} {WORDS[(i * 3) % 10]}",
            "metadata": {"i": i, "kind": "fact"},
        }
        for i in range(count)
    ]


@asynccontextmanager
async def fresh(pg: str | None, directory: str | None = None) -> AsyncIterator[SQLBackend]:
    if pg is None:
        with tempfile.TemporaryDirectory(dir=directory) as scratch:
            async with SQLBackend(f"sqlite:///{Path(scratch) / 'memory.db'}") as backend:
                yield backend
        return
    import asyncpg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        async with SQLBackend(pg, schema=schema, auto_migrate=True) as backend:
            yield backend
    finally:
        connection = await asyncpg.connect(pg.replace("+asyncpg", ""))
        try:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()


async def warm_up(backend: SQLBackend) -> None:
    """First writes to a new database pay for growing files and preparing statements."""
    await backend.store("warm-up", "single", "warm up the store")
    await backend.store_many("warm-up", [{"key": "batch", "value": "warm up the batch"}])
    await backend.delete("warm-up", "single")
    await backend.delete_many("warm-up", ["batch"])


async def one_run(count: int, pg: str | None, directory: str | None) -> dict[str, float]:
    batch = items(count)
    result: dict[str, float] = {}
    async with fresh(pg, directory) as backend:
        await warm_up(backend)
        started = time.perf_counter()
        for item in batch:
            await backend.store("bench", item["key"], item["value"], item["metadata"])
        result["store"] = time.perf_counter() - started
        started = time.perf_counter()
        for item in batch:
            await backend.delete("bench", item["key"])
        result["delete"] = time.perf_counter() - started
    async with fresh(pg, directory) as backend:
        await warm_up(backend)
        started = time.perf_counter()
        stored = await backend.store_many("bench", batch)
        result["store_many"] = time.perf_counter() - started
        assert len(stored) == count
        started = time.perf_counter()
        deleted = await backend.delete_many("bench", [item["key"] for item in batch])
        result["delete_many"] = time.perf_counter() - started
        assert deleted == count
    return result


async def forget_cost(size: int, pg: str | None, directory: str | None) -> float:
    async with fresh(pg, directory) as backend:
        for start in range(0, size, 5000):
            chunk = items(min(5000, size - start), tag=f"c{start}-")
            await backend.store_many("others", chunk)
        await backend.store_many("leaving", items(10, tag="x"))
        started = time.perf_counter()
        assert await backend.forget_user("leaving") == 10
        return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pg", help="a PostgreSQL URL: measure there too")
    parser.add_argument("--dir", help="where the SQLite files go (e.g. /dev/shm for tmpfs)")
    parser.add_argument("--forget-sizes", default="2000,20000", help="comma-separated sizes")
    args = parser.parse_args()
    for label, pg in [("SQLite", None), *([("PostgreSQL", args.pg)] if args.pg else [])]:
        runs = [await one_run(args.items, pg, args.dir) for _ in range(args.repeat)]
        median = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        print(f"### {label}: {args.items} items, median of {args.repeat} runs\n")
        print("| operation | total | per item |\n|---|---|---|")
        for name, seconds in median.items():
            print(f"| {name} | {seconds * 1000:.1f} ms | {seconds / args.items * 1e6:.0f} µs |")
        print(
            f"\nstore_many is {median['store'] / median['store_many']:.1f}× faster than "
            f"awaited store calls; delete_many {median['delete'] / median['delete_many']:.1f}× "
            "faster than awaited deletes.\n"
        )
        sizes = [int(s) for s in args.forget_sizes.split(",") if s]
        if sizes:
            print("| memories of other users | forget_user (10 memories) |\n|---|---|")
            for size in sizes:
                seconds = statistics.median(
                    [await forget_cost(size, pg, args.dir) for _ in range(3)]
                )
                print(f"| {size:,} | {seconds * 1000:.1f} ms |")
            print()


if __name__ == "__main__":
    asyncio.run(main())
