"""Relevance of ``query`` on a labelled set, replayed the way an agent lives it.

A data set is a JSON object (optionally gzip'd) ``{"memories": [...], "queries": [...]}``: a
memory is ``{"user_id", "key", "value", "metadata"}``, a query is ``{"user_id", "question",
"evidence": [keys], "category"}`` (the format of ``../shared/data/realmem/``). A query may carry
``cutoff_<field>``: it was asked when the user's memories with ``metadata[<field>] < cutoff``
existed, and nothing later. The replay stores each user's memories in ``<field>`` order, one
``store`` call each, and asks every question as soon as everything before its cutoff is stored,
so write-time indexing (neighbour context) never sees the future. Queries without a cutoff are
asked after all of their user's memories are stored.

Reported, overall and per category: any@k (at least one evidence key in the top k), recall@1/5/10
(the share of the evidence keys in the top k; recall@10 is "frac@10"), MRR@10, and the p50/p95 of
``store`` and ``query`` calls. On SQLite it then also times a plain FTS5 bm25 query (the core
store's statement, straight on aiosqlite) against ``query`` on the final database with the same
questions, so the cost of re-ranking is a ratio measured on the same data. ``--baseline`` also
scores that plain FTS5 query's relevance on the same rows (past only, by a metadata filter on
the cutoff field: the plain index has no write-time context, so the shortcut is faithful),
with the Porter stemmer and without it.

    python benchmarks/relevance.py ../shared/data/realmem/realmem-turns.json.gz
    python benchmarks/relevance.py DATA.json.gz --url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from asyncmem import MemoryBackend, SQLBackend
from asyncmem.sql import search, statements
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.search import fts5_expression, query_terms
from benchmarks.harness import positive

KS = (1, 5, 10)
CONVERSATION_KEYS = ("session", "speaker", "date")
PLAIN_TABLE = "bench_plain_fts"
STEMMED = "porter unicode61 remove_diacritics 2"
"""The core store's FTS5 tokenizer (revision 0001)."""
UNSTEMMED = "unicode61 remove_diacritics 2"
"""``--baseline``'s second index: the same without the Porter stemmer (issue 21 reports it
ahead of the stemmed one on recall@1 on a set of long assistant replies)."""


def plain_index(tokenize: str) -> list[str]:
    """The statements that build the plain index (key and value) with FTS5's ``tokenize``."""
    return [
        f"DROP TABLE IF EXISTS {PLAIN_TABLE}",
        f"CREATE VIRTUAL TABLE {PLAIN_TABLE} USING fts5(key, value, content='memories', "
        f"content_rowid='id', tokenize='{tokenize}')",
        f"INSERT INTO {PLAIN_TABLE}({PLAIN_TABLE}) VALUES ('rebuild')",
    ]


PLAIN_INDEX = plain_index(STEMMED)
"""The core store's index (revision 0001), built beside ours on the same rows: key and value."""
PLAIN_FTS5 = (
    f"SELECT m.key, m.value, m.metadata FROM {PLAIN_TABLE} JOIN memories AS m "
    f"ON m.id = {PLAIN_TABLE}.rowid WHERE {PLAIN_TABLE} MATCH ? AND m.user_id = ? "
    f"ORDER BY bm25({PLAIN_TABLE}), m.id LIMIT ?"
)
"""The core store's query: FTS5 bm25 over key and value, no re-ranking, no context."""
TWIN_SUFFIX = "~plain"


@dataclass
class Scores:
    """Per-query hit measures, summed so that a mean is one division away."""

    n: int = 0
    any_at: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))
    recall_at: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))
    mrr: float = 0.0

    def add(self, ranked: Sequence[str], evidence: Iterable[str]) -> None:
        wanted = set(evidence)
        if not wanted:
            return
        self.n += 1
        for k in KS:
            found = wanted.intersection(ranked[:k])
            self.any_at[k] += bool(found)
            self.recall_at[k] += len(found) / len(wanted)
        for rank, key in enumerate(ranked[:10], 1):
            if key in wanted:
                self.mrr += 1 / rank
                break

    def row(self) -> dict[str, float]:
        n = max(self.n, 1)
        return {
            "n": self.n,
            "any@10": self.any_at[10] / n,
            "frac@10": self.recall_at[10] / n,
            "recall@1": self.recall_at[1] / n,
            "recall@5": self.recall_at[5] / n,
            "mrr@10": self.mrr / n,
        }


