"""Relevance of ``query`` on a labelled data set: recall@1/5/10 and MRR@10.

A data set is a JSON object ``{"source", "license", "memories", "queries"}`` (optionally
gzip'd), or JSON Lines with one memory (``user_id, key, value, metadata``) or one query
(``user_id, question, evidence, category``) per line. A query's ``evidence`` lists the keys of
the memories that answer it.

Only the past may answer: when a query carries ``cutoff_seq`` (or ``cutoff_session_index``),
only memories whose ``metadata.seq`` (``metadata.session_index``) is below it may be found. The
evaluator replays each user's memories in that order and asks each question as soon as
everything before its cutoff is stored, as an agent lives it, so nothing built at write time
can leak the future. Memories without the order field count as the earliest; queries without a
cutoff are asked after everything is stored.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from asyncmem.backend import MemoryBackend
from asyncmem.errors import InvalidInputError

__all__ = [
    "SHIPPED_DATASET",
    "Dataset",
    "LabeledMemory",
    "LabeledQuery",
    "RelevanceResult",
    "load_dataset",
    "measure_relevance",
    "recall_at",
    "reciprocal_rank",
    "shipped_dataset",
]

SHIPPED_DATASET = "asyncmem-conversations-v1.json"
"""File name of the labelled set inside ``asyncmem/evaluation/data``."""

_CUTOFFS = (("cutoff_seq", "seq"), ("cutoff_session_index", "session_index"))
RANKS = (1, 5, 10)


@dataclass(frozen=True, slots=True)
class LabeledMemory:
    """One memory of a labelled set: stored before the questions are asked."""

    user_id: str
    key: str
    value: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LabeledQuery:
    """A question of a labelled set and the keys of the memories that answer it."""

    user_id: str
    question: str
    evidence: tuple[str, ...]
    category: str = ""
    cutoff: tuple[str, float] | None = None
    """``(metadata field, value)``: only memories whose field is below the value may answer."""


@dataclass(frozen=True, slots=True)
class Dataset:
    """A labelled set: memories to store and questions whose answers are known."""

    name: str
    memories: tuple[LabeledMemory, ...]
    queries: tuple[LabeledQuery, ...]
    source: str = ""
    license: str = ""


def _fail(where: str, problem: str) -> InvalidInputError:
    return InvalidInputError(f"data set {where}: {problem}")


def _memory(raw: object, where: str) -> LabeledMemory:
    if not isinstance(raw, dict):
        raise _fail(where, "a memory must be a JSON object")
    for name in ("user_id", "key"):
        if not isinstance(raw.get(name), str) or not raw[name]:
            raise _fail(where, f"a memory needs a non-empty string {name!r}")
    if not isinstance(raw.get("value"), str):
        raise _fail(where, "a memory needs a string 'value'")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise _fail(where, "a memory's metadata must be a JSON object")
    return LabeledMemory(raw["user_id"], raw["key"], raw["value"], metadata)


def _query(raw: object, where: str) -> LabeledQuery:
    if not isinstance(raw, dict):
        raise _fail(where, "a query must be a JSON object")
    if not isinstance(raw.get("user_id"), str) or not isinstance(raw.get("question"), str):
        raise _fail(where, "a query needs string 'user_id' and 'question'")
    evidence = raw.get("evidence")
    if not isinstance(evidence, list) or not all(isinstance(k, str) for k in evidence):
        raise _fail(where, "a query's 'evidence' must be a list of keys")
    cutoff: tuple[str, float] | None = None
    for name, order_field in _CUTOFFS:
        value = raw.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _fail(where, f"{name!r} must be a number")
            cutoff = (order_field, float(value))
            break
    category = raw.get("category") or ""
    return LabeledQuery(raw["user_id"], raw["question"], tuple(evidence), str(category), cutoff)


def _from_records(records: Iterable[tuple[str, object]], name: str) -> tuple[list[Any], list[Any]]:
    memories: list[LabeledMemory] = []
    queries: list[LabeledQuery] = []
    for where, raw in records:
        if isinstance(raw, dict) and "question" in raw:
            queries.append(_query(raw, where))
        else:
            memories.append(_memory(raw, where))
    return memories, queries


def parse_dataset(text: str, name: str) -> Dataset:
    """Parse a data set from its JSON or JSON Lines text."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict) and ("memories" in whole or "queries" in whole):
            mem_raw = whole.get("memories", [])
            q_raw = whole.get("queries", [])
            if not isinstance(mem_raw, list) or not isinstance(q_raw, list):
                raise _fail(name, "'memories' and 'queries' must be lists")
            memories = [_memory(m, f"{name} memory {i}") for i, m in enumerate(mem_raw)]
            queries = [_query(q, f"{name} query {i}") for i, q in enumerate(q_raw)]
            return _build(name, memories, queries, whole)
    records: list[tuple[str, object]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append((f"{name} line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise _fail(f"{name} line {number}", f"not JSON ({exc.msg})") from None
    memories, queries = _from_records(records, name)
    return _build(name, memories, queries, {})


def _build(
    name: str, memories: list[LabeledMemory], queries: list[LabeledQuery], whole: dict[str, Any]
) -> Dataset:
    if not memories or not queries:
        raise _fail(name, "needs at least one memory and one query")
    return Dataset(
        name=name,
        memories=tuple(memories),
        queries=tuple(queries),
        source=str(whole.get("source", "")),
        license=str(whole.get("license", "")),
    )


def load_dataset(path: str | Path) -> Dataset:
    """Read a labelled data set: JSON or JSON Lines, gzip'd when the name ends in ``.gz``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read data set {path.name}: {type(exc).__name__}") from exc
    return parse_dataset(text, path.name)


def shipped_dataset() -> Dataset:
    """The labelled set that ships with asyncmem (see ``evaluation/data/README.md``)."""
    text = (
        resources.files("asyncmem.evaluation")
        .joinpath("data", SHIPPED_DATASET)
        .read_text(encoding="utf-8")
    )
    return parse_dataset(text, SHIPPED_DATASET)


def recall_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """Share of the evidence keys found in the first ``k`` results."""
    wanted = set(evidence)
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def reciprocal_rank(ranked: Sequence[str], evidence: Sequence[str], k: int = 10) -> float:
    """1 / rank of the first evidence key within the first ``k`` results, else 0."""
    wanted = set(evidence)
    for rank, key in enumerate(ranked[:k], 1):
        if key in wanted:
            return 1.0 / rank
    return 0.0


@dataclass(frozen=True, slots=True)
class RelevanceResult:
    """Mean recall@k (share of a question's evidence keys in the top k) and MRR@10."""

    dataset: str
    memories: int
    queries: int
    recall_at_1: float
    recall_at_5: float
    recall_at_10: float
    mrr_at_10: float
    recall_at_10_by_category: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """This result as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "dataset": self.dataset,
            "memories": self.memories,
            "queries": self.queries,
            "recall_at_1": self.recall_at_1,
            "recall_at_5": self.recall_at_5,
            "recall_at_10": self.recall_at_10,
            "mrr_at_10": self.mrr_at_10,
            "recall_at_10_by_category": dict(self.recall_at_10_by_category),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RelevanceResult:
        """The result that :meth:`to_dict` turned into ``data``."""
        return cls(
            dataset=str(data["dataset"]),
            memories=int(data["memories"]),
            queries=int(data["queries"]),
            recall_at_1=float(data["recall_at_1"]),
            recall_at_5=float(data["recall_at_5"]),
            recall_at_10=float(data["recall_at_10"]),
            mrr_at_10=float(data["mrr_at_10"]),
            recall_at_10_by_category={
                str(k): float(v) for k, v in data.get("recall_at_10_by_category", {}).items()
            },
        )


def score_rankings(
    dataset_name: str,
    memories: int,
    judged: Sequence[tuple[LabeledQuery, Sequence[str]]],
) -> RelevanceResult:
    """Aggregate ranked keys per query into a :class:`RelevanceResult`."""
    sums = dict.fromkeys(RANKS, 0.0)
    mrr = 0.0
    by_category: dict[str, list[float]] = defaultdict(list)
    for query, ranked in judged:
        for k in RANKS:
            sums[k] += recall_at(ranked, query.evidence, k)
        mrr += reciprocal_rank(ranked, query.evidence, 10)
        by_category[query.category or "uncategorized"].append(recall_at(ranked, query.evidence, 10))
    n = len(judged) or 1
    return RelevanceResult(
        dataset=dataset_name,
        memories=memories,
        queries=len(judged),
        recall_at_1=sums[1] / n,
        recall_at_5=sums[5] / n,
        recall_at_10=sums[10] / n,
        mrr_at_10=mrr / n,
        recall_at_10_by_category={c: sum(v) / len(v) for c, v in sorted(by_category.items())},
    )


def _order(memory: LabeledMemory, order_field: str) -> float:
    value = memory.metadata.get(order_field)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return float("-inf")
    return float(value)


async def measure_relevance(
    backend: MemoryBackend,
    dataset: Dataset,
    user_for: Callable[[str], str],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> RelevanceResult:
    """Store ``dataset`` under the users ``user_for(dataset user)`` and ask its questions.

    Queries with no evidence are skipped (nothing could be right). Each user's memories are
    stored in data set order, or replayed in cutoff order when queries carry cutoffs.
    """
    by_user: dict[str, list[LabeledMemory]] = defaultdict(list)
    for memory in dataset.memories:
        by_user[memory.user_id].append(memory)
    questions: dict[str, list[LabeledQuery]] = defaultdict(list)
    for query in dataset.queries:
        if query.evidence:
            questions[query.user_id].append(query)
    total = len(dataset.memories) + sum(len(q) for q in questions.values())
    done = 0
    judged: list[tuple[LabeledQuery, Sequence[str]]] = []

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for user in sorted(set(by_user) | set(questions)):
        target = user_for(user)
        pending = list(by_user.get(user, []))
        asks = questions.get(user, [])
        cut = [q for q in asks if q.cutoff is not None]
        later = [q for q in asks if q.cutoff is None]
        order_field = cut[0].cutoff[0] if cut and cut[0].cutoff else None
        if order_field is not None:
            pending.sort(key=lambda m: _order(m, order_field))
            cut.sort(key=lambda q: q.cutoff[1] if q.cutoff else 0.0)
        stored = 0
        for query in cut:
            assert query.cutoff is not None
            field_name, limit = query.cutoff
            while stored < len(pending) and _order(pending[stored], field_name) < limit:
                memory = pending[stored]
                await backend.store(target, memory.key, memory.value, memory.metadata)
                stored += 1
                tick()
            hits = await backend.query(target, query.question, limit=10)
            judged.append((query, [hit.key for hit in hits]))
            tick()
        for memory in pending[stored:]:
            await backend.store(target, memory.key, memory.value, memory.metadata)
            tick()
        for query in later:
            hits = await backend.query(target, query.question, limit=10)
            judged.append((query, [hit.key for hit in hits]))
            tick()
    return score_rankings(dataset.name, len(dataset.memories), judged)
