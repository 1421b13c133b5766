"""Issue 17's probes: asyncmem under many tasks, against hand-written floors and LangGraph.

    PYTHONPATH=$PWD python benchmarks/concurrency.py                     # SQLite parts
    PYTHONPATH=$PWD python benchmarks/concurrency.py --parts mp --seconds 60
    PYTHONPATH=$PWD python benchmarks/concurrency.py --parts tasks,seq,turn \\
        --url postgresql://postgres@127.0.0.1:5432/test

Parts (``--parts``), SQLite on tmpfs (``/dev/shm``) unless ``--url`` names a PostgreSQL server:

- tasks: ``--tasks`` (64) tasks × ``--ops`` (100) calls each, 70% retrieve / 20% store /
  10% query, over ``--preload`` (5,000) memories of ``--users`` (10) users, in one process:
  ops/s and p50/p95/p99 per operation for each implementation, ratios to the floor.
- seq: sequential p50 of store, retrieve, query and delete (``--seq-size`` of each, query
  200), the implementations called in turn on every operation, so noise hits them alike.
- turn: asyncmem's store of a conversation turn (metadata with ``session``, ``speaker``,
  ``date``) against a plain store of the same text, interleaved, p50 of each.
- mp: ``--procs`` (16) processes × ``--proc-tasks`` (8) tasks on one SQLite file for
  ``--seconds`` (60), the same mix: p50/p99 overall and per operation, max, errors, and
  for asyncmem how long a trip of its write batches took in the writer's thread, waits for
  the write lock included (SQLite only; ``--mp-impls asyncmem,floor`` runs the floor's
  processes too).

``--mix`` sets the shares of retrieve, store and query (default 70/20/10; ``80/20/0`` leaves
the query out, for a comparison with LangGraph on the operations it does alike).

The mix's stores write a key's text with " updated" added: a key's first store in a run changes
its text and later ones write the same text again. ``--store-text fresh`` makes every store
write new text (a word of its own), so every store changes the index.

Implementations (each on its own database, preloaded alike):
- floor: hand-written statements on a hand-written schema of the floor's own
  (benchmarks/floors.py): SQLite, one aiosqlite connection in autocommit, WAL,
  ``synchronous=NORMAL``, FTS5 ``bm25()``; PostgreSQL, a LIFO pool of asyncpg connections of
  the store's pool size, a generated ``tsvector`` with a GIN index, ``ts_rank``; no
  validation, history or re-ranking;
- asyncmem: ``SQLBackend``;
- langgraph: LangGraph's ``AsyncSqliteStore`` (WAL and ``synchronous=NORMAL`` set on its
  connection, as the others have) or ``AsyncPostgresStore`` (a psycopg pool of the same size,
  in a database of its own). Without an embedding index its ``search`` does not rank by the
  question: it lists the namespace's newest items, so its "query" is a cheaper operation.
  Needs the ``bench`` extra: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import SQLBackend
from benchmarks.floors import AiosqliteFloor, PgFloor, sqlite_floor_file
from benchmarks.harness import (
    asyncpg_dsn,
    loadavg,
    ms,
    need,
    pct,
    pg_database,
    pg_schema,
    ratio,
    scratch_dir,
    table,
)
from benchmarks.workload import make_workload, sentence

OPS = ("retrieve", "store", "query")
SEQ_OPS = ("store", "retrieve", "query", "delete")
POOL_SIZE = 10
"""The store's default PostgreSQL pool size; the floor and LangGraph get the same."""


# --- data ------------------------------------------------------------------------------------


class Data:
    """``users`` users with ``per_user`` memories each, and questions, all deterministic."""

    def __init__(
        self,
        users: int,
        per_user: int,
        seed: int = 7,
        *,
        fresh: bool = False,
        shares: tuple[float, float, float] = (0.7, 0.2, 0.1),
    ) -> None:
        rng = random.Random(seed)
        self.fresh = fresh
        """Whether the mix's stores write new text every time (``--store-text fresh``)."""
        self.shares = shares
        """The mix's shares of retrieve, store and query (``--mix``), adding up to 1."""
        self.users = [f"user-{u:02d}" for u in range(users)]
        self.items = {
            user: [(f"memory-{i:05d}", sentence(rng)) for i in range(per_user)]
            for user in self.users
        }
        self.questions = make_workload(0, questions=200, seed=seed).questions

    def pick(self, rng: random.Random) -> tuple[str, str, str]:
        user = rng.choice(self.users)
        key, value = rng.choice(self.items[user])
        return user, key, value


