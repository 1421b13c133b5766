"""Evaluation results as dataclasses, the score rubric, and JSON / Markdown / text / PNG output.

Score rubric (out of 100; the prototype's four headings and weights, measured better):

- **Availability (20)**: 20 when the backend opened and ``is_available()`` returned True,
  else 0 (and nothing else is measured).
- **Functionality (40)**: 25 x the share of functional checks passed, plus 15 x recall@10 on
  the labelled set (a store that keeps memories but cannot find them is half a memory).
- **Latency (20)**: for each operation timed one at a time, up to 5 points for its p50 and 5
  for its p99 (thresholds below); the mean over operations, doubled. Percentiles, not one
  sample: a backend with a slow tail loses points a mean would hide.
  p50 ≤ 1 ms: 5, ≤ 5 ms: 4, ≤ 20 ms: 3, ≤ 100 ms: 2, ≤ 500 ms: 1, else 0;
  p99 ≤ 5 ms: 5, ≤ 20 ms: 4, ≤ 100 ms: 3, ≤ 500 ms: 2, ≤ 2 s: 1, else 0.
- **Privacy (20)**: 20 when the data stays on this machine, 5 when it leaves it (as the
  prototype scored local against cloud).

The null backend scores 60 (available, instant, private, and keeps nothing): the score ranks,
the recommendation decides, and it only considers backends that passed every check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncmem.evaluation.relevance import RelevanceResult
from asyncmem.evaluation.timing import LatencyStats
from asyncmem.evaluation.workloads import CheckResult, ConcurrencyResult, Workload

__all__ = [
    "BackendResult",
    "Cost",
    "EvaluationReport",
    "Privacy",
    "Score",
    "check_chart",
    "recommend",
    "score",
    "to_markdown",
    "to_text",
    "write_chart",
]

P50_POINTS = ((1.0, 5), (5.0, 4), (20.0, 3), (100.0, 2), (500.0, 1))
P99_POINTS = ((5.0, 5), (20.0, 4), (100.0, 3), (500.0, 2), (2000.0, 1))


@dataclass(frozen=True, slots=True)
class Privacy:
    """Where the memories live and who else sees them."""

    location: str
    leaves_machine: bool
    needs_key: bool

    def to_dict(self) -> dict[str, Any]:
        """This privacy record as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "location": self.location,
            "leaves_machine": self.leaves_machine,
            "needs_key": self.needs_key,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Privacy:
        """The privacy record that :meth:`to_dict` turned into ``data``."""
        return cls(str(data["location"]), bool(data["leaves_machine"]), bool(data["needs_key"]))