@dataclass
class Run:
    scores: dict[str, Scores] = field(default_factory=lambda: defaultdict(Scores))
    store_ns: list[int] = field(default_factory=list)
    query_ns: list[int] = field(default_factory=list)
    twin_ns: list[int] = field(default_factory=list)
    questions: list[tuple[str, str]] = field(default_factory=list)


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def cutoff_field(queries: Sequence[Mapping[str, Any]]) -> str | None:
    """The metadata field the queries' cutoffs refer to (``cutoff_seq`` → ``seq``)."""
    for query in queries:
        for name in query:
            if name.startswith("cutoff_"):
                return name.removeprefix("cutoff_")
    return None


def first_turns(data: Mapping[str, Any], count: int) -> dict[str, Any]:
    """The first user's first ``count`` memories (in the order of the cutoff field) and the
    questions asked by then whose evidence lies in them: one long chat, for latency at one
    conversation's scale (issue 21's 800-message chat)."""
    order = cutoff_field(data["queries"]) or "seq"
    user = min(memory["user_id"] for memory in data["memories"])
    memories = sorted(
        (memory for memory in data["memories"] if memory["user_id"] == user),
        key=lambda memory: float(memory["metadata"][order]),
    )[:count]
    kept = {memory["key"] for memory in memories}
    queries = [
        query
        for query in data["queries"]
        if query["user_id"] == user
        and set(query["evidence"]) <= kept
        and float(query.get(f"cutoff_{order}") or 0) <= count
    ]
    return {**data, "memories": memories, "queries": queries}


def strip(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in CONVERSATION_KEYS}


async def replay(
    backend: MemoryBackend,
    data: Mapping[str, Any],
    *,
    limit: int,
    plain: bool,
    max_users: int | None,
    twin: bool = False,
) -> Run:
    """Store each user's memories in order, asking each question once its past is stored."""
    run = Run()
    order = cutoff_field(data["queries"])
    memories: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for memory in data["memories"]:
        memories[memory["user_id"]].append(memory)
    queries: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for query in data["queries"]:
        queries[query["user_id"]].append(query)
    users = sorted(memories.keys() | queries.keys())[:max_users]

    def position(memory: Mapping[str, Any]) -> float:
        return float(memory["metadata"][order]) if order else 0.0

    def cutoff(query: Mapping[str, Any]) -> float:
        value = query.get(f"cutoff_{order}") if order else None
        return float("inf") if value is None else float(value)

    async def ask(query: Mapping[str, Any]) -> None:
        start = time.perf_counter_ns()
        hits = await backend.query(query["user_id"], query["question"], limit=limit)
        run.query_ns.append(time.perf_counter_ns() - start)
        ranked = [hit.key for hit in hits]
        for name in ("all", query.get("category") or "uncategorised"):
            run.scores[name].add(ranked, query["evidence"])
        run.questions.append((query["user_id"], query["question"]))

    for user in users:
        pending = sorted(queries[user], key=cutoff)
        asked = 0
        for memory in sorted(memories[user], key=position):
            while asked < len(pending) and cutoff(pending[asked]) <= position(memory):
                await ask(pending[asked])
                asked += 1
            metadata = memory.get("metadata") or {}
            start = time.perf_counter_ns()
            await backend.store(
                user, memory["key"], memory["value"], strip(metadata) if plain else metadata
            )
            run.store_ns.append(time.perf_counter_ns() - start)
            if twin:
                start = time.perf_counter_ns()
                await backend.store(
                    user + TWIN_SUFFIX, memory["key"], memory["value"], strip(metadata)
                )
                run.twin_ns.append(time.perf_counter_ns() - start)
        for query in pending[asked:]:
            await ask(query)
    return run