def _mix_data(args: argparse.Namespace) -> Data:
    """The preloaded memories of the tasks and mp parts, and how their mix stores."""
    return Data(
        args.users,
        args.preload // args.users,
        fresh=args.store_text == "fresh",
        shares=args.shares,
    )


def parse_mix(text: str) -> tuple[float, float, float]:
    """``--mix``: percentages of retrieve, store and query, such as ``70/20/10``."""
    wanted = f"--mix wants three percentages adding up to 100: {text}"
    try:
        parts = [float(part) for part in text.split("/")]
    except ValueError:
        raise ValueError(wanted) from None
    if len(parts) != 3 or any(part < 0 for part in parts) or abs(sum(parts) - 100) > 1e-9:
        raise ValueError(wanted)
    retrieve, store, query = (part / 100 for part in parts)
    return retrieve, store, query


# --- implementations -------------------------------------------------------------------------


class Asyncmem:
    name = "asyncmem"

    def __init__(self, backend: SQLBackend) -> None:
        self.backend = backend

    async def store(self, user: str, key: str, value: str) -> Any:
        return await self.backend.store(user, key, value)

    async def retrieve(self, user: str, key: str) -> Any:
        return await self.backend.retrieve(user, key)

    async def query(self, user: str, text: str, limit: int = 10) -> Any:
        return await self.backend.query(user, text, limit)

    async def list_keys(self, user: str) -> Any:
        return await self.backend.list_keys(user)

    async def delete(self, user: str, key: str) -> Any:
        return await self.backend.delete(user, key)


class LangGraphOps:
    """LangGraph's store: a user is a namespace, a memory an item ``{"value": text}``."""

    name = "langgraph"

    def __init__(self, store: Any) -> None:
        self._lg = store

    async def store(self, user: str, key: str, value: str) -> Any:
        return await self._lg.aput((user,), key, {"value": value})

    async def retrieve(self, user: str, key: str) -> Any:
        return await self._lg.aget((user,), key)

    async def query(self, user: str, text: str, limit: int = 10) -> Any:
        return await self._lg.asearch((user,), query=text, limit=limit)

    async def list_keys(self, user: str) -> Any:
        """LangGraph has no key listing: the namespace's items, newest first, keys kept."""
        items = await self._lg.asearch((user,), limit=100_000)
        return [item.key for item in items]

    async def delete(self, user: str, key: str) -> Any:
        return await self._lg.adelete((user,), key)


Opener = Callable[[], AbstractAsyncContextManager[Any]]


async def _preload_store(backend: SQLBackend, data: Data | None) -> None:
    if data is None:
        return
    for user, items in data.items.items():
        for start in range(0, len(items), 1000):
            chunk = items[start : start + 1000]
            await backend.store_many(user, [{"key": k, "value": v} for k, v in chunk])


def openers(
    names: Sequence[str], directory: Path, url: str | None, data: Data | None
) -> dict[str, Opener]:
    """For each implementation, a context manager that yields it open on a fresh, preloaded
    database of its own (``data=None``: empty)."""
    counter = iter(range(1_000_000))

    @asynccontextmanager
    async def asyncmem() -> AsyncIterator[Any]:
        if url is None:
            path = directory / f"asyncmem-{next(counter)}.db"
            async with SQLBackend(f"sqlite:///{path}") as backend:
                await _preload_store(backend, data)
                yield Asyncmem(backend)
            return
        async with (
            pg_schema(url) as schema,
            SQLBackend(url, schema=schema, auto_migrate=True, pool_size=POOL_SIZE) as backend,
        ):
            await _preload_store(backend, data)
            yield Asyncmem(backend)

    @asynccontextmanager
    async def floor() -> AsyncIterator[Any]:
        impl: AiosqliteFloor | PgFloor
        async with contextlib.AsyncExitStack() as stack:
            if url is None:
                impl = AiosqliteFloor(directory / f"floor-{next(counter)}.db")
            else:
                schema = await stack.enter_async_context(pg_schema(url))
                impl = PgFloor(asyncpg_dsn(url), schema, POOL_SIZE)
            await impl.open()
            stack.push_async_callback(impl.aclose)
            for user, items in (data.items if data is not None else {}).items():
                await impl.load(user, items)
            yield impl

    @asynccontextmanager
    async def langgraph() -> AsyncIterator[Any]:
        from langgraph.store.base import PutOp

        def puts() -> list[list[Any]]:
            if data is None:
                return []
            ops = [
                PutOp((user,), key, {"value": value})
                for user, items in data.items.items()
                for key, value in items
            ]
            return [ops[i : i + 500] for i in range(0, len(ops), 500)]

        if url is None:
            sqlite_store = need("langgraph.store.sqlite.aio", "langgraph-checkpoint-sqlite")
            path = directory / f"langgraph-{next(counter)}.db"
            async with sqlite_store.AsyncSqliteStore.from_conn_string(str(path)) as store:
                await store.conn.execute("PRAGMA journal_mode = WAL")
                await store.conn.execute("PRAGMA synchronous = NORMAL")
                await store.setup()
                for chunk in puts():
                    await store.abatch(chunk)
                yield LangGraphOps(store)
            return
        pg_store = need("langgraph.store.postgres.aio", "langgraph-checkpoint-postgres")
        async with pg_database(url) as database:
            conninfo = asyncpg_dsn(database)
            config = {"min_size": POOL_SIZE, "max_size": POOL_SIZE}
            async with pg_store.AsyncPostgresStore.from_conn_string(
                conninfo, pool_config=config
            ) as store:
                await store.setup()
                for chunk in puts():
                    await store.abatch(chunk)
                yield LangGraphOps(store)

    makers = {"floor": floor, "asyncmem": asyncmem, "langgraph": langgraph}
    return {name: makers[name] for name in names}


