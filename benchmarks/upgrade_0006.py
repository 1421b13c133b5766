"""How long revision 0006 (per-user postings) takes on an existing database, up and down.

    PYTHONPATH=$PWD python benchmarks/upgrade_0006.py ../shared/data/realmem/realmem-turns.json.gz
    PYTHONPATH=$PWD python benchmarks/upgrade_0006.py DATA --url postgresql://postgres@127.0.0.1:5432/test

Fills a database at revision 0005 with ``--count`` (100,000) memories as 0005's store wrote
them (session, speaker/date facets, word contexts; the FTS5 index or ``tsvector`` built by
0005's own triggers), taken from a data set in ``benchmarks/relevance.py``'s format and
repeated under new user ids until there are enough, then times ``upgrade`` to 0006 and
``downgrade`` back to 0005. SQLite on tmpfs; PostgreSQL in a database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text

from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.search import facets_of, neighbour_words, session_of
from benchmarks.harness import pg_database, scratch_dir


def rows_as_0005(memories: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    copy = 0
    while len(rows) < count:
        turns: dict[tuple[str, str], list[int]] = defaultdict(list)
        first = len(rows)
        for memory in memories[: count - len(rows)]:
            metadata = memory.get("metadata") or {}
            user = f"{memory['user_id']}~{copy}"
            session = session_of(metadata)
            if session is not None:
                turns[user, session].append(len(rows))
            rows.append(
                {
                    "user_id": user,
                    "key": memory["key"],
                    "value": memory["value"],
                    "metadata": json.dumps(metadata),
                    "session": session,
                    "facets": facets_of(metadata, memory["value"]),
                    "context": "",
                }
            )
        for positions in turns.values():
            contexts = neighbour_words([rows[n]["value"] for n in positions])
            for n, context in zip(positions, contexts, strict=True):
                rows[n]["context"] = context
        copy += 1
        assert len(rows) > first
    return rows


async def run(url: str, rows: list[dict[str, Any]]) -> dict[str, float]:
    engine = make_engine(normalize_url(url))
    try:
        await migrate.upgrade(engine, "0005_cjk_words")
        cast = "CAST(:metadata AS JSONB)" if engine.dialect.name == "postgresql" else ":metadata"
        statement = text(
            "INSERT INTO memories (user_id, key, value, metadata, created_at, updated_at, "
            f"session, context, facets) VALUES (:user_id, :key, :value, {cast}, 1, 1, "
            ":session, :context, :facets)"
        )
        started = time.perf_counter()
        async with engine.begin() as conn:
            for start in range(0, len(rows), 5000):
                await conn.execute(statement, rows[start : start + 5000])
        filled = time.perf_counter() - started
        started = time.perf_counter()
        await migrate.upgrade(engine)
        up = time.perf_counter() - started
        started = time.perf_counter()
        await migrate.downgrade(engine, "0005_cjk_words")
        down = time.perf_counter() - started
        return {"fill_s": filled, "upgrade_s": up, "downgrade_s": down}
    finally:
        await engine.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--url", help="a PostgreSQL URL (default: SQLite on tmpfs)")
    args = parser.parse_args()
    opener = gzip.open if args.data.suffix == ".gz" else open
    with opener(args.data, "rt", encoding="utf-8") as handle:
        memories = json.load(handle)["memories"]
    rows = rows_as_0005(memories, args.count)
    if args.url:
        async with pg_database(args.url) as url:
            found = await run(url, rows)
    else:
        with scratch_dir() as directory:
            found = await run(f"sqlite:///{directory / 'memory.db'}", rows)
    chars = sum(len(row["value"]) for row in rows) / len(rows)
    print(
        f"{'postgresql' if args.url else 'sqlite'}: {len(rows):,} memories "
        f"({chars:.0f} characters each on average): fill {found['fill_s']:.1f} s, "
        f"upgrade to 0006 {found['upgrade_s']:.1f} s, "
        f"downgrade to 0005 {found['downgrade_s']:.1f} s"
    )


if __name__ == "__main__":
    asyncio.run(main())
