"""A/B of a conversation turn's store on PostgreSQL: ``BEGIN`` and the user's advisory lock
as two round trips (what ``SQLBackend._atomic`` does today) against one
(``PostgresDriver.atomic(lock=..., lock_users=...)``), interleaved with a plain store.

    PYTHONPATH=$PWD python benchmarks/turn_lock.py --url postgresql://postgres@127.0.0.1:5432/test

Both ways run the store's own turn upkeep (``conversations.store_turn``) on one store, in
turn, so noise hits them alike. Once the store calls ``atomic`` with the lock itself,
``concurrency.py --parts turn`` measures the same and this file can go.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import SQLBackend
from asyncmem.sql import conversations
from asyncmem.sql.drivers import Row, Transaction
from asyncmem.sql.search import session_of
from asyncmem.sql.terms import index_columns
from benchmarks.harness import ms, pct, pg_schema, ratio
from benchmarks.workload import sentence


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    async with (
        pg_schema(args.url) as schema,
        SQLBackend(args.url, schema=schema, auto_migrate=True) as backend,
    ):
        sql, driver = backend._sql, backend._driver
        rng = random.Random(5)
        times: dict[str, list[int]] = {"two trips": [], "folded": [], "plain": []}
        for n in range(args.turns):
            value = sentence(rng)
            session = f"s{n // 40}"
            for way in ("two trips", "folded") if n % 2 else ("folded", "two trips"):
                user = f"talker-{way}"
                metadata = {"session": session, "speaker": "User", "date": "8 May 2023"}
                key = f"turn-{n:05d}"
                facets, words, length = index_columns(key, value, metadata)
                values: dict[str, Any] = {
                    "user_id": user,
                    "key": key,
                    "value": value,
                    "metadata": json.dumps(metadata),
                    "ttl": None,
                    "session": session_of(metadata),
                    "facets": facets,
                    "words": words,
                    "length": length,
                }
                now = backend._now()

                async def body(t: Transaction, v: dict[str, Any] = values, at: float = now) -> Row:
                    return await conversations.store_turn(t, sql, v, at)

                async def locked(t: Transaction, user: str = user) -> Row:
                    await conversations.lock_users(t, sql, [user])
                    return await body(t)

                start = time.perf_counter_ns()
                if way == "folded":
                    await driver.atomic(body, lock=sql.lock_user, lock_users=[user])
                else:
                    await driver.atomic(locked)
                times[way].append(time.perf_counter_ns() - start)
            start = time.perf_counter_ns()
            await backend.store("plain", f"turn-{n:05d}", value)
            times["plain"].append(time.perf_counter_ns() - start)
    p50 = {way: pct(samples[20:], 0.5) for way, samples in times.items()}
    print(
        " | ".join(f"{way} p50 {ms(value)}" for way, value in p50.items()),
        f"| two trips ÷ plain {ratio(p50['two trips'], p50['plain'])}",
        f"| folded ÷ plain {ratio(p50['folded'], p50['plain'])}",
    )


if __name__ == "__main__":
    asyncio.run(main())