# --- the mix ---------------------------------------------------------------------------------


async def one_op(impl: Any, data: Data, rng: random.Random) -> tuple[str, Awaitable[Any]]:
    roll = rng.random()
    user, key, value = data.pick(rng)
    retrieve, store, _ = data.shares
    if roll < retrieve:
        return "retrieve", impl.retrieve(user, key)
    if roll < retrieve + store:
        # "repeat": a key's first store in the run changes its text, later ones write it again;
        # "fresh": every store writes text with a word of its own.
        suffix = f" updated w{rng.randrange(10**9)}" if data.fresh else " updated"
        return "store", impl.store(user, key, value + suffix)
    return "query", impl.query(user, rng.choice(data.questions))


async def mix(impl: Any, data: Data, tasks: int, ops: int, seed: int) -> dict[str, Any]:
    samples: dict[str, list[int]] = defaultdict(list)

    async def worker(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        for _ in range(ops):
            op, call = await one_op(impl, data, rng)
            start = time.perf_counter_ns()
            await call
            samples[op].append(time.perf_counter_ns() - start)

    started = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(tasks)))
    elapsed = time.perf_counter() - started
    every = [s for op in OPS for s in samples[op]]
    return {
        "ops_per_s": len(every) / elapsed,
        "all": _quantiles(every),
        **{op: _quantiles(samples[op]) for op in OPS},
    }


def _quantiles(samples: Sequence[int]) -> dict[str, float]:
    return {
        "p50": pct(samples, 0.5),
        "p95": pct(samples, 0.95),
        "p99": pct(samples, 0.99),
        "max": max(samples) / 1e6 if samples else float("nan"),
        "n": len(samples),
    }


def median_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = median_runs([run[key] for run in runs])
        else:
            out[key] = statistics.median(run[key] for run in runs)
    return out