async def plain_fts5_ns(
    path: str,
    backend: MemoryBackend,
    questions: Sequence[tuple[str, str]],
    limit: int,
    rounds: int = 1,
) -> tuple[list[int], list[int]]:
    """Time the core store's plain FTS5 query and ``backend.query`` on the same questions,
    every question once per round.

    The plain query runs on an FTS5 table of revision 0001's shape (key and value only) built
    from the same rows in the same file, alternating with ``backend.query``, so machine noise
    hits both alike.
    """
    import aiosqlite

    floor: list[int] = []
    ours: list[int] = []
    async with aiosqlite.connect(path) as db:
        for statement in PLAIN_INDEX:
            await db.execute(statement)
        await db.commit()
        for user, question in [pair for _ in range(rounds) for pair in questions]:
            terms = query_terms(question)
            if not terms:
                continue
            start = time.perf_counter_ns()
            async with db.execute(PLAIN_FTS5, (fts5_expression(terms), user, limit)) as cursor:
                await cursor.fetchall()
            floor.append(time.perf_counter_ns() - start)
            start = time.perf_counter_ns()
            await backend.query(user, question, limit=limit)
            ours.append(time.perf_counter_ns() - start)
    return floor, ours


async def plain_fts5_run(
    path: str,
    data: Mapping[str, Any],
    limit: int,
    max_users: int | None,
    index: Sequence[str] = PLAIN_INDEX,
) -> Run:
    """Relevance of the core store's plain FTS5 query on the same rows, past only.

    The plain index has no write-time context, so asking on the final database with the
    cutoff as a metadata filter is faithful (its document frequencies count later rows too,
    as the core store's table did with every user's rows).
    """
    import aiosqlite

    run = Run()
    order = cutoff_field(data["queries"])
    users = set(sorted({m["user_id"] for m in data["memories"]})[:max_users])
    past = f" AND json_extract(m.metadata, '$.{order}') < ?" if order else ""
    statement = PLAIN_FTS5.replace(" ORDER BY", past + " ORDER BY")
    async with aiosqlite.connect(path) as db:
        for sql in index:
            await db.execute(sql)
        await db.commit()
        for query in data["queries"]:
            if query["user_id"] not in users:
                continue
            terms = query_terms(query["question"])
            ranked: list[str] = []
            if terms:
                cutoff = query.get(f"cutoff_{order}") if order else None
                bound: tuple[Any, ...] = (fts5_expression(terms), query["user_id"])
                if order:
                    bound += (float("inf") if cutoff is None else cutoff,)
                async with db.execute(statement, (*bound, limit)) as cursor:
                    ranked = [row[0] for row in await cursor.fetchall()]
            for name in ("all", query.get("category") or "uncategorised"):
                run.scores[name].add(ranked, query["evidence"])
    return run


@asynccontextmanager
async def scratch_backend(url: str | None) -> AsyncIterator[SQLBackend]:
    """An open store on a temporary SQLite file, or at ``url`` (a PostgreSQL URL gets a
    throw-away schema, dropped afterwards)."""
    with tempfile.TemporaryDirectory() as tmp:
        schema = None
        if url and url.startswith("postgresql"):
            schema = f"bench_{uuid.uuid4().hex[:12]}"
        try:
            async with SQLBackend(
                url or f"sqlite:///{tmp}/memory.db", schema=schema, auto_migrate=True
            ) as backend:
                yield backend
        finally:
            if schema is not None and url is not None:
                engine = make_engine(normalize_url(url))
                try:
                    async with engine.begin() as conn:
                        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
                finally:
                    await engine.dispose()


def ms(samples: Sequence[int], q: float = 0.5) -> float:
    if not samples:
        return float("nan")
    if q == 0.5:
        return statistics.median(samples) / 1e6
    return statistics.quantiles(samples, n=100)[round(q * 100) - 1] / 1e6


