"""What the evaluator does to a backend: functional checks, timed operations, concurrency.

Every function here works only on the user ids it is given; the caller makes them unique and
erases them afterwards.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from asyncmem.backend import MemoryBackend
from asyncmem.errors import AsyncmemError
from asyncmem.evaluation.timing import Clock, LatencyStats, summarize, timed

__all__ = [
    "OPERATIONS",
    "CheckResult",
    "ConcurrencyResult",
    "Workload",
    "run_checks",
    "run_concurrency",
    "run_latency",
]

OPERATIONS = ("store", "update", "retrieve", "query", "list_keys", "delete")
"""Operations timed one at a time; ``update`` is a ``store`` over an existing key."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Workload:
    """How much work an evaluation does. The defaults finish in seconds on the embedded store.

    ``size`` memories are stored (each store timed) before the other operations are timed
    against them; every operation first runs ``warmup`` untimed calls. ``dataset`` is a path to
    a labelled JSON/JSONL set, ``None`` for the shipped one.
    """

    size: int = 2000
    warmup: int = 20
    repetitions: int = 300
    list_repetitions: int = 50
    concurrency: int = 32
    concurrent_operations: int = 2000
    write_ratio: float = 0.2
    dataset: str | Path | None = None
    seed: int = 2024

    def __post_init__(self) -> None:
        for name in ("size", "repetitions", "list_repetitions", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.warmup < 0 or self.concurrent_operations < 0:
            raise ValueError("warmup and concurrent_operations must not be negative")
        if not 0.0 <= self.write_ratio <= 1.0:
            raise ValueError("write_ratio must be between 0 and 1")
        if isinstance(self.dataset, Path):
            object.__setattr__(self, "dataset", str(self.dataset))

    def to_dict(self) -> dict[str, Any]:
        """This workload as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "size": self.size,
            "warmup": self.warmup,
            "repetitions": self.repetitions,
            "list_repetitions": self.list_repetitions,
            "concurrency": self.concurrency,
            "concurrent_operations": self.concurrent_operations,
            "write_ratio": self.write_ratio,
            "dataset": self.dataset,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        """The workload that :meth:`to_dict` turned into ``data``."""
        return cls(**data)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One functional check: its name, whether it passed, and why not."""

    name: str
    passed: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """This check as plain JSON data (dicts, lists, numbers, strings)."""
        return {"name": self.name, "passed": self.passed, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        """The check that :meth:`to_dict` turned into ``data``."""
        return cls(str(data["name"]), bool(data["passed"]), str(data.get("reason", "")))


class CheckFailed(Exception):
    """Raised inside a check with the reason it failed."""


def _expect(condition: bool, reason: str) -> None:
    if not condition:
        raise CheckFailed(reason)


async def _check_store_retrieve(backend: MemoryBackend, user: str, _other: str) -> None:
    stored = await backend.store(user, "eval-pet", "Has a grey cat called Miso", {"n": 1})
    _expect(stored.value == "Has a grey cat called Miso", "store returned a different value")
    got = await backend.retrieve(user, "eval-pet")
    _expect(got is not None, "retrieve found nothing after store")
    assert got is not None
    _expect(got.value == stored.value, "retrieve returned a different value")
    _expect(dict(got.metadata) == {"n": 1}, "retrieve returned different metadata")
    _expect(await backend.retrieve(user, "eval-missing") is None, "a missing key was found")


async def _check_update(backend: MemoryBackend, user: str, _other: str) -> None:
    first = await backend.store(user, "eval-job", "Works as a nurse", {"v": 1})
    second = await backend.store(user, "eval-job", "Works as a night-shift nurse", {"v": 2})
    got = await backend.retrieve(user, "eval-job")
    _expect(got is not None, "retrieve found nothing after an update")
    assert got is not None
    _expect(got.value == "Works as a night-shift nurse", "update did not replace the value")
    _expect(dict(got.metadata) == {"v": 2}, "update did not replace the metadata")
    _expect(got.created_at == first.created_at, "update changed created_at")
    _expect(second.updated_at > first.updated_at, "update did not move updated_at forward")


async def _check_query(backend: MemoryBackend, user: str, _other: str) -> None:
    await backend.store(user, "eval-hobby", "Plays the cello in an amateur orchestra")
    await backend.store(user, "eval-food", "Cannot stand olives on pizza")
    hits = await backend.query(user, "Which instrument does she play?", limit=5)
    _expect(bool(hits), "query found nothing for a question about a stored memory")
    _expect(hits[0].key == "eval-hobby", "query did not rank the matching memory first")
    _expect(await backend.query(user, "the of and", limit=5) == [], "a stop-word query matched")


async def _check_list_order(backend: MemoryBackend, user: str, _other: str) -> None:
    for key in ("eval-a", "eval-b", "eval-c"):
        await backend.store(user, key, f"value {key}")
    await backend.store(user, "eval-a", "value a, updated")
    keys = await backend.list_keys(user)
    order = [k for k in keys if k in {"eval-a", "eval-b", "eval-c"}]
    _expect(order == ["eval-a", "eval-c", "eval-b"], "list_keys is not most recently updated first")


async def _check_delete(backend: MemoryBackend, user: str, _other: str) -> None:
    await backend.store(user, "eval-gone", "Soon deleted")
    _expect(await backend.retrieve(user, "eval-gone") is not None, "stored memory not found")
    _expect(await backend.delete(user, "eval-gone") is True, "delete of a memory returned False")
    _expect(await backend.retrieve(user, "eval-gone") is None, "memory still there after delete")
    _expect(await backend.delete(user, "eval-gone") is False, "second delete returned True")


async def _check_forget(backend: MemoryBackend, user: str, forget_user: str) -> None:
    await backend.store(user, "eval-kept", "not forgotten")
    await backend.store(forget_user, "eval-one", "first")
    await backend.store(forget_user, "eval-two", "second")
    _expect(len(await backend.list_keys(forget_user)) == 2, "stored memories are not listed")
    _expect(await backend.forget_user(forget_user) == 2, "forget_user did not count 2 memories")
    _expect(await backend.list_keys(forget_user) == [], "memories listed after forget_user")
    _expect(await backend.retrieve(user, "eval-kept") is not None, "forgot another user too")


async def _check_isolation(backend: MemoryBackend, user: str, other: str) -> None:
    await backend.store(user, "eval-secret", "Allergic to penicillin")
    _expect(await backend.retrieve(user, "eval-secret") is not None, "stored memory not found")
    _expect(await backend.retrieve(other, "eval-secret") is None, "another user retrieved it")
    _expect("eval-secret" not in await backend.list_keys(other), "another user listed it")
    _expect(await backend.query(other, "penicillin allergy") == [], "another user's query found it")
    _expect(await backend.delete(other, "eval-secret") is False, "another user deleted it")
    await backend.forget_user(other)
    _expect(await backend.retrieve(user, "eval-secret") is not None, "lost after another's forget")


CHECKS: dict[str, Callable[[MemoryBackend, str, str], Awaitable[None]]] = {
    "store_retrieve": _check_store_retrieve,
    "update_keeps_created_at": _check_update,
    "query": _check_query,
    "list_order": _check_list_order,
    "delete": _check_delete,
    "forget_user": _check_forget,
    "isolation": _check_isolation,
}
"""Named checks; each gets its own fresh user (and a second one for isolation)."""


async def run_checks(
    backend: MemoryBackend, user_for: Callable[[str], str], progress: Progress | None = None
) -> list[CheckResult]:
    """Run every check; a check passes when it raises nothing."""
    results: list[CheckResult] = []
    for done, (name, check) in enumerate(CHECKS.items(), 1):
        try:
            await check(backend, user_for(f"check-{name}"), user_for(f"check-{name}-other"))
        except CheckFailed as failed:
            results.append(CheckResult(name, False, str(failed)))
        except AsyncmemError as exc:
            results.append(CheckResult(name, False, f"{type(exc).__name__}: {exc}"))
        else:
            results.append(CheckResult(name, True))
        if progress is not None:
            progress(done, len(CHECKS))
    return results


_WORDS = (
    "apple",
    "river",
    "garden",
    "piano",
    "coffee",
    "travel",
    "summer",
    "winter",
    "market",
    "doctor",
    "school",
    "train",
    "bicycle",
    "mountain",
    "ocean",
    "letter",
    "camera",
    "kitchen",
    "window",
    "guitar",
    "forest",
    "museum",
    "island",
    "bakery",
    "festival",
    "library",
    "hospital",
    "concert",
    "theatre",
    "village",
    "harbor",
    "meadow",
    "castle",
    "bridge",
    "lantern",
    "violin",
    "notebook",
    "jacket",
    "blanket",
    "candle",
    "pepper",
    "lemon",
    "orange",
    "cherry",
    "tomato",
    "basil",
    "ginger",
    "honey",
    "cheese",
    "yoga",
    "tennis",
    "soccer",
    "chess",
    "painting",
    "pottery",
    "knitting",
    "hiking",
    "sailing",
    "climbing",
    "running",
    "dancing",
    "birthday",
    "wedding",
    "holiday",
    "project",
    "meeting",
    "deadline",
    "invoice",
    "budget",
    "contract",
    "interview",
    "promotion",
    "vacation",
    "flight",
    "hotel",
    "passport",
    "ticket",
    "sister",
    "brother",
    "cousin",
    "neighbor",
    "friend",
    "teacher",
    "manager",
    "dentist",
    "plumber",
    "lawyer",
    "nurse",
    "pilot",
    "farmer",
    "author",
    "singer",
)


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + f" (memory {n})."


def _question(rng: random.Random) -> str:
    return "What about the " + " and ".join(rng.sample(_WORDS, rng.randint(1, 3))) + "?"


async def _repeat(
    clock: Clock, warmup: int, count: int, make: Callable[[int], Callable[[], Awaitable[Any]]]
) -> LatencyStats:
    for i in range(warmup):
        await make(-1 - i)()
    samples = []
    for i in range(count):
        _, took = await timed(clock, make(i))
        samples.append(took)
    return summarize(samples)


async def run_latency(
    backend: MemoryBackend,
    user: str,
    workload: Workload,
    clock: Clock,
    progress: Progress | None = None,
) -> dict[str, LatencyStats]:
    """Fill ``user`` with ``workload.size`` memories, timing each store, then time the rest.

    Reads and deletes pick keys at random (seeded) among the filled ones, so the timed data set
    is the full size throughout.
    """
    rng = random.Random(workload.seed)
    size, reps = workload.size, workload.repetitions
    steps = len(OPERATIONS)
    keys = [f"m-{i:06d}" for i in range(size)]
    stats: dict[str, LatencyStats] = {}

    def step(done: int) -> None:
        if progress is not None:
            progress(done, steps)

    def store_new(i: int) -> Callable[[], Awaitable[Any]]:
        key = keys[i] if i >= 0 else f"warm-{-i}"
        value = _sentence(rng, 8 + (i % 12))
        metadata = {"n": i, "topic": rng.choice(_WORDS)}
        return lambda: backend.store(user, key, value, metadata)

    stats["store"] = await _repeat(clock, workload.warmup, size, store_new)
    step(1)

    def update(_i: int) -> Callable[[], Awaitable[Any]]:
        key, value = rng.choice(keys), _sentence(rng, 10)
        return lambda: backend.store(user, key, value, {"updated": True})

    stats["update"] = await _repeat(clock, workload.warmup, reps, update)
    step(2)

    def retrieve(_i: int) -> Callable[[], Awaitable[Any]]:
        key = rng.choice(keys)
        return lambda: backend.retrieve(user, key)

    stats["retrieve"] = await _repeat(clock, workload.warmup, reps, retrieve)
    step(3)

    def query(_i: int) -> Callable[[], Awaitable[Any]]:
        text = _question(rng)
        return lambda: backend.query(user, text, limit=10)

    stats["query"] = await _repeat(clock, workload.warmup, reps, query)
    step(4)

    def list_keys(_i: int) -> Callable[[], Awaitable[Any]]:
        return lambda: backend.list_keys(user)

    stats["list_keys"] = await _repeat(
        clock, min(workload.warmup, 5), workload.list_repetitions, list_keys
    )
    step(5)

    timed_deletes = min(reps, size)
    doomed = rng.sample(keys, min(size, reps + workload.warmup))

    def delete(i: int) -> Callable[[], Awaitable[Any]]:
        index = i if i >= 0 else timed_deletes + (-1 - i)
        key = doomed[index] if index < len(doomed) else "eval-absent"
        return lambda: backend.delete(user, key)

    stats["delete"] = await _repeat(clock, workload.warmup, timed_deletes, delete)
    step(6)
    return stats


@dataclass(frozen=True, slots=True)
class ConcurrencyResult:
    """``tasks`` coroutines sharing ``operations`` calls, ``write_ratio`` of them stores.

    ``latency.ops_per_s`` is completed calls per second of wall time; ``errors`` counts calls
    that raised (they are not in the latency samples).
    """

    tasks: int
    operations: int
    write_ratio: float
    wall_ns: int
    errors: int
    latency: LatencyStats | None

    @property
    def ops_per_s(self) -> float:
        """Completed calls per second of wall time (0.0 without samples)."""
        return 0.0 if self.latency is None else self.latency.ops_per_s

    def to_dict(self) -> dict[str, Any]:
        """This result as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "tasks": self.tasks,
            "operations": self.operations,
            "write_ratio": self.write_ratio,
            "wall_ns": self.wall_ns,
            "errors": self.errors,
            "latency": None if self.latency is None else self.latency.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConcurrencyResult:
        """The result that :meth:`to_dict` turned into ``data``."""
        latency = data.get("latency")
        return cls(
            tasks=int(data["tasks"]),
            operations=int(data["operations"]),
            write_ratio=float(data["write_ratio"]),
            wall_ns=int(data["wall_ns"]),
            errors=int(data["errors"]),
            latency=None if latency is None else LatencyStats.from_dict(latency),
        )


async def run_concurrency(
    backend: MemoryBackend,
    user: str,
    workload: Workload,
    clock: Clock,
    progress: Progress | None = None,
) -> ConcurrencyResult:
    """Run a read/write mix from ``workload.concurrency`` tasks against ``user``'s memories.

    Reads are half ``retrieve`` of a filled key, half ``query``; writes are ``store`` of new
    or existing keys.
    """
    rng = random.Random(workload.seed + 1)
    total = workload.concurrent_operations
    plan: list[Callable[[], Awaitable[Any]]] = []
    for i in range(total):
        roll = rng.random()
        if roll < workload.write_ratio:
            key = f"m-{rng.randrange(workload.size * 2):06d}"
            value = _sentence(rng, 12)
            metadata = {"concurrent": i}
            plan.append(partial(backend.store, user, key, value, metadata))
        elif roll < workload.write_ratio + (1 - workload.write_ratio) / 2:
            key = f"m-{rng.randrange(workload.size):06d}"
            plan.append(partial(backend.retrieve, user, key))
        else:
            text = _question(rng)
            plan.append(partial(backend.query, user, text, limit=10))
    samples: list[int] = []
    errors = 0
    cursor = 0

    async def worker() -> None:
        nonlocal cursor, errors
        while cursor < total:
            call = plan[cursor]
            cursor += 1
            try:
                _, took = await timed(clock, call)
            except AsyncmemError:
                errors += 1
                continue
            samples.append(took)
            if progress is not None and len(samples) % 100 == 0:
                progress(len(samples) + errors, total)

    start = clock()
    await asyncio.gather(*(worker() for _ in range(workload.concurrency)))
    wall = clock() - start
    if progress is not None:
        progress(total, total)
    return ConcurrencyResult(
        tasks=workload.concurrency,
        operations=total,
        write_ratio=workload.write_ratio,
        wall_ns=wall,
        errors=errors,
        latency=summarize(samples, wall_ns=wall) if samples else None,
    )
