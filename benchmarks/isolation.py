"""Issue 16's probes: does a user's query depend on other users' memories?

    PYTHONPATH=$PWD python benchmarks/isolation.py                       # every part, SQLite
    PYTHONPATH=$PWD python benchmarks/isolation.py --parts side,noise \\
        --url postgresql://postgres@127.0.0.1:5432/test
    PYTHONPATH=$PWD python benchmarks/isolation.py --parts scale \\
        --scale 1000,10000,100000 --spread 1000000/1000 --keep /dev/shm/asyncmem-bench

Three parts (``--parts``), each on SQLite on tmpfs (``/dev/shm``) or, with ``--url``, in a
throw-away PostgreSQL schema:

- side: alice has two memories, one matching each word of her question "coffee or tea?".
  Her scores alone, then after bob stores memories with "coffee", then with "tea", then
  after bob is forgotten. A user's scores must not move when another user writes.
- noise: alice's query p50 over her two memories with bob holding ``--neighbours`` memories
  (default 0, 50,000 and 500,000) that all contain "coffee", timed in turn with the same query
  on a database that holds only alice's memories: the noisy neighbour (PostgreSQL: also after
  an ``ANALYZE``, as autovacuum would run it some time later).
- scale: ``query`` p50 against "the floor" (a hand-written FTS5 ``bm25()`` top-10 statement on
  aiosqlite, over an FTS5 table of key and value built beside the store's on the same rows;
  on PostgreSQL a ``ts_rank`` top-10 over a copy of the rows with a GIN index) at each
  ``--scale`` memories of one user, and with ``--spread TOTAL/USERS`` memories spread over
  users. The questions are workload.py's: half mostly-rare words, half mostly-common; the
  growth from the smallest to the largest one-user size is reported for each half. On
  PostgreSQL ``--vacuum`` times the tables as autovacuum leaves them (``VACUUM ANALYZE``
  first: the visibility map lets the per-term counts skip the heap); without it, just filled.

Memories are workload.py's sentences (a Zipf-like vocabulary), loaded with ``store_many`` in
batches of 1,000. ``--keep DIR`` keeps the prepared SQLite files of the scale part in DIR
(named by size and schema revision) and reuses them on the next run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiosqlite

from asyncmem import MemoryEntry, SQLBackend
from asyncmem.sql.migrate import HEAD
from asyncmem.sql.search import fts5_expression, query_terms, tsquery_expression
from benchmarks.harness import (
    asyncpg_dsn,
    loadavg,
    ms,
    pct,
    pg_execute,
    positive,
    ratio,
    scratch_dir,
    scratch_store,
    table,
)
from benchmarks.workload import make_workload, sentence

BATCH = 1000
DATA_VERSION = 1
"""Bump when the generated data changes, so ``--keep`` files are rebuilt."""

FLOOR_TABLE = "bench_floor_fts"
FLOOR_INDEX = [
    f"DROP TABLE IF EXISTS {FLOOR_TABLE}",
    f"CREATE VIRTUAL TABLE {FLOOR_TABLE} USING fts5(key, value, content='memories', "
    "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    f"INSERT INTO {FLOOR_TABLE}({FLOOR_TABLE}) VALUES ('rebuild')",
]
"""The floor's index: key and value of the same rows, as the core store (revision 0001) had."""
FLOOR_QUERY = (
    "SELECT m.user_id, m.key, m.value, m.metadata, m.created_at, m.updated_at, "
    f"-bm25({FLOOR_TABLE}) AS score FROM {FLOOR_TABLE} JOIN memories AS m "
    f"ON m.id = {FLOOR_TABLE}.rowid WHERE {FLOOR_TABLE} MATCH ? AND m.user_id = ? "
    f"ORDER BY bm25({FLOOR_TABLE}), m.id LIMIT ?"
)
FLOOR_COUNT = (
    # CROSS JOIN keeps the match as the outer loop: without statistics SQLite otherwise reads
    # the user's rows and probes the index once for each (10 s a count at 100,000).
    f"SELECT count(*) FROM {FLOOR_TABLE} CROSS JOIN memories AS m "
    f"ON m.id = {FLOOR_TABLE}.rowid WHERE {FLOOR_TABLE} MATCH ? AND m.user_id = ?"
)
PG_FLOOR = [
    "DROP TABLE IF EXISTS bench_floor",
    "CREATE TABLE bench_floor AS SELECT id, user_id, key, value, metadata, created_at, "
    "updated_at FROM memories",
    "ALTER TABLE bench_floor ADD PRIMARY KEY (id)",
    "ALTER TABLE bench_floor ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
    "(to_tsvector('english'::regconfig, left(key || ' ' || value, 262144))) STORED",
    "CREATE INDEX ON bench_floor USING gin (search_vector)",
    "CREATE INDEX ON bench_floor (user_id)",
    "ANALYZE bench_floor",
    "ANALYZE memories",
]
PG_FLOOR_QUERY = (
    "SELECT user_id, key, value, metadata, created_at, updated_at, "
    "ts_rank(search_vector, q) AS score "
    "FROM bench_floor, to_tsquery('english'::regconfig, $1) AS q "
    "WHERE search_vector @@ q AND user_id = $2 ORDER BY score DESC, id LIMIT $3"
)
PG_FLOOR_COUNT = (
    "SELECT count(*) FROM bench_floor, to_tsquery('english'::regconfig, $1) AS q "
    "WHERE search_vector @@ q AND user_id = $2"
)