async def tasks_part(args: argparse.Namespace, directory: Path) -> tuple[str, dict[str, Any]]:
    data = _mix_data(args)
    impls = [name for name in args.impls.split(",") if name]
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for repeat in range(args.repeat):
        order = impls if repeat % 2 == 0 else list(reversed(impls))
        for name, opener in openers(order, directory, args.url, data).items():
            async with opener() as impl:
                await mix(impl, data, 8, 25, seed=99)  # warm up: caches, prepared statements
                result = await mix(impl, data, args.tasks, args.ops, seed=repeat)
            runs[name].append(result)
            print(
                f"tasks run {repeat + 1} {name}: {result['ops_per_s']:.0f} ops/s, "
                f"store p99 {result['store']['p99']:.1f} ms, loadavg {loadavg()}",
                file=sys.stderr,
                flush=True,
            )
    merged = {name: median_runs(r) for name, r in runs.items()}
    floor = merged.get("floor")
    rows = []
    for name, r in merged.items():
        cells = [
            name,
            f"{r['ops_per_s']:.0f}",
            ratio(r["ops_per_s"], floor["ops_per_s"]) if floor else "—",
        ]
        for op in ("all", *OPS):
            q = r[op]
            cells.append(f"{q['p50']:.2f} / {q['p95']:.2f} / {q['p99']:.2f}")
        cells += [ratio(r[op]["p99"], floor[op]["p99"]) if floor else "—" for op in OPS]
        rows.append(cells)
    per_run = [
        [n + 1, *(f"{runs[name][n]['ops_per_s']:.0f}" for name in merged)]
        for n in range(args.repeat)
    ]
    dialect = "SQLite" if args.url is None else "PostgreSQL"
    text = "\n".join(
        [
            f"### {dialect}: {args.tasks} tasks × {args.ops} calls, {args.mix} "
            f"retrieve/store/query, {args.preload:,} memories over {args.users} users, "
            f"stores: {args.store_text} text"
            f" (median of {args.repeat} runs)",
            "",
            table(
                [
                    "implementation",
                    "ops/s",
                    "ops/s ÷ floor",
                    "all p50/p95/p99 ms",
                    "retrieve p50/p95/p99 ms",
                    "store p50/p95/p99 ms",
                    "query p50/p95/p99 ms",
                    "retrieve p99 ÷ floor",
                    "store p99 ÷ floor",
                    "query p99 ÷ floor",
                ],
                rows,
            ),
            "",
            "ops/s of each run:",
            "",
            table(["run", *merged], per_run),
            "",
        ]
    )
    return text, {"runs": runs, "median": merged}


# --- sequential ------------------------------------------------------------------------------


