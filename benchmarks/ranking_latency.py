"""Query latency of asyncmem's ranking against a plain full-text query, at one user's scale.

The memories are RealMem's conversation turns (``realmem-turns.json.gz``, read where it lies)
with their ``session``/``speaker``/``date`` metadata, all given to one user and replicated
with distinct keys and session ids (``#r2``, ``#r3``, ...) until there are ``--scale`` of
them, loaded with ``store_many`` (the same write-time context as one ``store`` per turn). Then
the file's questions are asked, alternating ``SQLBackend.query`` with the core store's plain
statement on the same rows, so machine noise hits both alike:

- SQLite: FTS5 ``bm25`` over a key + value FTS5 table (revision 0001's index), on aiosqlite
  (``relevance.plain_fts5_ns``);
- PostgreSQL (``--url``, a throw-away schema): ``ts_rank`` over a key + value ``tsvector``
  with a GIN index (revision 0001's shape) in a copy of the rows, on asyncpg.

    python benchmarks/ranking_latency.py ../shared/data/realmem/realmem-turns.json.gz \\
        --scale 5000,100000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from asyncmem import SQLBackend
from asyncmem.sql.engine import normalize_url
from asyncmem.sql.search import query_terms, tsquery_expression
from benchmarks.relevance import load, ms, plain_fts5_ns, scratch_backend

USER = "one"
BATCH = 1000
PG_PLAIN = [
    "DROP TABLE IF EXISTS bench_plain",
    "CREATE TABLE bench_plain AS SELECT id, user_id, key, value, metadata, created_at, "
    "updated_at FROM memories",
    "ALTER TABLE bench_plain ADD PRIMARY KEY (id)",
    "ALTER TABLE bench_plain ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
    "(to_tsvector('english'::regconfig, left(key || ' ' || value, 262144))) STORED",
    "CREATE INDEX ON bench_plain USING gin (search_vector)",
    "CREATE INDEX ON bench_plain (user_id, updated_at)",
    "ANALYZE bench_plain",
    "ANALYZE memories",
]
"""Revision 0001's table and index (key + value, English stemming), copied from our rows."""
PG_PLAIN_QUERY = (
    "SELECT user_id, key, value, metadata, created_at, updated_at, "
    "ts_rank(search_vector, q) AS score "
    "FROM bench_plain, to_tsquery('english'::regconfig, $1) AS q "
    "WHERE search_vector @@ q AND user_id = $2 ORDER BY score DESC, id LIMIT $3"
)
"""Plain ``ts_rank`` over key + value, best first: no re-ranking, no context."""


def memories(data: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """``count`` turns of one user: the file's turns in (user, seq) order, copied as needed.

    Copy ``r`` (from 2) suffixes keys and session ids with ``#r<r>``, so each copy is a new set
    of conversations rather than more turns of the same ones.
    """
    turns = sorted(data["memories"], key=lambda m: (m["user_id"], m["metadata"]["seq"]))
    out: list[dict[str, Any]] = []
    copy = 1
    while len(out) < count:
        suffix = "" if copy == 1 else f"#r{copy}"
        for turn in turns[: count - len(out)]:
            metadata = dict(turn["metadata"])
            metadata["session"] = f"{metadata['session']}{suffix}"
            out.append({"key": turn["key"] + suffix, "value": turn["value"], "metadata": metadata})
        copy += 1
    return out


async def fill(backend: SQLBackend, items: Sequence[dict[str, Any]]) -> float:
    """Store ``items`` for :data:`USER` in batches; return the seconds it took."""
    started = time.perf_counter()
    for start in range(0, len(items), BATCH):
        await backend.store_many(USER, items[start : start + BATCH])
    return time.perf_counter() - started


async def pg_plain_ns(
    url: str, schema: str, backend: SQLBackend, questions: Sequence[str], limit: int
) -> tuple[list[int], list[int]]:
    """Alternate the plain ``ts_rank`` statement (asyncpg) with ``backend.query``."""
    import asyncpg

    dsn = normalize_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    floor: list[int] = []
    ours: list[int] = []
    try:
        for statement in PG_PLAIN:
            await conn.execute(statement)
        for question in questions:
            terms = query_terms(question)
            if not terms:
                continue
            start = time.perf_counter_ns()
            await conn.fetch(PG_PLAIN_QUERY, tsquery_expression(terms), USER, limit)
            floor.append(time.perf_counter_ns() - start)
            start = time.perf_counter_ns()
            await backend.query(USER, question, limit=limit)
            ours.append(time.perf_counter_ns() - start)
    finally:
        await conn.close()
    return floor, ours


async def measure(
    url: str | None, items: Sequence[dict[str, Any]], questions: Sequence[str], limit: int
) -> dict[str, float]:
    async with scratch_backend(url) as backend:
        seconds = await fill(backend, items)
        if backend.schema is not None and url is not None:
            floor, ours = await pg_plain_ns(url, backend.schema, backend, questions, limit)
        else:
            assert backend.path is not None
            asked = [(USER, question) for question in questions]
            floor, ours = await plain_fts5_ns(backend.path, backend, asked, limit)
    return {
        "memories": len(items),
        "load_s": seconds,
        "questions": len(ours),
        "query_p50_ms": ms(ours),
        "plain_p50_ms": ms(floor),
        "ratio": ms(ours) / ms(floor),
    }


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="realmem-turns.json.gz (read in place)")
    parser.add_argument("--scale", default="5000,100000", help="memory counts, comma-separated")
    parser.add_argument("--url", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--questions", type=int, default=None, help="only the first N questions")
    parser.add_argument("--limit", type=int, default=10)
    args = parser.parse_args(argv)
    data = load(args.data)
    questions = [query["question"] for query in data["queries"]][: args.questions]
    print("| memories | questions | fill | asyncmem query p50 | plain p50 | ratio | loadavg |")
    print("|---|---|---|---|---|---|---|")
    for count in (int(n) for n in args.scale.split(",")):
        row = await measure(args.url, memories(data, count), questions, args.limit)
        loadavg = Path("/proc/loadavg").read_text().split()[0]
        print(
            f"| {row['memories']:,} | {row['questions']} | {row['load_s']:.0f} s | "
            f"{row['query_p50_ms']:.2f} ms | {row['plain_p50_ms']:.2f} ms | "
            f"{row['ratio']:.2f}× | {loadavg} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