ALICE = "alice"
BOB = "bob"
QUESTION = "coffee or tea?"
ALICE_MEMORIES = [
    {"key": "drink-morning", "value": "I take my coffee black every morning"},
    {"key": "drink-afternoon", "value": "Green tea with lemon after lunch"},
]


def _entry(row: Any, score: float) -> MemoryEntry:
    return MemoryEntry(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], score)


def neighbour_values(count: int, word: str, seed: int) -> list[dict[str, Any]]:
    """``count`` memories for bob, each a workload sentence with ``word`` in it."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        words = sentence(rng).split()
        words.insert(rng.randrange(len(words) + 1), word)
        items.append({"key": f"{word}-{seed}-{i:07d}", "value": " ".join(words)})
    return items


async def store_batches(backend: SQLBackend, user: str, items: Sequence[dict[str, Any]]) -> None:
    for start in range(0, len(items), BATCH):
        await backend.store_many(user, items[start : start + BATCH])


async def timed_ns(call: Callable[[], Awaitable[Any]], repeat: int, warmup: int = 10) -> list[int]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        await call()
        samples.append(time.perf_counter_ns() - start)
    return samples


async def timed_pair(
    first: Callable[[], Awaitable[Any]], second: Callable[[], Awaitable[Any]], repeat: int
) -> tuple[float, float]:
    """p50s of two calls timed in turn, so the machine's load changes hit both alike."""
    for _ in range(10):
        await first()
        await second()
    samples: tuple[list[int], list[int]] = ([], [])
    for _ in range(repeat):
        for call, found in zip((first, second), samples, strict=True):
            start = time.perf_counter_ns()
            await call()
            found.append(time.perf_counter_ns() - start)
    return pct(samples[0], 0.5), pct(samples[1], 0.5)


# --- side channel ----------------------------------------------------------------------------


async def side_channel(directory: Path, url: str | None, count: int) -> list[list[Any]]:
    """Alice's scores alone, after bob writes "coffee" then "tea" memories, after bob goes."""
    rows: list[list[Any]] = []
    alone: list[tuple[tuple[str, ...], dict[str, float | None]]] = []
    async with scratch_store(directory, url) as backend:
        await backend.store_many(ALICE, ALICE_MEMORIES)

        async def look(state: str) -> None:
            hits = await backend.query(ALICE, QUESTION)
            scores = {hit.key: hit.score for hit in hits}
            ranked = tuple(hit.key for hit in hits)
            if not alone:
                alone.append((ranked, scores))
            base_ranked, base_scores = alone[0]
            same = ranked == base_ranked and all(
                abs((scores[k] or 0.0) - (base_scores[k] or 0.0)) <= 1e-9 for k in ranked
            )
            rows.append(
                [
                    backend.dialect,
                    state,
                    " > ".join(ranked) or "(none)",
                    *(
                        "—" if scores.get(m["key"]) is None else f"{scores[m['key']]:.6f}"
                        for m in ALICE_MEMORIES
                    ),
                    "yes" if same else "**no**",
                ]
            )

        await look("alice alone")
        await store_batches(backend, BOB, neighbour_values(count, "coffee", seed=1))
        await look(f"bob has {count:,} memories with 'coffee'")
        await store_batches(backend, BOB, neighbour_values(2 * count, "tea", seed=2))
        await look(f"… and {2 * count:,} with 'tea'")
        await backend.forget_user(BOB)
        await look("bob forgotten")
    return rows


