"""``evaluate``: run every workload against each backend under throw-away user ids."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from asyncmem.backend import MemoryBackend, MemoryEntry
from asyncmem.errors import AsyncmemError
from asyncmem.evaluation.relevance import (
    Dataset,
    RelevanceResult,
    load_dataset,
    measure_relevance,
    shipped_dataset,
)
from asyncmem.evaluation.report import (
    BackendResult,
    Cost,
    EvaluationReport,
    Privacy,
    recommend,
    score,
)
from asyncmem.evaluation.timing import Clock, LatencyStats, default_clock
from asyncmem.evaluation.workloads import (
    CheckResult,
    ConcurrencyResult,
    Workload,
    run_checks,
    run_concurrency,
    run_latency,
)

__all__ = ["EVAL_USER_PREFIX", "Progress", "evaluate"]

EVAL_USER_PREFIX = "asyncmem-eval-"
"""Every user id an evaluation writes under starts with this and a fresh uuid."""

Progress = Callable[[str, str, int, int], None]
"""``progress(backend name, phase, done, total)``, called as work completes."""


class _Counting:
    """Passes every call through to ``inner`` and counts the awaited operations."""

    def __init__(self, inner: MemoryBackend) -> None:
        self.inner = inner
        self.backend_name = inner.backend_name
        self.is_cloud = inner.is_cloud
        self.calls = 0

    async def is_available(self) -> bool:
        self.calls += 1
        return await self.inner.is_available()

    async def store(
        self,
        user_id: str,
        key: str,
        value: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        ttl: float | None = None,
    ) -> MemoryEntry:
        self.calls += 1
        if ttl is None:
            return await self.inner.store(user_id, key, value, metadata)
        return await self.inner.store(user_id, key, value, metadata, ttl=ttl)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        self.calls += 1
        return await self.inner.retrieve(user_id, key)

    async def query(
        self,
        user_id: str,
        text: str,
        limit: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryEntry]:
        self.calls += 1
        if where is None:
            return await self.inner.query(user_id, text, limit)
        return await self.inner.query(user_id, text, limit, where=where)

    async def list_keys(
        self,
        user_id: str,
        *,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        self.calls += 1
        if where is None and limit is None and offset == 0:
            return await self.inner.list_keys(user_id)
        return await self.inner.list_keys(user_id, where=where, limit=limit, offset=offset)

    async def delete(self, user_id: str, key: str) -> bool:
        self.calls += 1
        return await self.inner.delete(user_id, key)

    async def forget_user(self, user_id: str) -> int:
        self.calls += 1
        return await self.inner.forget_user(user_id)

    def scan(
        self,
        user_id: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[MemoryEntry]:
        self.calls += 1
        return self.inner.scan(user_id, where=where, page_size=page_size)

    async def history(self, user_id: str, key: str, limit: int = 10) -> list[MemoryEntry]:
        self.calls += 1
        return await self.inner.history(user_id, key, limit)

    async def store_many(
        self, user_id: str, items: Iterable[Mapping[str, Any]]
    ) -> list[MemoryEntry]:
        self.calls += 1
        return await self.inner.store_many(user_id, items)

    async def delete_many(self, user_id: str, keys: Iterable[str]) -> int:
        self.calls += 1
        return await self.inner.delete_many(user_id, keys)

    async def purge_expired(self) -> int:
        self.calls += 1
        return await self.inner.purge_expired()

    async def aclose(self) -> None:
        """The caller owns the backend: evaluating never closes it."""

    async def __aenter__(self) -> _Counting:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


def describe_privacy(backend: MemoryBackend) -> Privacy:
    """Where ``backend`` keeps data, from what it exposes (``path``, ``url``, ``base_url``)."""
    if backend.backend_name == "null":
        return Privacy("nowhere (stores nothing)", leaves_machine=False, needs_key=False)
    path = getattr(backend, "path", None)
    url = getattr(backend, "url", None) or getattr(backend, "base_url", None)
    location = str(path) if path else str(url) if url else "unknown"
    needs_key = getattr(backend, "needs_key", None)
    if not isinstance(needs_key, bool):
        needs_key = bool(url and "***" in str(url))
    return Privacy(location, leaves_machine=bool(backend.is_cloud), needs_key=needs_key)


def _cost(backend: MemoryBackend, privacy: Privacy, calls: int) -> Cost:
    if backend.backend_name == "null":
        return Cost(0, 0, "0, stores nothing")
    if getattr(backend, "path", None):
        return Cost(0, 0, "0, local")
    return Cost(
        calls,
        None,
        f"≥ {calls:,} round trips to {privacy.location} (one or more per call); bytes not measured",
    )


async def _evaluate_one(
    backend: MemoryBackend,
    workload: Workload,
    dataset: Dataset,
    clock: Clock,
    progress: Progress | None,
) -> BackendResult:
    name = backend.backend_name
    counted = _Counting(backend)
    base = f"{EVAL_USER_PREFIX}{uuid.uuid4().hex}"
    touched: list[str] = []

    def user_for(suffix: str) -> str:
        user = f"{base}-{suffix}"
        if user not in touched:
            touched.append(user)
        return user

    def report(phase: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, total: progress(name, phase, done, total)

    started = clock()
    privacy = describe_privacy(backend)
    errors: list[str] = []
    checks: list[CheckResult] = []
    latency: dict[str, LatencyStats] = {}
    concurrency: ConcurrencyResult | None = None
    relevance: RelevanceResult | None = None
    try:
        available = await counted.is_available()
    except AsyncmemError as exc:
        available = False
        errors.append(f"is_available: {type(exc).__name__}: {exc}")
    if available:
        dataset_users = {m.user_id for m in dataset.memories} | {q.user_id for q in dataset.queries}
        index = {user: i for i, user in enumerate(sorted(dataset_users))}
        try:
            checks = await run_checks(counted, user_for, report("checks"))
            try:
                relevance = await measure_relevance(
                    counted,
                    dataset,
                    lambda u: user_for(f"rel{index[u]}"),
                    progress=report("relevance"),
                )
            except AsyncmemError as exc:
                errors.append(f"relevance: {type(exc).__name__}: {exc}")
            load_user = user_for("load")
            try:
                latency = await run_latency(counted, load_user, workload, clock, report("latency"))
            except AsyncmemError as exc:
                errors.append(f"latency: {type(exc).__name__}: {exc}")
            if workload.concurrent_operations:
                concurrency = await run_concurrency(
                    counted, load_user, workload, clock, report("concurrency")
                )
        finally:
            for user in touched:
                try:
                    await backend.forget_user(user)
                except AsyncmemError as exc:
                    errors.append(f"cleanup: {type(exc).__name__}: {exc}")
    scored = score(
        available=available, checks=checks, latency=latency, relevance=relevance, privacy=privacy
    )
    return BackendResult(
        name=name,
        available=available,
        privacy=privacy,
        cost=_cost(backend, privacy, counted.calls + len(touched)),
        score=scored,
        checks=checks,
        latency=latency,
        concurrency=concurrency,
        relevance=relevance,
        errors=errors,
        duration_s=(clock() - started) / 1e9,
    )


async def evaluate(
    backends: Sequence[MemoryBackend],
    *,
    workload: Workload | None = None,
    clock: Clock = default_clock,
    dataset: Dataset | None = None,
    progress: Progress | None = None,
) -> EvaluationReport:
    """Measure each backend in turn and recommend one.

    Each backend gets functional checks, relevance on the labelled set (``dataset``, else
    ``workload.dataset``, else the shipped one), latency percentiles one call at a time and
    throughput under concurrency. All of it happens under fresh user ids starting with
    :data:`EVAL_USER_PREFIX` that are erased afterwards, also when something fails, so other
    users' memories are never read, changed or deleted. The backends are used as given
    (opened on first use) and not closed.
    """
    from asyncmem import __version__

    workload = Workload() if workload is None else workload
    if dataset is None:
        dataset = shipped_dataset() if workload.dataset is None else load_dataset(workload.dataset)
    results = [await _evaluate_one(b, workload, dataset, clock, progress) for b in backends]
    return EvaluationReport(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        asyncmem_version=__version__,
        workload=workload,
        results=results,
        recommendation=recommend(results),
    )