@dataclass(frozen=True, slots=True)
class Cost:
    """Network use during the evaluation: ``None`` where it could not be measured."""

    network_calls: int | None
    network_bytes: int | None
    note: str

    def to_dict(self) -> dict[str, Any]:
        """This cost record as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "network_calls": self.network_calls,
            "network_bytes": self.network_bytes,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cost:
        """The cost record that :meth:`to_dict` turned into ``data``."""
        calls, sent = data.get("network_calls"), data.get("network_bytes")
        return cls(
            None if calls is None else int(calls),
            None if sent is None else int(sent),
            str(data.get("note", "")),
        )


@dataclass(frozen=True, slots=True)
class Score:
    """Points under each heading of the rubric in this module's docstring."""

    availability: float
    functionality: float
    latency: float
    privacy: float

    @property
    def total(self) -> float:
        """All points, out of 100."""
        return self.availability + self.functionality + self.latency + self.privacy

    def to_dict(self) -> dict[str, Any]:
        """This score as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "availability": self.availability,
            "functionality": self.functionality,
            "latency": self.latency,
            "privacy": self.privacy,
            "total": self.total,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Score:
        """The score that :meth:`to_dict` turned into ``data``."""
        return cls(
            float(data["availability"]),
            float(data["functionality"]),
            float(data["latency"]),
            float(data["privacy"]),
        )


@dataclass(frozen=True, slots=True)
class BackendResult:
    """Everything measured about one backend. ``errors`` lists phases that raised."""

    name: str
    available: bool
    privacy: Privacy
    cost: Cost
    score: Score
    checks: list[CheckResult] = field(default_factory=list)
    latency: dict[str, LatencyStats] = field(default_factory=dict)
    concurrency: ConcurrencyResult | None = None
    relevance: RelevanceResult | None = None
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def checks_passed(self) -> int:
        """How many functional checks passed."""
        return sum(check.passed for check in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """This result as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "name": self.name,
            "available": self.available,
            "privacy": self.privacy.to_dict(),
            "cost": self.cost.to_dict(),
            "score": self.score.to_dict(),
            "checks": [check.to_dict() for check in self.checks],
            "latency": {op: stats.to_dict() for op, stats in self.latency.items()},
            "concurrency": None if self.concurrency is None else self.concurrency.to_dict(),
            "relevance": None if self.relevance is None else self.relevance.to_dict(),
            "errors": list(self.errors),
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BackendResult:
        """The result that :meth:`to_dict` turned into ``data``."""
        concurrency, relevance = data.get("concurrency"), data.get("relevance")
        return cls(
            name=str(data["name"]),
            available=bool(data["available"]),
            privacy=Privacy.from_dict(data["privacy"]),
            cost=Cost.from_dict(data["cost"]),
            score=Score.from_dict(data["score"]),
            checks=[CheckResult.from_dict(c) for c in data.get("checks", [])],
            latency={op: LatencyStats.from_dict(s) for op, s in data.get("latency", {}).items()},
            concurrency=None if concurrency is None else ConcurrencyResult.from_dict(concurrency),
            relevance=None if relevance is None else RelevanceResult.from_dict(relevance),
            errors=[str(e) for e in data.get("errors", [])],
            duration_s=float(data.get("duration_s", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class EvaluationReport:
    """The results of one :func:`~asyncmem.evaluation.evaluate` call, best backend named."""

    created_at: str
    asyncmem_version: str
    workload: Workload
    results: list[BackendResult]
    recommendation: str

    def to_dict(self) -> dict[str, Any]:
        """This report as plain JSON data (dicts, lists, numbers, strings)."""
        return {
            "created_at": self.created_at,
            "asyncmem_version": self.asyncmem_version,
            "workload": self.workload.to_dict(),
            "results": [result.to_dict() for result in self.results],
            "recommendation": self.recommendation,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvaluationReport:
        """The report that :meth:`to_dict` turned into ``data``."""
        return cls(
            created_at=str(data["created_at"]),
            asyncmem_version=str(data["asyncmem_version"]),
            workload=Workload.from_dict(data["workload"]),
            results=[BackendResult.from_dict(r) for r in data["results"]],
            recommendation=str(data["recommendation"]),
        )

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON text (:meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> EvaluationReport:
        """The report that :meth:`to_json` wrote as ``text``."""
        return cls.from_dict(json.loads(text))

    def to_markdown(self) -> str:
        """The report as Markdown: summary, latency, relevance, privacy and checks."""
        return to_markdown(self)


def _points(value_ms: float, table: tuple[tuple[float, int], ...]) -> int:
    for limit, points in table:
        if value_ms <= limit:
            return points
    return 0


def score(
    *,
    available: bool,
    checks: list[CheckResult],
    latency: dict[str, LatencyStats],
    relevance: RelevanceResult | None,
    privacy: Privacy,
) -> Score:
    """Apply the rubric in this module's docstring."""
    if not available:
        return Score(0.0, 0.0, 0.0, 0.0)
    passed = sum(check.passed for check in checks) / len(checks) if checks else 0.0
    recall = relevance.recall_at_10 if relevance is not None else 0.0
    functionality = 25.0 * passed + 15.0 * recall
    if latency:
        per_op = [
            _points(s.p50_ms, P50_POINTS) + _points(s.p99_ms, P99_POINTS) for s in latency.values()
        ]
        latency_points = 2.0 * sum(per_op) / len(per_op)
    else:
        latency_points = 0.0
    return Score(
        availability=20.0,
        functionality=round(functionality, 2),
        latency=round(latency_points, 2),
        privacy=5.0 if privacy.leaves_machine else 20.0,
    )


def recommend(results: list[BackendResult]) -> str:
    """One sentence naming the backend to use and why."""
    working = [r for r in results if r.available and r.checks and r.checks_passed == len(r.checks)]
    if not working:
        if not results:
            return "Nothing was evaluated."
        return (
            "No evaluated backend passed every functional check; none can be recommended "
            "to keep memories (see the failed checks)."
        )
    best = max(working, key=lambda r: r.score.total)
    parts = [f"Use {best.name}: it scored {best.score.total:.0f}/100"]
    if best.relevance is not None:
        parts.append(f"found {best.relevance.recall_at_10:.0%} of the answers in its top 10")
    query = best.latency.get("query")
    if query is not None:
        parts.append(f"answered a query in {query.p50_ms:.2f} ms at the median")
    where = (
        "its data leaves this machine"
        if best.privacy.leaves_machine
        else ("its data stays on this machine")
    )
    return ", ".join(parts) + f", and {where}."


def to_markdown(report: EvaluationReport) -> str:
    """A Markdown report: summary table, latency table, relevance, privacy and checks."""
    w = report.workload
    lines = [
        "# asyncmem evaluation",
        "",
        f"{report.created_at}, asyncmem {report.asyncmem_version}; {w.size} memories, "
        f"{w.repetitions} timed calls per operation after {w.warmup} warm-up calls, "
        f"{w.concurrency} concurrent tasks ({w.write_ratio:.0%} writes).",
        "",
        f"**{report.recommendation}**",
        "",
        "| backend | score | avail. | function | latency | privacy | checks | recall@10 | MRR@10 "
        "| concurrent ops/s | concurrent p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.results:
        rel = r.relevance
        con = r.concurrency
        lines.append(
            f"| {r.name} | {r.score.total:.1f} | {r.score.availability:.0f} | "
            f"{r.score.functionality:.1f} | {r.score.latency:.1f} | {r.score.privacy:.0f} | "
            f"{r.checks_passed}/{len(r.checks)} | "
            f"{'-' if rel is None else f'{rel.recall_at_10:.3f}'} | "
            f"{'-' if rel is None else f'{rel.mrr_at_10:.3f}'} | "
            f"{'-' if con is None else f'{con.ops_per_s:,.0f}'} | "
            f"{'-' if con is None or con.latency is None else f'{con.latency.p99_ms:.2f}'} |"
        )
    lines += ["", "## Latency (ms, one call at a time)", ""]
    lines += [
        "| backend | operation | p50 | p95 | p99 | max | ops/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in report.results:
        for op, s in r.latency.items():
            lines.append(
                f"| {r.name} | {op} | {s.p50_ms:.3f} | {s.p95_ms:.3f} | {s.p99_ms:.3f} | "
                f"{s.max_ms:.3f} | {s.ops_per_s:,.0f} |"
            )
    lines += ["", "## Relevance", ""]
    lines += ["| backend | data set | queries | recall@1 | recall@5 | recall@10 | MRR@10 |"]
    lines += ["|---|---|---:|---:|---:|---:|---:|"]
    for r in report.results:
        if r.relevance is not None:
            v = r.relevance
            lines.append(
                f"| {r.name} | {v.dataset} | {v.queries} | {v.recall_at_1:.3f} | "
                f"{v.recall_at_5:.3f} | {v.recall_at_10:.3f} | {v.mrr_at_10:.3f} |"
            )
    lines += ["", "## Privacy and cost", ""]
    lines += ["| backend | data lives in | leaves the machine | needs a key | network |"]
    lines += ["|---|---|---|---|---|"]
    for r in report.results:
        p = r.privacy
        lines.append(
            f"| {r.name} | {p.location} | {'yes' if p.leaves_machine else 'no'} | "
            f"{'yes' if p.needs_key else 'no'} | {r.cost.note} |"
        )
    lines += ["", "## Functional checks", ""]
    for r in report.results:
        for check in r.checks:
            mark = "pass" if check.passed else f"FAIL: {check.reason}"
            lines.append(f"- {r.name} · {check.name}: {mark}")
        for error in r.errors:
            lines.append(f"- {r.name} · error: {error}")
    return "\n".join(lines) + "\n"


def to_text(report: EvaluationReport) -> str:
    """The report as ``asyncmem eval`` prints it: a table, relevance, errors, recommendation."""
    concurrency = report.workload.concurrency

    def cell(result: BackendResult, op: str) -> str:
        stats = result.latency.get(op)
        return "-" if stats is None else f"{stats.p50_ms:.2f}/{stats.p99_ms:.2f}"

    header = (
        "backend",
        "score",
        "checks",
        "store ms",
        "retrieve ms",
        "query ms",
        f"{concurrency}-task ops/s",
        "recall@10",
        "MRR@10",
        "data",
    )
    rows: list[tuple[str, ...]] = [header]
    for r in report.results:
        rows.append(
            (
                r.name,
                f"{r.score.total:.1f}",
                f"{r.checks_passed}/{len(r.checks)}",
                cell(r, "store"),
                cell(r, "retrieve"),
                cell(r, "query"),
                "-" if r.concurrency is None else f"{r.concurrency.ops_per_s:,.0f}",
                "-" if r.relevance is None else f"{r.relevance.recall_at_10:.3f}",
                "-" if r.relevance is None else f"{r.relevance.mrr_at_10:.3f}",
                "leaves machine" if r.privacy.leaves_machine else "local",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for number, row in enumerate(rows):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("(latency columns: p50/p99 over one call at a time)")
    for r in report.results:
        if r.relevance is not None and r.relevance.recall_at_10 > 0:
            v = r.relevance
            lines.append(
                f"{r.name} relevance on {v.dataset} ({v.queries} questions): recall@1 "
                f"{v.recall_at_1:.3f}, recall@5 {v.recall_at_5:.3f}, recall@10 "
                f"{v.recall_at_10:.3f}, MRR@10 {v.mrr_at_10:.3f}"
            )
        lines.extend(f"{r.name}: {error}" for error in r.errors)
    lines.append(report.recommendation)
    return "\n".join(lines)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "drawing the chart needs matplotlib: pip install 'asyncmem[chart]'"
        ) from exc
    return plt


def check_chart() -> None:
    """Raise ``ImportError`` saying what to install when :func:`write_chart` cannot draw."""
    _pyplot()


_SCORE_PARTS = (
    ("availability", 20),
    ("functionality", 40),
    ("latency", 20),
    ("privacy", 20),
)
_PERCENTILES = (("p50", 1.0), ("p95", 0.6), ("p99", 0.3))
_RELEVANCE = (
    ("recall_at_1", "recall@1"),
    ("recall_at_5", "recall@5"),
    ("recall_at_10", "recall@10"),
    ("mrr_at_10", "MRR@10"),
)


def write_chart(report: EvaluationReport, path: str | Path) -> Path:
    """Draw the report into a PNG: score, throughput, latency percentiles and relevance.

    One colour per backend throughout. Every bar is labelled with its value, so a zero
    (the null backend's relevance) is as visible as a tall bar; legends sit outside the
    bars. Needs matplotlib (``pip install 'asyncmem[chart]'``); raises ``ImportError`` saying
    so.
    """
    plt = _pyplot()
    from matplotlib.patches import Patch

    path = Path(path)
    results = report.results
    names = [r.name for r in results]
    colors = [plt.get_cmap("tab10")(n % 10) for n in range(len(results))]
    fig, axes = plt.subplots(
        2, 2, figsize=(14, 9.5), gridspec_kw={"height_ratios": (1, 1.5), "width_ratios": (1, 1)}
    )
    (score_ax, speed_ax), (latency_ax, relevance_ax) = axes
    rows = list(range(len(results)))[::-1]

    # Score: one stacked bar per backend, a segment per heading of the rubric.
    left = [0.0] * len(results)
    for part, (heading, most) in enumerate(_SCORE_PARTS):
        values = [float(getattr(r.score, heading)) for r in results]
        score_ax.barh(
            rows,
            values,
            left=left,
            color=[(*c[:3], 1.0 - 0.2 * part) for c in colors],
            edgecolor="white",
            label=f"{heading} (of {most})",
        )
        for row, start, value in zip(rows, left, values, strict=True):
            if value >= 6:
                score_ax.text(
                    start + value / 2,
                    row,
                    f"{heading}\n{value:.0f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if part else "white",
                )
        left = [a + b for a, b in zip(left, values, strict=True)]
    for row, total in zip(rows, left, strict=True):
        score_ax.text(total + 1, row, f"{total:.1f}", va="center", fontweight="bold")
    score_ax.set_yticks(rows, names)
    score_ax.set_xlim(0, 112)
    score_ax.set_xlabel(
        "points out of 100: availability 20, functionality 40, latency 20, privacy 20"
    )
    score_ax.set_title("Score")

    # Throughput under concurrency.
    throughput = [0.0 if r.concurrency is None else r.concurrency.ops_per_s for r in results]
    speed_ax.barh(rows, [max(v, 1e-9) for v in throughput], color=colors)
    for row, value in zip(rows, throughput, strict=True):
        speed_ax.text(max(value, 1.0) * 1.15, row, f"{value:,.0f} ops/s", va="center")
    speed_ax.set_xscale("log")
    top = max([v for v in throughput if v > 0] or [1.0])
    speed_ax.set_xlim(left=1, right=top * 30)
    speed_ax.set_yticks(rows, names)
    speed_ax.set_xlabel("operations per second, log scale (80% reads, 20% writes)")
    speed_ax.set_title(f"Throughput with {report.workload.concurrency} concurrent tasks")

    # Latency percentiles per operation, one call at a time.
    ops = list(dict.fromkeys(op for r in results for op in r.latency))
    series = [(n, r, pct, shade) for n, r in enumerate(results) for pct, shade in _PERCENTILES]
    width = 0.84 / max(len(series), 1)
    floor = 1e-4
    for index, (n, r, pct, shade) in enumerate(series):
        xs = [i + (index - (len(series) - 1) / 2) * width for i in range(len(ops))]
        ys = [getattr(r.latency[op], pct + "_ms") if op in r.latency else 0.0 for op in ops]
        latency_ax.bar(
            xs,
            [max(y, floor) for y in ys],
            width,
            color=colors[n],
            alpha=shade,
            edgecolor=colors[n],
            linewidth=0.5,
        )
    latency_ax.set_xticks(range(len(ops)), ops)
    latency_ax.set_yscale("log")
    latency_ax.set_ylim(bottom=floor)
    latency_ax.set_ylabel("milliseconds, log scale")
    latency_ax.set_title("Latency per operation: p50, p95, p99 (left to right per backend)")
    latency_ax.grid(axis="y", which="major", alpha=0.3)
    latency_ax.legend(
        handles=[Patch(color="grey", alpha=shade, label=pct) for pct, shade in _PERCENTILES],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.08),
        ncols=len(_PERCENTILES),
        frameon=False,
    )

    # Relevance on the labelled set, every bar labelled.
    width = 0.8 / max(len(results), 1)
    for index, r in enumerate(results):
        xs = [i + (index - (len(results) - 1) / 2) * width for i in range(len(_RELEVANCE))]
        ys = [0.0 if r.relevance is None else float(getattr(r.relevance, m)) for m, _ in _RELEVANCE]
        relevance_ax.bar(xs, ys, width, color=colors[index], edgecolor=colors[index])
        for x, y in zip(xs, ys, strict=True):
            label = "-" if r.relevance is None else f"{y:.2f}"
            relevance_ax.text(
                x,
                y + 0.015,
                label,
                ha="center",
                va="bottom",
                fontsize=8,
                color=colors[index],
                fontweight="bold",
            )
    relevance_ax.set_xticks(range(len(_RELEVANCE)), [label for _, label in _RELEVANCE])
    relevance_ax.set_ylim(0, 1.05)
    relevance_ax.axhline(0, color="black", linewidth=0.8)
    dataset = next((r.relevance.dataset for r in results if r.relevance is not None), "")
    relevance_ax.set_title(f"Relevance of query on {dataset or 'the labelled set'}")

    fig.legend(
        handles=[Patch(color=c, label=name) for c, name in zip(colors, names, strict=True)],
        loc="upper center",
        bbox_to_anchor=(0.5, 0.955),
        ncols=max(1, len(results)),
        frameon=False,
    )
    fig.suptitle(f"asyncmem evaluation ({report.workload.size} memories)", fontsize=14)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