async def seq_part(args: argparse.Namespace, directory: Path) -> tuple[str, dict[str, Any]]:
    """Every operation on every implementation in turn (rotating who goes first)."""
    impls = [name for name in args.impls.split(",") if name]
    data = Data(args.users, args.seq_size // args.users, seed=11)
    samples: dict[str, dict[str, list[int]]] = {n: defaultdict(list) for n in impls}
    opened: dict[str, Any] = {}
    contexts = openers(impls, directory, args.url, None)
    managers = {name: contexts[name]() for name in impls}
    for name, manager in managers.items():
        opened[name] = await manager.__aenter__()
    try:
        rng = random.Random(3)
        pairs = [(user, key, value) for user in data.users for key, value in data.items[user]]
        rng.shuffle(pairs)
        turn = 0

        async def each(op: str, call: Callable[[Any], Awaitable[Any]]) -> None:
            nonlocal turn
            turn += 1
            names = impls[turn % len(impls) :] + impls[: turn % len(impls)]
            for name in names:
                start = time.perf_counter_ns()
                await call(opened[name])
                samples[name][op].append(time.perf_counter_ns() - start)

        for user, key, value in pairs:
            await each("store", lambda impl, u=user, k=key, v=value: impl.store(u, k, v))
        for user, key, _ in rng.sample(pairs, len(pairs)):
            await each("retrieve", lambda impl, u=user, k=key: impl.retrieve(u, k))
        for n, question in enumerate(data.questions):
            user = data.users[n % len(data.users)]
            await each("query", lambda impl, u=user, q=question: impl.query(u, q))
        for user, key, _ in rng.sample(pairs, len(pairs)):
            await each("delete", lambda impl, u=user, k=key: impl.delete(u, k))
    finally:
        for manager in reversed(managers.values()):
            await manager.__aexit__(None, None, None)
    p50 = {name: {op: pct(s[op][10:], 0.5) for op in SEQ_OPS} for name, s in samples.items()}
    rows = []
    for op in SEQ_OPS:
        row = [op, *(ms(p50[name][op]) for name in impls)]
        if "floor" in p50:
            row += [ratio(p50[name][op], p50["floor"][op]) for name in impls if name != "floor"]
        rows.append(row)
    others = [name for name in impls if name != "floor"] if "floor" in p50 else []
    dialect = "SQLite" if args.url is None else "PostgreSQL"
    text = "\n".join(
        [
            f"### {dialect}: sequential p50 ({len(pairs):,} stores, retrieves and deletes over "
            f"{args.users} users, {len(data.questions)} queries; implementations interleaved)",
            "",
            table(["operation", *impls, *(f"{n} ÷ floor" for n in others)], rows),
            "",
        ]
    )
    return text, p50


# --- a conversation turn's store -------------------------------------------------------------


async def turn_part(args: argparse.Namespace, directory: Path) -> tuple[str, dict[str, Any]]:
    """A turn (session, speaker, date) against a plain store of the same text, interleaved."""
    rng = random.Random(5)
    turns: list[int] = []
    plain: list[int] = []
    opener = openers(["asyncmem"], directory, args.url, None)["asyncmem"]
    async with opener() as impl:
        backend: SQLBackend = impl.backend
        for n in range(args.turns):
            value = sentence(rng)
            session, speaker = f"s{n // 40}", ("User", "Assistant")[n % 2]
            metadata = {"session": session, "speaker": speaker, "date": "8 May 2023"}
            start = time.perf_counter_ns()
            await backend.store("talker", f"turn-{n:05d}", value, metadata)
            turns.append(time.perf_counter_ns() - start)
            start = time.perf_counter_ns()
            await backend.store("plain", f"turn-{n:05d}", value)
            plain.append(time.perf_counter_ns() - start)
        dialect = backend.dialect
    result = {"turn_p50": pct(turns[20:], 0.5), "plain_p50": pct(plain[20:], 0.5)}
    text = "\n".join(
        [
            f"### {dialect}: a conversation turn's store against a plain store "
            f"({args.turns:,} of each, interleaved, conversations of 40 turns)",
            "",
            table(
                ["turn store p50", "plain store p50", "ratio"],
                [
                    [
                        ms(result["turn_p50"]),
                        ms(result["plain_p50"]),
                        ratio(result["turn_p50"], result["plain_p50"]),
                    ]
                ],
            ),
            "",
        ]
    )
    return text, result


# --- many processes --------------------------------------------------------------------------


def _time_write_trips(trips: list[int]) -> None:
    """Record each trip of asyncmem's write batches in the writer's thread (ns): from its
    first try for the file's write lock to its last commit, waits for the lock included."""
    from asyncmem.sql import drivers

    real = drivers._run_batch

    def timed(connection: Any, bodies: Any, hook: Any, transactional: bool, *rest: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return real(connection, bodies, hook, transactional, *rest)
        finally:
            if transactional:
                trips.append(time.perf_counter_ns() - start)

    drivers._run_batch = timed


async def worker_main(args: argparse.Namespace) -> int:
    """One process of the mp part: ``--proc-tasks`` tasks until the deadline; JSON to a file."""
    trips: list[int] = []
    data = _mix_data(args)
    path = Path(args.worker)
    impl: Any
    if args.worker_impl == "floor":
        floor = AiosqliteFloor(path)
        await floor.open()
        impl, closer = floor, floor.aclose
    else:
        backend = SQLBackend(f"sqlite:///{path}")
        await backend.open()
        impl, closer = Asyncmem(backend), backend.aclose
        _time_write_trips(trips)
    samples: dict[str, list[int]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    start_at, deadline = args.start_at, args.start_at + args.seconds
    await asyncio.sleep(max(0.0, start_at - time.time()))

    async def task(n: int) -> None:
        rng = random.Random(args.seed * 1000 + n)
        while time.time() < deadline:
            op, call = await one_op(impl, data, rng)
            start = time.perf_counter_ns()
            try:
                await call
            except Exception as exc:
                errors[f"{op}: {type(exc).__name__}"] += 1
                continue
            finally:
                samples[op].append(time.perf_counter_ns() - start)

    try:
        await asyncio.gather(*(task(n) for n in range(args.proc_tasks)))
    finally:
        await closer()
    Path(args.out).write_text(
        json.dumps({"samples": samples, "errors": errors, "write_trips": trips})
    )
    return 0


async def mp_part(args: argparse.Namespace, directory: Path) -> tuple[str, dict[str, Any]]:
    if args.url is not None:
        return "(mp: SQLite only; skipped with --url)\n", {}
    rows = []
    report: dict[str, Any] = {}
    for impl in [name for name in args.mp_impls.split(",") if name]:
        path = directory / f"mp-{impl}.db"
        data = _mix_data(args)
        if impl == "floor":
            await asyncio.to_thread(sqlite_floor_file, path, data.items)
        else:
            async with SQLBackend(f"sqlite:///{path}") as backend:
                await _preload_store(backend, data)
        start_at = time.time() + 5.0 + args.procs * 0.75
        outs = [directory / f"mp-{impl}-{n}.json" for n in range(args.procs)]
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                str(path),
                "--worker-impl",
                impl,
                "--out",
                str(out),
                "--seed",
                str(n),
                "--start-at",
                repr(start_at),
                "--seconds",
                str(args.seconds),
                "--proc-tasks",
                str(args.proc_tasks),
                "--users",
                str(args.users),
                "--preload",
                str(args.preload),
                "--store-text",
                args.store_text,
                "--mix",
                args.mix,
            )
            for n, out in enumerate(outs)
        ]
        codes = [await proc.wait() for proc in procs]
        samples: dict[str, list[int]] = defaultdict(list)
        errors: dict[str, int] = defaultdict(int)
        trips: list[int] = []
        for out in outs:
            if not out.exists():
                continue
            got = json.loads(out.read_text())
            for op, values in got["samples"].items():
                samples[op].extend(values)
            for name, count in got["errors"].items():
                errors[name] += count
            trips.extend(got.get("write_trips", []))
        every = [s for values in samples.values() for s in values]
        failed = sum(code != 0 for code in codes)
        summary = {
            "ops": len(every),
            "ops_per_s": len(every) / args.seconds,
            "all": _quantiles(every),
            **{op: _quantiles(samples[op]) for op in OPS},
            "errors": dict(errors),
            "failed_processes": failed,
            "write_trips": _quantiles(trips) if trips else None,
        }
        report[impl] = summary
        rows.append(
            [
                impl,
                f"{summary['ops']:,}",
                f"{summary['ops_per_s']:.0f}",
                ms(summary["all"]["p50"]),
                ms(summary["all"]["p99"]),
                *(ms(summary[op]["p99"]) for op in OPS),
                ms(summary["all"]["max"]),
                str(sum(errors.values())) + (f" ({dict(errors)})" if errors else ""),
                str(failed),
                (
                    f"{ms(summary['write_trips']['p50'])} / {ms(summary['write_trips']['p99'])}"
                    if trips
                    else "—"
                ),
                loadavg(),
            ]
        )
        print(f"mp {impl}: {rows[-1]}", file=sys.stderr, flush=True)
    text = "\n".join(
        [
            f"### SQLite: {args.procs} processes × {args.proc_tasks} tasks on one file for "
            f"{args.seconds} s, {args.mix} retrieve/store/query over {args.preload:,} memories, "
            f"stores: {args.store_text} text",
            "",
            table(
                [
                    "implementation",
                    "calls",
                    "ops/s",
                    "p50",
                    "p99",
                    "retrieve p99",
                    "store p99",
                    "query p99",
                    "max",
                    "errors",
                    "failed processes",
                    "write trip p50 / p99",
                    "loadavg",
                ],
                rows,
            ),
            "",
        ]
    )
    return text, report


# --- main ------------------------------------------------------------------------------------


PARTS = {"tasks": tasks_part, "seq": seq_part, "turn": turn_part, "mp": mp_part}


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="tasks,seq,turn,mp", help=", ".join(PARTS))
    parser.add_argument("--url", help="PostgreSQL URL (default: SQLite files on tmpfs)")
    parser.add_argument("--dir", help="where SQLite scratch files go (default /dev/shm)")
    parser.add_argument("--impls", default="floor,asyncmem,langgraph", help="for tasks and seq")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--ops", type=int, default=100, help="calls per task")
    parser.add_argument("--preload", type=int, default=5000)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2, help="runs of the tasks part")
    parser.add_argument("--seq-size", type=int, default=5000)
    parser.add_argument("--turns", type=int, default=2000, help="turns stored by the turn part")
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--proc-tasks", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument(
        "--store-text",
        choices=["repeat", "fresh"],
        default="repeat",
        help="the mix's stores: a key's text + ' updated' (the same on every later store of "
        "the key) or new text every time",
    )
    parser.add_argument(
        "--mix",
        default="70/20/10",
        help="percentages of retrieve/store/query in the tasks and mp parts; 80/20/0 leaves "
        "out the query, which LangGraph's store answers without ranking",
    )
    parser.add_argument("--mp-impls", default="asyncmem", help="asyncmem and/or floor")
    parser.add_argument("--json", help="write the raw numbers here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-impl", default="asyncmem", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.shares = parse_mix(args.mix)
    except ValueError as exc:
        parser.error(str(exc))
    if args.worker:
        return await worker_main(args)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    out = [f"loadavg at start {loadavg()}", ""]
    report: dict[str, Any] = {"args": vars(args)}
    with scratch_dir(args.dir) as directory:
        for part in parts:
            text, numbers = await PARTS[part](args, directory)
            out.append(text)
            report[part] = numbers
    print("\n".join(out))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
