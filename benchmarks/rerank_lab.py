"""Stage two offline: capture each question's candidates once, then re-rank them in seconds.

``capture`` replays a labelled set as ``relevance.py`` does (same replay, same past-only
cutoffs), but with :func:`~asyncmem.sql.search.rerank` replaced by the database's own order
and ``CANDIDATE_FACTOR`` candidates per ``limit`` (default 10: the top 100), and pickles what
stage one returned for every question: terms, scores, metadata, values, keys, evidence.
``score`` re-ranks the captured candidates with today's ``rerank`` (``--set NAME=NUMBER``
overrides a constant of ``asyncmem.sql.search`` or ``asyncmem.sql.coverage``) and prints
recall@1/5/10 and MRR@10; with today's constants it reproduces the replay's numbers.

    python benchmarks/rerank_lab.py capture DATA.json.gz /tmp/turns.pkl [--url URL]
    python benchmarks/rerank_lab.py score /tmp/turns.pkl [--pool 50] [--set COVERAGE_WEIGHT=0]

The pickles hold the data set's text: keep them out of the project.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from asyncmem.sql import coverage, search, store
from benchmarks import relevance

Candidate = tuple[str, float, Mapping[str, Any], str]


async def capture(data_path: Path, out: Path, url: str | None, factor: int) -> None:
    search.CANDIDATE_FACTOR = factor
    last: dict[str, Any] = {}

    def database_order(
        terms: Sequence[str],
        scores: Sequence[float],
        metadata: Sequence[Mapping[str, Any]],
        limit: int,
        *,
        values: Sequence[str] | None = None,
        temporal: bool = False,
    ) -> list[tuple[int, float]]:
        last.update(terms=list(terms), temporal=temporal)
        return list(enumerate(scores))

    store.rerank = database_order  # type: ignore[assignment]
    data = relevance.load(data_path)
    captured: list[dict[str, Any]] = []
    async with relevance.scratch_backend(url) as backend:
        query = backend.query

        async def capturing(user_id: str, text: str, limit: int = 10) -> Any:
            hits = await query(user_id, text, limit)
            candidates = [(h.key, h.score, h.metadata, h.value) for h in hits]
            captured.append(
                {"user_id": user_id, "question": text, **last, "candidates": candidates}
            )
            return hits

        backend.query = capturing  # type: ignore[method-assign]
        add = relevance.Scores.add

        def labelled(self: relevance.Scores, ranked: Sequence[str], evidence: Any) -> None:
            captured[-1]["evidence"] = list(evidence)
            add(self, ranked, evidence)

        relevance.Scores.add = labelled  # type: ignore[method-assign]
        await relevance.replay(backend, data, limit=10, plain=False, max_users=None)
    categories = {
        (q["user_id"], q["question"], tuple(q["evidence"])): q.get("category") or "uncategorised"
        for q in data["queries"]
    }
    for item in captured:
        key = (item["user_id"], item["question"], tuple(item["evidence"]))
        item["category"] = categories.get(key, "uncategorised")
    out.write_bytes(pickle.dumps(captured))
    print(f"{len(captured)} questions captured")


def score(path: Path, pool: int) -> dict[str, list[float]]:
    """Sums per category: n, recall@1, @5, @10, MRR@10, and seconds spent in ``rerank``."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0] * 6)
    for item in pickle.loads(path.read_bytes()):
        candidates: list[Candidate] = item["candidates"][:pool]
        wanted = set(item["evidence"])
        start = time.perf_counter()
        order = search.rerank(
            item["terms"],
            [c[1] for c in candidates],
            [c[2] for c in candidates],
            10,
            values=[c[3] for c in candidates],
            temporal=item["temporal"],
        )
        spent = time.perf_counter() - start
        ranked = [candidates[i][0] for i, _ in order]
        mrr = next((1 / r for r, key in enumerate(ranked, 1) if key in wanted), 0.0)
        for name in ("all", item["category"]):
            row = totals[name]
            row[0] += 1
            for j, k in enumerate((1, 5, 10), 1):
                row[j] += len(wanted.intersection(ranked[:k])) / len(wanted)
            row[4] += mrr
            row[5] += spent
    return totals


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    take = commands.add_parser("capture")
    take.add_argument("data", type=Path)
    take.add_argument("out", type=Path)
    take.add_argument("--url")
    take.add_argument("--factor", type=int, default=10)
    rank = commands.add_parser("score")
    rank.add_argument("captured", type=Path, nargs="+")
    rank.add_argument("--pool", type=int, default=50, help="candidates re-ranked (5 × 10 now)")
    rank.add_argument("--set", action="append", default=[], metavar="NAME=NUMBER")
    args = parser.parse_args(argv)
    if args.command == "capture":
        asyncio.run(capture(args.data, args.out, args.url, args.factor))
        return 0
    for assignment in args.set:
        name, _, number = assignment.partition("=")
        module = next((m for m in (search, coverage) if hasattr(m, name) and name.isupper()), None)
        if module is None:
            parser.error(f"no ranking constant {name}")
        setattr(module, name, type(getattr(module, name))(float(number)))
    print("| set | category | n | recall@1 | recall@5 | recall@10 | MRR@10 | rerank ms, mean |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.captured:
        totals = score(path, args.pool)
        for name in ["all", *sorted(k for k in totals if k != "all")]:
            n, *sums = totals[name]
            r1, r5, r10, mrr, seconds = (value / n for value in sums)
            print(
                f"| {path.stem} | {name} | {n:.0f} | {r1:.3f} | {r5:.3f} | {r10:.3f} | "
                f"{mrr:.3f} | {seconds * 1e3:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