# --- noisy neighbour -------------------------------------------------------------------------


async def noisy_neighbour(
    directory: Path, url: str | None, neighbours: Sequence[int], repeat: int
) -> list[list[Any]]:
    """Alice's query p50 with bob's memories beside hers, against the same query on a database
    of her own (timed in turn with it: the ratio is from the same moments)."""
    rows: list[list[Any]] = []
    async with scratch_store(directory, url) as backend, scratch_store(directory, url) as alone:
        await backend.store_many(ALICE, ALICE_MEMORIES)
        await alone.store_many(ALICE, ALICE_MEMORIES)

        def ask() -> Awaitable[Any]:
            return backend.query(ALICE, QUESTION)

        def ask_alone() -> Awaitable[Any]:
            return alone.query(ALICE, QUESTION)

        solo, p50 = await timed_pair(ask_alone, ask, repeat)
        rows.append([backend.dialect, "alice alone", "—", ms(p50), ms(solo), "1.00×", loadavg()])
        held = 0
        for target in sorted(neighbours):
            started = time.perf_counter()
            items = neighbour_values(target - held, "coffee", seed=held + 10)
            await store_batches(backend, BOB, items)
            held = target
            fill = time.perf_counter() - started
            solo, p50 = await timed_pair(ask_alone, ask, repeat)
            rows.append(
                [
                    backend.dialect,
                    f"bob holds {held:,} 'coffee' memories",
                    f"{fill:.0f} s",
                    ms(p50),
                    ms(solo),
                    ratio(p50, solo),
                    loadavg(),
                ]
            )
            print(f"noise: {rows[-1]}", file=sys.stderr, flush=True)
            if backend.dialect == "postgresql" and url is not None and backend.schema:
                tables = ", ".join(
                    f'"{backend.schema}".{table}'
                    for table in ("memories", "search_terms", "search_users")
                )
                await pg_execute(url, f"ANALYZE {tables}")
                solo, p50 = await timed_pair(ask_alone, ask, repeat)
                rows.append(
                    [
                        backend.dialect,
                        f"… after ANALYZE ({held:,})",
                        "—",
                        ms(p50),
                        ms(solo),
                        ratio(p50, solo),
                        loadavg(),
                    ]
                )
                print(f"noise: {rows[-1]}", file=sys.stderr, flush=True)
    return rows


# --- scale -----------------------------------------------------------------------------------