def table(name: str, run: Run) -> str:
    head = "| set | category | n | any@10 | frac@10 | recall@1 | recall@5 | MRR@10 |"
    lines = [head, "|" + "---|" * 8]
    names = ["all", *sorted(k for k in run.scores if k != "all")]
    for category in names:
        r = run.scores[category].row()
        lines.append(
            f"| {name} | {category} | {r['n']} | {r['any@10']:.3f} | {r['frac@10']:.3f} | "
            f"{r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['mrr@10']:.3f} |"
        )
    return "\n".join(lines)


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="+", type=Path, help="labelled JSON(.gz) files")
    parser.add_argument("--url", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--limit", type=positive, default=10)
    parser.add_argument("--users", type=positive, default=None, help="only the first N users")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="store without the conversation keys (session, speaker, date)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=NUMBER",
        help="override a ranking constant of asyncmem.sql.search (to measure a choice)",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the plain-FTS5 latency comparison"
    )
    parser.add_argument(
        "--rounds",
        type=positive,
        default=1,
        help="ask every question this many times in the plain-FTS5 latency comparison (the "
        "shipped set's 224 questions take well under a second: 10 rounds steady its ratio)",
    )
    parser.add_argument(
        "--twin",
        action="store_true",
        help="after each store, store the same memory without conversation keys under a twin "
        "user, to time a plain store against a store with session on the same data",
    )
    parser.add_argument(
        "--one-user",
        action="store_true",
        help="give every memory and question to one user (latency at one user's scale; "
        "relevance then searches other users' memories too)",
    )
    parser.add_argument(
        "--first-turns",
        type=positive,
        metavar="N",
        help="only the first user's first N memories and the questions answered in them "
        "(issue 21's long chat: --first-turns 800 on realmem-turns.json.gz, 83 questions)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="SQLite: also score the core store's plain FTS5 query on the same rows (past "
        "only), with and without the Porter stemmer",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    for assignment in args.set:
        name, _, number = assignment.partition("=")
        if not hasattr(search, name) or not name.isupper():
            parser.error(f"asyncmem.sql.search has no constant {name}")
        setattr(search, name, type(getattr(search, name))(float(number)))
    # The query statements embed the weights when compiled: compile them again.
    statements.statements_for.cache_clear()
    statements.filtered_statement.cache_clear()

    results: dict[str, Any] = {}
    for path in args.data:
        data = load(path)
        if args.one_user:
            for item in (*data["memories"], *data["queries"]):
                item["user_id"] = "one"
        name = path.name.split(".")[0]
        if args.first_turns:
            data = first_turns(data, args.first_turns)
            name = f"{name}, first {args.first_turns} turns"
        async with scratch_backend(args.url) as backend:
            started = time.perf_counter()
            run = await replay(
                backend,
                data,
                limit=args.limit,
                plain=args.plain,
                max_users=args.users,
                twin=args.twin,
            )
            elapsed = time.perf_counter() - started
            floor: list[int] = []
            ours: list[int] = []
            if backend.dialect == "sqlite" and backend.path and not args.no_floor:
                floor, ours = await plain_fts5_ns(
                    backend.path, backend, run.questions, args.limit, args.rounds
                )
            baseline: Run | None = None
            unstemmed: Run | None = None
            if backend.dialect == "sqlite" and backend.path and args.baseline:
                baseline = await plain_fts5_run(backend.path, data, args.limit, args.users)
                unstemmed = await plain_fts5_run(
                    backend.path, data, args.limit, args.users, plain_index(UNSTEMMED)
                )
        print(f"\n## {name} ({backend.backend_name}, replay {elapsed:.0f} s)\n")
        print(table(name, run))
        if baseline is not None and unstemmed is not None:
            print(f"\nplain FTS5 on the same rows:\n\n{table(name, baseline)}")
            print(f"\nplain FTS5 without stemming:\n\n{table(name, unstemmed)}")
        timing = {
            "store_p50_ms": ms(run.store_ns),
            "store_p95_ms": ms(run.store_ns, 0.95),
            "query_p50_ms": ms(run.query_ns),
            "query_p95_ms": ms(run.query_ns, 0.95),
        }
        if run.twin_ns:
            timing |= {
                "twin_plain_store_p50_ms": ms(run.twin_ns),
                "store_ratio": ms(run.store_ns) / ms(run.twin_ns),
            }
        if floor:
            timing |= {
                "final_query_p50_ms": ms(ours),
                "final_plain_fts5_p50_ms": ms(floor),
                "final_query_ratio": ms(ours) / ms(floor),
            }
        print()
        print(", ".join(f"{k} {v:.3f}" for k, v in timing.items()))
        results[name] = {
            "backend": backend.backend_name,
            "plain": args.plain,
            "set": args.set,
            "scores": {k: v.row() for k, v in run.scores.items()},
            "timing": timing,
            "plain_fts5_scores": (
                {k: v.row() for k, v in baseline.scores.items()} if baseline else None
            ),
            "unstemmed_fts5_scores": (
                {k: v.row() for k, v in unstemmed.scores.items()} if unstemmed else None
            ),
        }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
