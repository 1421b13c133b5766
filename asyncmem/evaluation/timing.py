"""Timing awaited calls: an injectable nanosecond clock and exact percentile statistics.

Percentiles use the nearest-rank method: p-th percentile of ``n`` sorted samples is the sample
at 1-based rank ``ceil(p / 100 * n)``. It always returns a measured value (no interpolation),
so a test that injects known clock readings can assert exact numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Clock", "LatencyStats", "default_clock", "percentile", "summarize", "timed"]

Clock = Callable[[], int]
"""Returns a monotonic time in nanoseconds, like :func:`time.perf_counter_ns`."""

T = TypeVar("T")


def default_clock() -> int:
    """:func:`time.perf_counter_ns`, looked up at call time so tests can patch nothing."""
    return time.perf_counter_ns()


def percentile(ordered: Sequence[int], p: float) -> int:
    """The nearest-rank ``p``-th percentile (0 < p ≤ 100) of already sorted ``ordered``."""
    if not ordered:
        raise ValueError("no samples")
    if not 0 < p <= 100:
        raise ValueError("p must be in (0, 100]")
    rank = math.ceil(p / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """What many timed awaits of one operation took, in nanoseconds.

    ``ops_per_s`` is calls per second of time spent inside the calls (one at a time); under
    concurrency it is calls per second of wall time instead; 0.0 when no time was measured.
    """

    count: int
    total_ns: int
    p50_ns: int
    p95_ns: int
    p99_ns: int
    max_ns: int
    ops_per_s: float

    @property
    def p50_ms(self) -> float:
        """The median, in milliseconds."""
        return self.p50_ns / 1e6

    @property
    def p95_ms(self) -> float:
        """The 95th percentile, in milliseconds."""
        return self.p95_ns / 1e6

    @property
    def p99_ms(self) -> float:
        """The 99th percentile, in milliseconds."""
        return self.p99_ns / 1e6

    @property
    def max_ms(self) -> float:
        """The slowest call, in milliseconds."""
        return self.max_ns / 1e6

    def to_dict(self) -> dict[str, Any]:
        """This summary as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "count": self.count,
            "total_ns": self.total_ns,
            "p50_ns": self.p50_ns,
            "p95_ns": self.p95_ns,
            "p99_ns": self.p99_ns,
            "max_ns": self.max_ns,
            "ops_per_s": self.ops_per_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyStats:
        """The summary that :meth:`to_dict` turned into ``data``."""
        return cls(
            count=int(data["count"]),
            total_ns=int(data["total_ns"]),
            p50_ns=int(data["p50_ns"]),
            p95_ns=int(data["p95_ns"]),
            p99_ns=int(data["p99_ns"]),
            max_ns=int(data["max_ns"]),
            ops_per_s=float(data["ops_per_s"]),
        )


def summarize(samples_ns: Sequence[int], *, wall_ns: int | None = None) -> LatencyStats:
    """Percentiles of ``samples_ns``; throughput over their sum, or over ``wall_ns`` if given."""
    if not samples_ns:
        raise ValueError("no samples")
    ordered = sorted(samples_ns)
    total = sum(ordered)
    span = total if wall_ns is None else wall_ns
    return LatencyStats(
        count=len(ordered),
        total_ns=total,
        p50_ns=percentile(ordered, 50),
        p95_ns=percentile(ordered, 95),
        p99_ns=percentile(ordered, 99),
        max_ns=ordered[-1],
        ops_per_s=len(ordered) / (span / 1e9) if span > 0 else 0.0,
    )


async def timed(clock: Clock, call: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """Await ``call()`` and return its result with the nanoseconds it took on ``clock``."""
    start = clock()
    result = await call()
    return result, clock() - start