def spread_items(users: int, per_user: int, seed: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """``users`` users (``u0000`` ...) with ``per_user`` workload sentences each."""
    rng = random.Random(seed)
    width = max(4, len(str(users - 1)))
    return [
        (
            f"u{u:0{width}d}" if users > 1 else "bench-user",
            [{"key": f"memory-{i:06d}", "value": sentence(rng)} for i in range(per_user)],
        )
        for u in range(users)
    ]


async def fill(backend: SQLBackend, users: int, per_user: int) -> None:
    for user, items in spread_items(users, per_user, seed=7):
        await store_batches(backend, user, items)


async def build_sqlite(path: Path, users: int, per_user: int) -> float:
    """A SQLite file with the data and the floor's index; returns the seconds it took."""
    started = time.perf_counter()
    partial = path.with_name(path.name + ".partial")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{partial}{suffix}").unlink(missing_ok=True)
    async with SQLBackend(f"sqlite:///{partial}") as backend:
        await fill(backend, users, per_user)
    async with aiosqlite.connect(partial) as db:
        for statement in FLOOR_INDEX:
            await db.execute(statement)
        await db.commit()
        await db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    partial.rename(path)
    return time.perf_counter() - started


def questions_for(users: int, count: int) -> dict[str, list[tuple[str, str]]]:
    """workload.py's questions split into rare- and common-word halves, each given a user."""
    work = make_workload(0, questions=count)
    names = [user for user, _ in spread_items(users, 0, seed=7)]
    asked = [(names[(i * 7919) % users], q) for i, q in enumerate(work.questions)]
    return {"rare": asked[0::2], "common": asked[1::2]}


def _scale_result(
    floor_ns: list[int], ours_ns: list[int], matched: list[float]
) -> dict[str, float]:
    """p50s of the floor and of ``query`` (the first five of each untimed) and the median
    matched share."""
    return {
        "floor": pct(floor_ns[5:], 0.5),
        "ours": pct(ours_ns[5:], 0.5),
        "matched": sorted(matched)[len(matched) // 2] if matched else float("nan"),
    }


async def sqlite_scale_row(
    path: Path, questions: dict[str, list[tuple[str, str]]], limit: int
) -> dict[str, dict[str, float]]:
    """Alternate the floor and ``query`` on each question; p50 of each and the matched share."""
    out: dict[str, dict[str, float]] = {}
    async with (
        SQLBackend(f"sqlite:///{path}") as backend,
        aiosqlite.connect(path, isolation_level=None) as db,
    ):
        total = {}
        for user in {user for kind in questions.values() for user, _ in kind}:
            async with db.execute("SELECT count(*) FROM memories WHERE user_id = ?", (user,)) as c:
                total[user] = (await c.fetchone() or (0,))[0]
        for kind, asked in questions.items():
            floor_ns: list[int] = []
            ours_ns: list[int] = []
            matched: list[float] = []
            for n, (user, question) in enumerate(asked):
                terms = query_terms(question)
                expression = fts5_expression(terms)
                if n < 20:
                    async with db.execute(FLOOR_COUNT, (expression, user)) as cursor:
                        found = (await cursor.fetchone() or (0,))[0]
                    matched.append(found / max(total[user], 1))
                start = time.perf_counter_ns()
                async with db.execute(FLOOR_QUERY, (expression, user, limit)) as cursor:
                    [_entry(row, row[6]) for row in await cursor.fetchall()]
                floor_ns.append(time.perf_counter_ns() - start)
                start = time.perf_counter_ns()
                await backend.query(user, question, limit)
                ours_ns.append(time.perf_counter_ns() - start)
            out[kind] = _scale_result(floor_ns, ours_ns, matched)
    return out


async def pg_scale_row(
    url: str,
    users: int,
    per_user: int,
    questions: dict[str, list[tuple[str, str]]],
    limit: int,
    vacuum: bool = False,
) -> tuple[float, dict[str, dict[str, float]]]:
    import asyncpg

    out: dict[str, dict[str, float]] = {}
    async with scratch_store(Path("."), url) as backend:
        started = time.perf_counter()
        await fill(backend, users, per_user)
        seconds = time.perf_counter() - started
        assert backend.schema is not None
        conn = await asyncpg.connect(
            asyncpg_dsn(url), server_settings={"search_path": backend.schema}
        )
        try:
            for statement in PG_FLOOR:
                await conn.execute(statement)
            if vacuum:
                # As autovacuum leaves insert-only tables: statistics, and the visibility map
                # set, so index-only scans (the per-term counts) skip the heap.
                for table in ("memories", "search_terms", "search_users", "bench_floor"):
                    await conn.execute(f"VACUUM ANALYZE {table}")
            for kind, asked in questions.items():
                floor_ns: list[int] = []
                ours_ns: list[int] = []
                matched: list[float] = []
                for n, (user, question) in enumerate(asked):
                    expression = tsquery_expression(query_terms(question))
                    if n < 20:
                        found = await conn.fetchval(PG_FLOOR_COUNT, expression, user)
                        matched.append(found / per_user)
                    start = time.perf_counter_ns()
                    rows = await conn.fetch(PG_FLOOR_QUERY, expression, user, limit)
                    [_entry(row, row[6]) for row in rows]
                    floor_ns.append(time.perf_counter_ns() - start)
                    start = time.perf_counter_ns()
                    await backend.query(user, question, limit)
                    ours_ns.append(time.perf_counter_ns() - start)
                out[kind] = _scale_result(floor_ns, ours_ns, matched)
        finally:
            await conn.close()
    return seconds, out


def parse_counts(text: str, option: str) -> list[int]:
    """``--scale`` and ``--neighbours``: positive whole numbers, comma-separated ("" for
    none)."""
    try:
        return [positive(part) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError:
        raise ValueError(
            f"{option} wants positive whole numbers, comma-separated: {text!r}"
        ) from None


def parse_spread(text: str) -> tuple[int, int] | None:
    """``--spread``: ``TOTAL/USERS`` (memories in all, over that many users), or "" for none."""
    if not text.strip():
        return None
    wanted = f"--spread wants TOTAL/USERS with 1 <= USERS <= TOTAL, or '': {text!r}"
    total_text, _, users_text = text.partition("/")
    try:
        total, users = int(total_text), int(users_text or 1)
    except ValueError:
        raise ValueError(wanted) from None
    if not 1 <= users <= total:
        raise ValueError(wanted)
    return total, users


Results = dict[tuple[int, int], dict[str, dict[str, float]]]


async def scale(args: argparse.Namespace, directory: Path) -> tuple[list[list[Any]], Results]:
    shapes = [(1, size) for size in args.scale_sizes]
    if args.spread_shape is not None:
        total, users = args.spread_shape
        shapes.append((users, total // users))
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    rows: list[list[Any]] = []
    results: Results = {}
    dialect = "sqlite" if args.url is None else "postgresql"
    for users, per_user in shapes:
        questions = questions_for(users, args.spread_questions if users > 1 else args.questions)
        label = f"{users * per_user:,} ({users:,} users)" if users > 1 else f"{per_user:,}"
        prepared = "—"
        if args.url is None:
            name = f"scale-v{DATA_VERSION}-{users}x{per_user}-{HEAD}.db"
            path = (keep or directory) / name
            if path.exists():
                prepared = "kept"
            else:
                prepared = f"{await build_sqlite(path, users, per_user):.0f} s"
            result = await sqlite_scale_row(path, questions, args.limit)
            if keep is None:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
        else:
            seconds, result = await pg_scale_row(
                args.url, users, per_user, questions, args.limit, args.vacuum
            )
            prepared = f"{seconds:.0f} s"
        results[(users, per_user)] = result
        for kind in ("rare", "common"):
            r = result[kind]
            rows.append(
                [
                    dialect,
                    label,
                    f"{kind} words",
                    f"{r['matched']:.1%}",
                    ms(r["floor"]),
                    ms(r["ours"]),
                    ratio(r["ours"], r["floor"]),
                    prepared,
                    loadavg(),
                ]
            )
        print(f"scale: {rows[-2]}\nscale: {rows[-1]}", file=sys.stderr, flush=True)
    return rows, results


def growth_rows(results: Results) -> list[list[Any]]:
    """Growth from the smallest to the largest one-user size, and the spread against alone."""
    single = sorted(per for users, per in results if users == 1)
    rows: list[list[Any]] = []
    if len(single) >= 2:
        small, large = results[(1, single[0])], results[(1, single[-1])]
        for kind in ("rare", "common"):
            rows.append(
                [
                    f"{single[0]:,} → {single[-1]:,} memories of one user",
                    f"{kind} words",
                    ratio(large[kind]["floor"], small[kind]["floor"]),
                    ratio(large[kind]["ours"], small[kind]["ours"]),
                ]
            )
    for (users, per_user), result in results.items():
        if users > 1 and (1, per_user) in results:
            alone = results[(1, per_user)]
            for kind in ("rare", "common"):
                rows.append(
                    [
                        f"{per_user:,} memories alone → among {users * per_user:,} of "
                        f"{users:,} users",
                        f"{kind} words",
                        ratio(result[kind]["floor"], alone[kind]["floor"]),
                        ratio(result[kind]["ours"], alone[kind]["ours"]),
                    ]
                )
    return rows


# --- main ------------------------------------------------------------------------------------


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="side,noise,scale", help="side, noise, scale")
    parser.add_argument("--url", help="PostgreSQL URL (default: SQLite files on tmpfs)")
    parser.add_argument("--dir", help="where SQLite scratch files go (default /dev/shm)")
    parser.add_argument(
        "--side-count", type=int, default=20, help="bob's 'coffee' memories in the side part"
    )
    parser.add_argument(
        "--neighbours", default="50000,500000", help="bob's matching memories, comma-separated"
    )
    parser.add_argument("--repeat", type=int, default=300, help="queries timed per p50 (noise)")
    parser.add_argument(
        "--scale", default="1000,10000,100000", help="one user's memory counts, comma-separated"
    )
    parser.add_argument(
        "--spread", default="1000000/1000", help="TOTAL/USERS for the spread row ('' = none)"
    )
    parser.add_argument("--questions", type=int, default=400, help="questions per one-user row")
    parser.add_argument(
        "--spread-questions",
        type=int,
        default=40,
        help="questions for the spread row (today each scans every user's matches: seconds)",
    )
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="PostgreSQL scale: VACUUM ANALYZE the filled tables first, as autovacuum would",
    )
    parser.add_argument("--keep", help="keep and reuse the scale part's SQLite files here")
    parser.add_argument(
        "--rebuild", action="store_true", help="delete the kept scale-v*.db files first"
    )
    parser.add_argument("--json", help="write the tables' rows here")
    args = parser.parse_args(argv)
    parts = {part.strip() for part in args.parts.split(",") if part.strip()}
    if unknown := parts - {"side", "noise", "scale"}:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    try:
        args.scale_sizes = parse_counts(args.scale, "--scale")
        args.neighbour_counts = parse_counts(args.neighbours, "--neighbours")
        args.spread_shape = parse_spread(args.spread)
    except ValueError as exc:
        parser.error(str(exc))
    if args.rebuild and args.keep:
        for kept in Path(args.keep).glob("scale-v*.db*"):
            kept.unlink()
    out: list[str] = [f"asyncmem at schema {HEAD}; loadavg at start {loadavg()}", ""]
    report: dict[str, Any] = {}
    with scratch_dir(args.dir) as directory:
        if "side" in parts:
            rows = await side_channel(directory, args.url, args.side_count)
            report["side"] = rows
            out += [
                f"### Side channel: alice's scores for {QUESTION!r}",
                "",
                table(
                    [
                        "database",
                        "state",
                        "alice's ranking",
                        *(m["key"] for m in ALICE_MEMORIES),
                        "same as alone",
                    ],
                    rows,
                ),
                "",
            ]
        if "noise" in parts:
            neighbours = args.neighbour_counts
            rows = await noisy_neighbour(directory, args.url, neighbours, args.repeat)
            report["noise"] = rows
            out += [
                f"### Noisy neighbour: alice's query p50 over her 2 memories ({args.repeat} "
                "queries each, in turn with the same query on a database of her own)",
                "",
                table(
                    [
                        "database",
                        "state",
                        "bob's fill",
                        "query p50",
                        "alone, same moments",
                        "ratio",
                        "loadavg",
                    ],
                    rows,
                ),
                "",
            ]
        if "scale" in parts:
            rows, results = await scale(args, directory)
            report["scale"] = rows
            growth = growth_rows(results)
            report["growth"] = growth
            out += [
                f"### Scale: query p50 against the floor ({args.questions // 2} questions of "
                f"each kind per one-user row, {args.spread_questions // 2} for the spread row; "
                "interleaved)",
                "",
                table(
                    [
                        "database",
                        "memories",
                        "questions",
                        "matched",
                        "floor p50",
                        "asyncmem p50",
                        "ratio",
                        "prepared",
                        "loadavg",
                    ],
                    rows,
                ),
                "",
                "### Growth of the query p50",
                "",
                table(["from → to", "questions", "floor", "asyncmem"], growth)
                if growth
                else "(needs two one-user sizes, or a spread row and its per-user size)",
                "",
            ]
    print("\n".join(out))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
