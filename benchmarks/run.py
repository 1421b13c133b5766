"""Side-by-side speed of asyncmem's SQL store against hand-written floors, in one process.

    python benchmarks/run.py                       # SQLite, 5,000 memories, 3 repeats
    python benchmarks/run.py --pg postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/run.py --scaling 1000,10000,100000

Implementations, all given the same workload (benchmarks/workload.py), each on a fresh
database of its own:
- floor: hand-written statements on a hand-written schema (benchmarks/floors.py): one
  aiosqlite connection (autocommit, WAL, synchronous=NORMAL, FTS5 ``bm25()``), or with
  ``--pg`` a LIFO pool of asyncpg connections (a generated ``tsvector``, GIN, ``ts_rank``);
- asyncmem: ``SQLBackend`` on SQLite (and on PostgreSQL with ``--pg``);
- langgraph: LangGraph's ``AsyncSqliteStore`` / ``AsyncPostgresStore`` as set up by
  benchmarks/concurrency.py (the ``bench`` extra). Without an embedding index its search
  does not rank by the question (it lists the namespace's newest items), and it has no key
  listing: its "list_keys" is a search that returns every item of the namespace;
- naive: a new sqlite3 connection per call in a thread, ``LIKE '%text%'`` search, on the
  floor's schema: the design asyncmem replaces.
Each number is the median over ``--repeat`` runs; ratios are to the floor of the same dialect.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import MemoryEntry, SQLBackend
from benchmarks.concurrency import median_runs, openers
from benchmarks.floors import (
    SQLITE_DELETE,
    SQLITE_RETRIEVE,
    SQLITE_UPSERT,
    AiosqliteFloor,
    floor_terms,
    sqlite_floor_file,
)
from benchmarks.harness import scratch_dir
from benchmarks.workload import Workload, make_workload

_COLUMNS = "user_id, key, value, metadata, created_at, updated_at, expires_at"


def _entry(row: Any) -> MemoryEntry:
    return MemoryEntry(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], None, row[6])


class NaiveSQLite:
    """A new connection per call, run in a thread; LIKE search. What asyncmem replaces."""

    name = "naive (sqlite3 per call, LIKE)"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def open(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def _call(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            with conn:
                return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    async def store(self, user_id: str, key: str, value: str) -> MemoryEntry:
        now = time.time()
        rows = await asyncio.to_thread(
            self._call, SQLITE_UPSERT, (user_id, key, value, "{}", now, now)
        )
        return MemoryEntry(user_id, key, value, {}, rows[0][0], rows[0][1])

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        rows = await asyncio.to_thread(self._call, SQLITE_RETRIEVE, (user_id, key, time.time()))
        return _entry(rows[0]) if rows else None

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        sql = f"SELECT {_COLUMNS} FROM memories WHERE user_id = ? AND value LIKE ? LIMIT ?"
        rows = await asyncio.to_thread(self._call, sql, (user_id, f"%{text}%", limit))
        return [_entry(row) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        sql = "SELECT key FROM memories WHERE user_id = ? ORDER BY updated_at DESC"
        return [row[0] for row in await asyncio.to_thread(self._call, sql, (user_id,))]

    async def delete(self, user_id: str, key: str) -> bool:
        sql = SQLITE_DELETE + " RETURNING id"
        return bool(await asyncio.to_thread(self._call, sql, (user_id, key)))


def _pct(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0  # µs


async def _timed(samples: list[int], call: Awaitable[Any]) -> Any:
    start = time.perf_counter_ns()
    result = await call
    samples.append(time.perf_counter_ns() - start)
    return result


async def sequential(impl: Any, work: Workload) -> dict[str, dict[str, float]]:
    user = work.user_id
    rng = random.Random(1)
    keys = [key for key, _ in work.items]
    results: dict[str, list[int]] = {
        op: [] for op in ("store", "retrieve", "query", "list_keys", "delete")
    }
    for key, value in work.items:
        await _timed(results["store"], impl.store(user, key, value))
    for key in rng.sample(keys, len(keys)):
        await _timed(results["retrieve"], impl.retrieve(user, key))
    for question in work.questions:
        await _timed(results["query"], impl.query(user, question, 10))
    for _ in range(20):
        await _timed(results["list_keys"], impl.list_keys(user))
    for key in rng.sample(keys, len(keys)):
        await _timed(results["delete"], impl.delete(user, key))
    return {
        op: {"p50": _pct(s, 0.5), "p95": _pct(s, 0.95), "p99": _pct(s, 0.99)}
        for op, s in results.items()
    }


async def concurrent(impl: Any, work: Workload, tasks: int, ops_per_task: int) -> dict[str, float]:
    user = work.user_id
    for key, value in work.items:
        await impl.store(user, key, value)
    samples: list[int] = []

    async def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(ops_per_task):
            roll = rng.random()
            key, value = rng.choice(work.items)
            if roll < 0.7:
                call: Awaitable[Any] = impl.retrieve(user, key)
            elif roll < 0.9:
                call = impl.store(user, key, value + " updated")
            else:
                call = impl.query(user, rng.choice(work.questions), 10)
            await _timed(samples, call)

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.perf_counter() - start
    return {
        "ops_per_s": len(samples) / elapsed,
        "p50": _pct(samples, 0.5),
        "p99": _pct(samples, 0.99),
    }


Opener = Callable[[], AbstractAsyncContextManager[Any]]


def _openers(names: list[str], directory: Path, url: str | None) -> dict[str, Opener]:
    """Each implementation open on a fresh, empty database of its own, as
    benchmarks/concurrency.py opens them (naive: on the floor's schema, SQLite only)."""
    found = openers([name for name in names if name != "naive"], directory, url, None)

    @asynccontextmanager
    async def naive() -> AsyncIterator[Any]:
        path = directory / f"naive-{uuid.uuid4().hex[:12]}.db"
        await asyncio.to_thread(sqlite_floor_file, path, {})
        yield NaiveSQLite(path)

    return {name: naive if name == "naive" else found[name] for name in names}


async def _runs(
    args: argparse.Namespace, directory: Path, url: str | None, names: list[str]
) -> dict[str, Any]:
    seq_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    conc_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    work = make_workload(args.size)
    for _ in range(args.repeat):
        for name, opener in _openers(names, directory, url).items():
            async with opener() as impl:
                seq_runs[name].append(await sequential(impl, work))
            async with opener() as impl:
                conc_runs[name].append(
                    await concurrent(impl, make_workload(1000), args.tasks, args.ops_per_task)
                )
    return {
        "sequential": {n: median_runs(r) for n, r in seq_runs.items()},
        "concurrent": {n: median_runs(r) for n, r in conc_runs.items()},
    }


def _matches(work: Workload, question: str) -> float:
    """Share of the memories that contain a word of ``question`` (what the query must rank)."""
    terms = set(floor_terms(question))
    hits = sum(bool(terms & set(floor_terms(value))) for _, value in work.items)
    return hits / len(work.items)


async def run_scaling(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """Query p50 at growing sizes, separately for the two kinds of question in the workload:
    mostly-rare words (few matches) and mostly-common words (a large share of the memories)."""
    out: dict[str, Any] = {}
    for size in [int(s) for s in args.scaling.split(",")]:
        work = make_workload(size, questions=200)
        kinds = {"rare": work.questions[0::2], "common": work.questions[1::2]}
        row: dict[str, Any] = {
            f"{kind} matched": statistics.median(_matches(work, q) for q in questions[:20])
            for kind, questions in kinds.items()
        }
        floor = AiosqliteFloor(directory / f"scaling-floor-{size}.db")
        await floor.open()
        await floor.load(work.user_id, work.items)
        backend = SQLBackend(f"sqlite:///{directory / f'scaling-asyncmem-{size}.db'}")
        await backend.open()
        for start in range(0, size, 1000):
            chunk = work.items[start : start + 1000]
            await backend.store_many(work.user_id, [{"key": k, "value": v} for k, v in chunk])
        impls: dict[str, Any] = {"floor": floor, "asyncmem": backend}
        for name, impl in impls.items():
            for kind, questions in kinds.items():
                p50s = []
                for _ in range(args.repeat):
                    samples: list[int] = []
                    for question in questions:
                        await _timed(samples, impl.query(work.user_id, question, 10))
                    p50s.append(_pct(samples, 0.5))
                row[f"{name} {kind}"] = statistics.median(p50s)
        await floor.aclose()
        await backend.aclose()
        out[str(size)] = row
    return out


def _table(title: str, seq: dict[str, Any], conc: dict[str, Any]) -> list[str]:
    names = list(seq)
    others = [name for name in names if name != "floor"]
    lines = [
        f"### {title}",
        "",
        "| operation | " + " | ".join([*names, *(f"{n} / floor" for n in others)]) + " |",
        "|---" * (len(names) + len(others) + 1) + "|",
    ]
    for op in seq["floor"]:
        cells = [f"{seq[name][op]['p50']:.0f} µs" for name in names]
        cells += [f"{seq[name][op]['p50'] / seq['floor'][op]['p50']:.2f}×" for name in others]
        lines.append(f"| {op} p50 | " + " | ".join(cells) + " |")
    cells = [
        f"{conc[name]['ops_per_s']:.0f} ops/s (p99 {conc[name]['p99']:.0f} µs)" for name in names
    ]
    cells += [f"{conc[name]['ops_per_s'] / conc['floor']['ops_per_s']:.2f}×" for name in others]
    lines.append("| 64 tasks, 70/20/10 | " + " | ".join(cells) + " |")
    return [*lines, ""]


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--size", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--ops-per-task", type=int, default=100)
    parser.add_argument("--pg", help="PostgreSQL URL to benchmark too")
    parser.add_argument("--scaling", default="", help="comma-separated sizes for query scaling")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--impls", default="floor,asyncmem,langgraph,naive")
    parser.add_argument("--dir", help="where SQLite scratch files go (default: tmpfs)")
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args()
    names = [name for name in args.impls.split(",") if name]
    if "floor" not in names:
        parser.error("--impls must include floor: ratios are to it")
    report: dict[str, Any] = {"args": vars(args)}
    lines = [f"size {args.size}, repeat {args.repeat} (medians), {args.tasks} tasks", ""]
    with scratch_dir(args.dir) as scratch:
        if not args.no_sqlite:
            report["sqlite"] = sq = await _runs(args, scratch, None, names)
            lines += _table("SQLite", sq["sequential"], sq["concurrent"])
        if args.scaling:
            report["scaling"] = sc = await run_scaling(args, scratch)
            lines += [
                "### query p50 by size (SQLite)",
                "",
                "| memories | questions | matched | floor | asyncmem | ratio |",
                "|---|---|---|---|---|---|",
            ]
            for size, row in sc.items():
                for kind in ("rare", "common"):
                    floor, ours = row[f"floor {kind}"], row[f"asyncmem {kind}"]
                    matched = row[f"{kind} matched"]
                    lines.append(
                        f"| {size} | {kind} words | {matched:.1%} | {floor:.0f} µs | "
                        f"{ours:.0f} µs | {ours / floor:.2f}× |"
                    )
            lines.append("")
        if args.pg:
            pg_names = [name for name in names if name != "naive"]
            report["postgresql"] = pg = await _runs(args, scratch, args.pg, pg_names)
            lines += _table("PostgreSQL", pg["sequential"], pg["concurrent"])
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
