"""Compare memory backends: functional checks, latency percentiles, throughput under
concurrency, relevance on a labelled set, privacy and cost, and a score out of 100.

::

    async with SQLBackend("sqlite:///scratch.db") as store:
        report = await evaluate([NullBackend(), store])
    print(report.recommendation)
    print(report.to_markdown())
"""

from asyncmem.evaluation.relevance import (
    Dataset,
    LabeledMemory,
    LabeledQuery,
    RelevanceResult,
    load_dataset,
    shipped_dataset,
)
from asyncmem.evaluation.report import (
    BackendResult,
    Cost,
    EvaluationReport,
    Privacy,
    Score,
    write_chart,
)
from asyncmem.evaluation.runner import EVAL_USER_PREFIX, evaluate
from asyncmem.evaluation.timing import Clock, LatencyStats, percentile, summarize
from asyncmem.evaluation.workloads import CheckResult, ConcurrencyResult, Workload

__all__ = [
    "EVAL_USER_PREFIX",
    "BackendResult",
    "CheckResult",
    "Clock",
    "ConcurrencyResult",
    "Cost",
    "Dataset",
    "EvaluationReport",
    "LabeledMemory",
    "LabeledQuery",
    "LatencyStats",
    "Privacy",
    "RelevanceResult",
    "Score",
    "Workload",
    "evaluate",
    "load_dataset",
    "percentile",
    "shipped_dataset",
    "summarize",
    "write_chart",
]
