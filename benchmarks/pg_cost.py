"""Issue 17's PostgreSQL cost per call: where a call's time goes when the machine is full.

    PYTHONPATH=$PWD python benchmarks/pg_cost.py --url postgresql://postgres@127.0.0.1:5432/test

Under 64 tasks on two cores the store and the server share the CPU, so ops/s follows CPU
and commit waits per call, not a lone call's latency. For each implementation (the asyncpg
floor and asyncmem, on the preloaded data of ``concurrency.py``), each operation is called
``--calls`` times in a row and this reports, per call: the client process's CPU time, the
CPU time of every PostgreSQL server process (``/proc/<pid>/stat``, so the server must run
on this machine), and the WAL bytes written (``pg_current_wal_lsn()``). Stores rewrite
memories that exist (as the mix does), with a value that changes each time. ``mix`` is
``concurrency.py``'s 64 tasks, 70/20/10 retrieve/store/query (its wall column: the run's
time over its calls, 1 / ops/s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.concurrency import Data, mix, openers
from benchmarks.harness import asyncpg_dsn, loadavg, table

TICK = os.sysconf("SC_CLK_TCK")


def server_cpu() -> float:
    """Seconds of CPU used so far by every process named ``postgres``."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name != "postgres":
            continue
        fields = rest.split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


async def wal_lsn(connection: Any) -> int:
    return int(await connection.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


async def measure(impl: Any, data: Data, op: str, calls: int, probe: Any) -> tuple[float, ...]:
    rng = random.Random(3)
    picks = [data.pick(rng) for _ in range(calls)]
    questions = [rng.choice(data.questions) for _ in range(calls)]

    async def call(i: int) -> None:
        user, key, value = picks[i]
        if op == "store":
            await impl.store(user, key, f"{value} {i}")
        elif op == "retrieve":
            await impl.retrieve(user, key)
        else:
            await impl.query(user, questions[i])

    for name in os.environ.get("PG_COST_DISABLE", "").split(","):
        if name:  # an experiment: what a trigger costs (every schema's memories table)
            for schema in await probe.fetch(
                "SELECT n.nspname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.tgname = $1",
                name,
            ):
                await probe.execute(f'ALTER TABLE "{schema[0]}".memories DISABLE TRIGGER {name}')
    if sql := os.environ.get("PG_COST_SQL"):  # an experiment: a trigger rewritten
        for schema in await probe.fetch(
            "SELECT n.nspname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.tgname = 'memories_search'"
        ):
            await probe.execute(f'SET search_path TO "{schema[0]}"; {sql}; RESET search_path')
    for i in range(min(50, calls)):  # warm plans and caches
        await call(i)
    lsn, client, server, wall = (
        await wal_lsn(probe),
        time.process_time(),
        server_cpu(),
        time.perf_counter(),
    )
    for i in range(calls):
        await call(i)
    wall = time.perf_counter() - wall
    client, server = time.process_time() - client, server_cpu() - server
    wal = await wal_lsn(probe) - lsn
    return wall / calls * 1e6, client / calls * 1e6, server / calls * 1e6, wal / calls


async def measure_mix(
    impl: Any, data: Data, tasks: int, calls: int, probe: Any
) -> tuple[float, ...]:
    """The 64-task mix of ``concurrency.py``: per call, its wall time over all tasks."""
    await mix(impl, data, 8, 25, seed=99)
    lsn, client, server = await wal_lsn(probe), time.process_time(), server_cpu()
    result = await mix(impl, data, tasks, calls // tasks, seed=1)
    done = calls // tasks * tasks
    client, server = time.process_time() - client, server_cpu() - server
    wal = await wal_lsn(probe) - lsn
    wall = 1e6 / result["ops_per_s"]
    return wall, client / done * 1e6, server / done * 1e6, wal / done


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--impls", default="floor,asyncmem")
    parser.add_argument("--ops", default="store,retrieve,query,mix")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--preload", type=int, default=5000)
    parser.add_argument("--users", type=int, default=10)
    args = parser.parse_args()
    import asyncpg

    data = Data(args.users, args.preload // args.users)
    probe = await asyncpg.connect(asyncpg_dsn(args.url))
    rows = []
    makers = openers(args.impls.split(","), Path("/tmp"), args.url, data)
    for name, opener in makers.items():
        async with opener() as impl:
            for op in args.ops.split(","):
                if op == "mix":
                    cost = await measure_mix(impl, data, 64, args.calls * 3, probe)
                else:
                    cost = await measure(impl, data, op, args.calls, probe)
                wall, client, server, wal = cost
                rows.append(
                    [name, op, f"{wall:.0f}", f"{client:.0f}", f"{server:.0f}", f"{wal:.0f}"]
                )
                print(*rows[-1], loadavg(), file=sys.stderr)
    await probe.close()
    headers = ["implementation", "operation", "wall µs", "client CPU µs", "server CPU µs", "WAL B"]
    print(table(headers, rows))


if __name__ == "__main__":
    asyncio.run(main())
