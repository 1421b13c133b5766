"""Side-by-side speed of asyncmem's SQL store against hand-written floors, in one process.

    python benchmarks/run.py                       # SQLite, 5,000 memories, 3 repeats
    python benchmarks/run.py --pg postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/run.py --scaling 1000,10000,100000

Implementations, all given the same workload (benchmarks/workload.py):
- floor: one long-lived aiosqlite connection (autocommit, WAL, synchronous=NORMAL), one
  statement per call, the same schema, FTS5 table and query expression as asyncmem;
- asyncmem: ``SQLBackend`` on SQLite (and on PostgreSQL with ``--pg``);
- naive: a new sqlite3 connection per call in a thread, ``LIKE '%text%'`` search: the design
  asyncmem replaces;
- asyncpg floor (with ``--pg``): one asyncpg connection (a pool for the concurrent mix).
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
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiosqlite

from asyncmem import MemoryEntry, SQLBackend
from asyncmem.sql.search import fts5_expression, query_terms, tsquery_expression
from benchmarks.workload import Workload, make_workload

COLUMNS = "user_id, key, value, metadata, created_at, updated_at"
SQLITE_UPSERT = (
    "INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, key) DO UPDATE SET value = excluded.value, "
    "metadata = excluded.metadata, updated_at = excluded.updated_at "
    "RETURNING created_at, updated_at"
)
SQLITE_QUERY = (
    f"SELECT {', '.join('m.' + c.strip() for c in COLUMNS.split(','))}, "
    "-bm25(memories_fts) AS score FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
    "WHERE memories_fts MATCH ? AND m.user_id = ? ORDER BY bm25(memories_fts) LIMIT ?"
)


def _entry(row: Any, score: float | None = None) -> MemoryEntry:
    return MemoryEntry(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], score)


class AiosqliteFloor:
    name = "floor (aiosqlite)"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def open(self) -> None:
        self.conn = await aiosqlite.connect(self.path, isolation_level=None)
        await self.conn.execute("PRAGMA journal_mode = WAL")
        await self.conn.execute("PRAGMA synchronous = NORMAL")
        await self.conn.execute("PRAGMA busy_timeout = 5000")

    async def aclose(self) -> None:
        await self.conn.close()

    async def store(self, user_id: str, key: str, value: str) -> MemoryEntry:
        now = time.time()
        rows = await self.conn.execute_fetchall(
            SQLITE_UPSERT, (user_id, key, value, "{}", now, now)
        )
        created, updated = next(iter(rows))
        return MemoryEntry(user_id, key, value, {}, created, updated)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        rows = list(
            await self.conn.execute_fetchall(
                f"SELECT {COLUMNS} FROM memories WHERE user_id = ? AND key = ?", (user_id, key)
            )
        )
        return _entry(rows[0]) if rows else None

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        terms = query_terms(text)
        if not terms:
            return []
        rows = await self.conn.execute_fetchall(
            SQLITE_QUERY, (fts5_expression(terms), user_id, limit)
        )
        return [_entry(row, row[6]) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        rows = await self.conn.execute_fetchall(
            "SELECT key FROM memories WHERE user_id = ? ORDER BY updated_at DESC, id DESC",
            (user_id,),
        )
        return [row[0] for row in rows]

    async def delete(self, user_id: str, key: str) -> bool:
        cursor = await self.conn.execute(
            "DELETE FROM memories WHERE user_id = ? AND key = ?", (user_id, key)
        )
        return cursor.rowcount > 0


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
        sql = f"SELECT {COLUMNS} FROM memories WHERE user_id = ? AND key = ?"
        rows = await asyncio.to_thread(self._call, sql, (user_id, key))
        return _entry(rows[0]) if rows else None

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        sql = f"SELECT {COLUMNS} FROM memories WHERE user_id = ? AND value LIKE ? LIMIT ?"
        rows = await asyncio.to_thread(self._call, sql, (user_id, f"%{text}%", limit))
        return [_entry(row) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        sql = "SELECT key FROM memories WHERE user_id = ? ORDER BY updated_at DESC"
        return [row[0] for row in await asyncio.to_thread(self._call, sql, (user_id,))]

    async def delete(self, user_id: str, key: str) -> bool:
        sql = "DELETE FROM memories WHERE user_id = ? AND key = ? RETURNING id"
        return bool(await asyncio.to_thread(self._call, sql, (user_id, key)))


class AsyncpgFloor:
    name = "floor (asyncpg)"

    def __init__(self, url: str, schema: str) -> None:
        self.url = url.replace("+asyncpg", "")
        self.schema = schema

    async def open(self) -> None:
        import asyncpg

        settings = {"search_path": self.schema}
        self.conn = await asyncpg.connect(self.url, server_settings=settings)
        self.pool = await asyncpg.create_pool(
            self.url, min_size=5, max_size=15, server_settings=settings
        )

    async def aclose(self) -> None:
        await self.conn.close()
        await self.pool.close()

    async def store(self, user_id: str, key: str, value: str) -> MemoryEntry:
        row = await self.conn.fetchrow(
            "INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at) "
            "VALUES ($1, $2, $3, '{}'::jsonb, extract(epoch from statement_timestamp()), "
            "extract(epoch from statement_timestamp())) ON CONFLICT (user_id, key) DO UPDATE "
            "SET value = excluded.value, metadata = excluded.metadata, "
            "updated_at = extract(epoch from clock_timestamp()) RETURNING created_at, updated_at",
            user_id,
            key,
            value,
        )
        return MemoryEntry(user_id, key, value, {}, row[0], row[1])

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        row = await self.conn.fetchrow(
            f"SELECT {COLUMNS} FROM memories WHERE user_id = $1 AND key = $2", user_id, key
        )
        return None if row is None else _entry(row)

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        terms = query_terms(text)
        if not terms:
            return []
        rows = await self.conn.fetch(
            f"SELECT {COLUMNS}, ts_rank_cd(search_vector, q) AS score FROM memories, "
            "to_tsquery('english'::regconfig, $1) q WHERE search_vector @@ q AND user_id = $2 "
            "ORDER BY score DESC, id LIMIT $3",
            tsquery_expression(terms),
            user_id,
            limit,
        )
        return [_entry(row, row[6]) for row in rows]

    async def list_keys(self, user_id: str) -> list[str]:
        rows = await self.conn.fetch(
            "SELECT key FROM memories WHERE user_id = $1 ORDER BY updated_at DESC, id DESC", user_id
        )
        return [row[0] for row in rows]

    async def delete(self, user_id: str, key: str) -> bool:
        status = await self.conn.execute(
            "DELETE FROM memories WHERE user_id = $1 AND key = $2", user_id, key
        )
        return status != "DELETE 0"


class AsyncmemImpl:
    def __init__(self, backend: SQLBackend) -> None:
        self.backend = backend
        self.name = f"asyncmem ({backend.dialect})"

    async def open(self) -> None:
        await self.backend.open()

    async def aclose(self) -> None:
        await self.backend.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


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


def bulk_load(path: Path, work: Workload) -> None:
    conn = sqlite3.connect(path)
    with conn:
        now = time.time()
        conn.executemany(
            "INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at) "
            "VALUES (?, ?, ?, '{}', ?, ?)",
            [(work.user_id, key, value, now, now) for key, value in work.items],
        )
    conn.close()


async def _fresh_sqlite(directory: Path) -> Path:
    path = directory / f"{uuid.uuid4().hex}.db"
    async with SQLBackend(f"sqlite:///{path}"):
        pass
    return path


def _median_nested(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    merged: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            merged[key] = _median_nested([run[key] for run in runs])
        else:
            merged[key] = statistics.median(run[key] for run in runs)
    return merged


async def run_sqlite(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    work = make_workload(args.size)
    makers: dict[str, Callable[[Path], Any]] = {
        "floor": AiosqliteFloor,
        "asyncmem": lambda p: AsyncmemImpl(SQLBackend(f"sqlite:///{p}")),
        "naive": NaiveSQLite,
    }
    seq_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in makers}
    conc_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in makers}
    for _ in range(args.repeat):
        for name, make in makers.items():
            impl = make(await _fresh_sqlite(directory))
            await impl.open()
            seq_runs[name].append(await sequential(impl, work))
            await impl.aclose()
            impl = make(await _fresh_sqlite(directory))
            await impl.open()
            conc_runs[name].append(
                await concurrent(impl, make_workload(1000), args.tasks, args.ops_per_task)
            )
            await impl.aclose()
    return {
        "sequential": {n: _median_nested(r) for n, r in seq_runs.items()},
        "concurrent": {n: _median_nested(r) for n, r in conc_runs.items()},
    }


def _matches(work: Workload, question: str) -> float:
    """Share of the memories that contain a word of ``question`` (what the query must rank)."""
    terms = set(query_terms(question))
    hits = sum(bool(terms & set(query_terms(value))) for _, value in work.items)
    return hits / len(work.items)


async def run_scaling(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """Query p50 at growing sizes, separately for the two kinds of question in the workload:
    mostly-rare words (few matches) and mostly-common words (a large share of the memories)."""
    out: dict[str, Any] = {}
    for size in [int(s) for s in args.scaling.split(",")]:
        work = make_workload(size, questions=200)
        kinds = {"rare": work.questions[0::2], "common": work.questions[1::2]}
        path = await _fresh_sqlite(directory)
        bulk_load(path, work)
        row: dict[str, Any] = {
            f"{kind} matched": statistics.median(_matches(work, q) for q in questions[:20])
            for kind, questions in kinds.items()
        }
        for impl in (AiosqliteFloor(path), AsyncmemImpl(SQLBackend(f"sqlite:///{path}"))):
            await impl.open()
            for kind, questions in kinds.items():
                p50s = []
                for _ in range(args.repeat):
                    samples: list[int] = []
                    for question in questions:
                        await _timed(samples, impl.query(work.user_id, question, 10))
                    p50s.append(_pct(samples, 0.5))
                row[f"{impl.name} {kind}"] = statistics.median(p50s)
            await impl.aclose()
        out[str(size)] = row
    return out


async def run_pg(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    work = make_workload(args.size)
    admin = await asyncpg.connect(args.pg.replace("+asyncpg", ""))
    seq_runs: dict[str, list[dict[str, Any]]] = {}
    conc_runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for _ in range(args.repeat):
            for name in ("floor", "asyncmem"):
                for phase, runs in (("seq", seq_runs), ("conc", conc_runs)):
                    schema = f"bench_{uuid.uuid4().hex[:10]}"
                    backend = SQLBackend(args.pg, schema=schema, auto_migrate=True)
                    await backend.open()
                    impl: Any = AsyncmemImpl(backend)
                    if name == "floor":
                        await backend.aclose()
                        impl = AsyncpgFloor(args.pg, schema)
                        await impl.open()
                    if phase == "seq":
                        result = await sequential(impl, work)
                    else:
                        result = await concurrent(
                            _PoolView(impl) if name == "floor" else impl,
                            make_workload(1000),
                            args.tasks,
                            args.ops_per_task,
                        )
                    runs.setdefault(name, []).append(result)
                    await impl.aclose()
                    await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        await admin.close()
    return {
        "sequential": {n: _median_nested(r) for n, r in seq_runs.items()},
        "concurrent": {n: _median_nested(r) for n, r in conc_runs.items()},
    }


class _PoolView:
    """The asyncpg floor through its pool, for concurrent tasks."""

    def __init__(self, floor: AsyncpgFloor) -> None:
        self.floor = floor

    def __getattr__(self, name: str) -> Any:
        method = getattr(AsyncpgFloor, name)

        async def call(*args: Any) -> Any:
            async with self.floor.pool.acquire() as conn:
                view = AsyncpgFloor.__new__(AsyncpgFloor)
                view.conn = conn
                return await method(view, *args)

        return call


def _table(title: str, seq: dict[str, Any], conc: dict[str, Any], floor: str) -> list[str]:
    lines = [f"### {title}", "", "| operation | " + " | ".join(seq) + " | asyncmem / floor |"]
    lines.append("|---" * (len(seq) + 2) + "|")
    for op in seq[floor]:
        cells = [f"{seq[name][op]['p50']:.0f} µs" for name in seq]
        ratio = seq["asyncmem"][op]["p50"] / seq[floor][op]["p50"]
        lines.append(f"| {op} p50 | " + " | ".join(cells) + f" | {ratio:.2f}× |")
    cells = [
        f"{conc[name]['ops_per_s']:.0f} ops/s (p99 {conc[name]['p99']:.0f} µs)" for name in conc
    ]
    ratio = conc["asyncmem"]["ops_per_s"] / conc[floor]["ops_per_s"]
    lines.append("| 64 tasks, 70/20/10 | " + " | ".join(cells) + f" | {ratio:.2f}× |")
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
    parser.add_argument("--json", help="write the raw numbers here")
    args = parser.parse_args()
    report: dict[str, Any] = {"args": vars(args)}
    lines = [f"size {args.size}, repeat {args.repeat} (medians), {args.tasks} tasks", ""]
    with tempfile.TemporaryDirectory() as scratch:
        if not args.no_sqlite:
            report["sqlite"] = sq = await run_sqlite(args, Path(scratch))
            lines += _table("SQLite", sq["sequential"], sq["concurrent"], "floor")
        if args.scaling:
            report["scaling"] = sc = await run_scaling(args, Path(scratch))
            lines += [
                "### query p50 by size (SQLite)",
                "",
                "| memories | questions | matched | floor | asyncmem | ratio |",
                "|---|---|---|---|---|---|",
            ]
            for size, row in sc.items():
                for kind in ("rare", "common"):
                    floor = row[f"floor (aiosqlite) {kind}"]
                    ours = row[f"asyncmem (sqlite) {kind}"]
                    matched = row[f"{kind} matched"]
                    lines.append(
                        f"| {size} | {kind} words | {matched:.1%} | {floor:.0f} µs | "
                        f"{ours:.0f} µs | {ours / floor:.2f}× |"
                    )
            lines.append("")
    if args.pg:
        report["postgresql"] = pg = await run_pg(args)
        lines += _table("PostgreSQL", pg["sequential"], pg["concurrent"], "floor")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
