"""The evaluator: exact statistics from an injected clock, a real run on null and a SQLite
file, the relevance bar over a substring baseline, reports, and cleanup on failure."""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncmem import BackendError, InvalidInputError, MemoryBackend, NullBackend, SQLBackend
from asyncmem.cli import main
from asyncmem.evaluation import (
    EVAL_USER_PREFIX,
    EvaluationReport,
    LatencyStats,
    Workload,
    evaluate,
    load_dataset,
    percentile,
    runner,
    shipped_dataset,
    summarize,
    write_chart,
)
from asyncmem.evaluation.relevance import measure_relevance, parse_dataset, recall_at
from asyncmem.evaluation.timing import timed
from asyncmem.evaluation.workloads import CHECKS, OPERATIONS, run_concurrency, run_latency

SMALL = Workload(
    size=40,
    warmup=2,
    repetitions=15,
    list_repetitions=3,
    concurrency=4,
    concurrent_operations=60,
)


def fake_clock(durations: list[int], gap: int = 7) -> Iterator[int]:
    """Clock readings such that consecutive (start, end) pairs measure ``durations``."""
    now = 1_000
    for took in durations:
        yield now
        now += took
        yield now
        now += gap


def rows_of_eval_users(path: Path) -> int:
    with sqlite3.connect(path) as db:
        (count,) = db.execute(
            "SELECT count(*) FROM memories WHERE user_id LIKE ?", (EVAL_USER_PREFIX + "%",)
        ).fetchone()
    return int(count)


# --- statistics ------------------------------------------------------------------------------


def test_percentiles_are_nearest_rank() -> None:
    samples = list(range(1, 101))
    assert [percentile(samples, p) for p in (50, 95, 99, 100)] == [50, 95, 99, 100]
    assert percentile([5], 99) == 5
    assert percentile([10, 20, 30, 40], 50) == 20
    assert percentile([10, 20, 30, 40], 51) == 30
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


def test_summarize_is_exact() -> None:
    stats = summarize([400, 100, 300, 200] * 25)
    assert stats == LatencyStats(
        count=100,
        total_ns=25_000,
        p50_ns=200,
        p95_ns=400,
        p99_ns=400,
        max_ns=400,
        ops_per_s=100 / 25_000e-9,
    )
    assert summarize([1_000_000, 3_000_000], wall_ns=1_000_000_000).ops_per_s == 2.0
    assert summarize([0, 0]).ops_per_s == 0.0


async def test_timed_reads_the_injected_clock() -> None:
    readings = iter([10, 260])

    async def call() -> str:
        return "done"

    assert await timed(lambda: next(readings), call) == ("done", 250)


async def test_latency_percentiles_come_from_the_injected_clock() -> None:
    workload = Workload(size=100, warmup=3, repetitions=20, list_repetitions=4)
    store = [1_000 * i for i in range(100, 0, -1)]
    rest = [5_000 + i for i in range(20)] * 3 + [9_000] * 4 + [2_000] * 20
    readings = fake_clock(store + rest)
    async with NullBackend() as backend:
        stats = await run_latency(backend, "u", workload, lambda: next(readings))
    assert list(stats) == list(OPERATIONS)
    assert stats["store"].count == 100
    assert (stats["store"].p50_ns, stats["store"].p95_ns, stats["store"].p99_ns) == (
        50_000,
        95_000,
        99_000,
    )
    assert stats["store"].max_ns == 100_000
    assert stats["update"].p50_ns == 5_009
    assert stats["update"].p99_ns == 5_019
    assert stats["list_keys"] == summarize([9_000] * 4)
    assert stats["delete"].ops_per_s == 20 / (40_000e-9)
    with pytest.raises(StopIteration):
        next(readings)


async def test_concurrency_throughput_is_over_wall_time() -> None:
    workload = Workload(size=10, concurrency=5, concurrent_operations=50)
    ticks = iter(range(0, 10_000_000, 1_000))
    async with NullBackend() as backend:
        result = await run_concurrency(backend, "u", workload, lambda: next(ticks))
    assert result.tasks == 5
    assert result.errors == 0
    assert result.latency is not None
    assert result.latency.count == 50
    assert result.latency.ops_per_s == 50 / (result.wall_ns / 1e9)


def test_workload_keeps_a_dataset_path_as_text(tmp_path: Path) -> None:
    workload = Workload(dataset=tmp_path / "mine.jsonl")
    assert workload.dataset == str(tmp_path / "mine.jsonl")
    assert Workload.from_dict(workload.to_dict()) == workload


def test_workload_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="size"):
        Workload(size=0)
    with pytest.raises(ValueError, match="write_ratio"):
        Workload(write_ratio=1.5)


# --- the shipped data set and custom ones ----------------------------------------------------


def test_shipped_dataset_is_consistent() -> None:
    data = shipped_dataset()
    assert len(data.queries) >= 120
    assert len(data.memories) >= 250
    assert "MIT" in data.license
    keys = {(m.user_id, m.key) for m in data.memories}
    assert len(keys) == len(data.memories)
    for query in data.queries:
        assert query.evidence
        assert all((query.user_id, key) in keys for key in query.evidence), query.question
    turns = [m for m in data.memories if "session" in m.metadata]
    assert turns
    assert all({"speaker", "date"} <= set(m.metadata) for m in turns)
    categories = {q.category for q in data.queries}
    assert {"temporal", "speaker", "conversation", "fact", "long-reply", "photo"} <= categories
    captions = [m for m in turns if "caption" in m.metadata]
    assert captions
    assert all(isinstance(m.metadata["caption"], str) for m in captions)
    assert sum(len(m.value) > 700 and m.metadata["speaker"] == "Assistant" for m in turns) >= 10


def test_jsonl_and_gzip_datasets(tmp_path: Path) -> None:
    lines = [
        {"user_id": "u", "key": "pet", "value": "A grey cat called Miso", "metadata": {}},
        {"user_id": "u", "question": "What is the cat called?", "evidence": ["pet"]},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    (tmp_path / "set.jsonl").write_text(text)
    (tmp_path / "set.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    for name in ("set.jsonl", "set.jsonl.gz"):
        data = load_dataset(tmp_path / name)
        assert [m.key for m in data.memories] == ["pet"]
        assert data.queries[0].evidence == ("pet",)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"memories": [], "queries": []}', "at least one memory"),
        ('{"user_id": "u", "key": "k"}', "'value'"),
        ('{"user_id": "u", "question": "q", "evidence": "k"}', "evidence"),
        ("not json", "line 1: not JSON"),
    ],
)
def test_bad_datasets_are_invalid_input(text: str, problem: str) -> None:
    with pytest.raises(InvalidInputError, match=problem):
        parse_dataset(text, "mine.jsonl")


def test_missing_dataset_file_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot read data set"):
        load_dataset(tmp_path / "nope.json")


async def test_only_the_past_may_answer(tmp_path: Path) -> None:
    """With ``cutoff_seq`` the later turn, which matches the question better, is not stored
    yet when the question is asked; without it, it crowds out the real evidence."""
    memories = [
        {"user_id": "u", "key": "t1", "value": "We adopted a kitten, Miso", "metadata": {"seq": 1}},
        {
            "user_id": "u",
            "key": "t2",
            "value": "What is the kitten you adopted called? The kitten, Miso?",
            "metadata": {"seq": 2},
        },
    ]
    question = {"user_id": "u", "question": "What is the adopted kitten called?"}
    past = {**question, "evidence": ["t1"], "cutoff_seq": 2}
    anytime = {**question, "evidence": ["t1"]}
    async with SQLBackend(f"sqlite:///{tmp_path / 'past.db'}") as store:
        replayed = await measure_relevance(
            store,
            parse_dataset(json.dumps({"memories": memories, "queries": [past]}), "past"),
            lambda user: f"{EVAL_USER_PREFIX}past-{user}",
        )
        leaked = await measure_relevance(
            store,
            parse_dataset(json.dumps({"memories": memories, "queries": [anytime]}), "any"),
            lambda user: f"{EVAL_USER_PREFIX}any-{user}",
        )
    assert replayed.recall_at_1 == 1.0
    assert leaked.recall_at_1 == 0.0
    assert leaked.recall_at_10 == 1.0


# --- a full run ----------------------------------------------------------------------------


def substring_baseline_recall_at_10() -> float:
    """What ``value LIKE '%question%'`` finds on the shipped set."""
    data = shipped_dataset()
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE m (user_id TEXT, key TEXT, value TEXT)")
    db.executemany(
        "INSERT INTO m VALUES (?, ?, ?)", [(m.user_id, m.key, m.value) for m in data.memories]
    )
    total = 0.0
    for query in data.queries:
        found = [
            key
            for (key,) in db.execute(
                "SELECT key FROM m WHERE user_id = ? AND value LIKE '%' || ? || '%' LIMIT 10",
                (query.user_id, query.question),
            )
        ]
        total += recall_at(found, query.evidence, 10)
    return total / len(data.queries)


async def test_full_run_on_null_and_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with NullBackend() as null, SQLBackend(f"sqlite:///{path}") as store:
        await store.store("alice", "pet", "Alice has a grey cat", {"mine": True})
        phases: set[tuple[str, str]] = set()
        report = await evaluate(
            [null, store],
            workload=SMALL,
            progress=lambda name, phase, done, total: phases.add((name, phase)),
        )
        alice = await store.retrieve("alice", "pet")
    assert alice is not None
    assert alice.value == "Alice has a grey cat"
    assert rows_of_eval_users(path) == 0

    assert [r.name for r in report.results] == ["null", "sql (sqlite)"]
    assert {phase for _, phase in phases} == {"checks", "relevance", "latency", "concurrency"}
    nothing, sqlite = report.results
    for result in report.results:
        assert result.available
        assert [c.name for c in result.checks] == list(CHECKS)
        assert list(result.latency) == list(OPERATIONS)
        assert result.latency["store"].count == SMALL.size
        assert result.latency["retrieve"].count == SMALL.repetitions
        assert result.concurrency is not None
        assert result.concurrency.tasks == SMALL.concurrency
        assert result.relevance is not None
        assert result.relevance.queries == len(shipped_dataset().queries)
        assert not result.errors
        assert 0 <= result.score.total <= 100

    assert not any(c.passed for c in nothing.checks)
    assert all(c.reason for c in nothing.checks)
    assert nothing.relevance is not None
    assert nothing.relevance.recall_at_10 == 0.0
    assert nothing.privacy.location == "nowhere (stores nothing)"
    assert (nothing.score.availability, nothing.score.functionality) == (20.0, 0.0)

    assert all(c.passed for c in sqlite.checks), sqlite.checks
    assert sqlite.privacy.location == str(path)
    assert not sqlite.privacy.leaves_machine
    assert not sqlite.privacy.needs_key
    assert sqlite.cost.note == "0, local"
    assert sqlite.cost.network_calls == 0
    assert sqlite.score.privacy == 20.0
    assert sqlite.score.total > nothing.score.total

    relevance = sqlite.relevance
    assert relevance is not None
    baseline = substring_baseline_recall_at_10()
    assert relevance.recall_at_10 >= baseline + 0.3, (relevance, baseline)
    assert relevance.recall_at_1 <= relevance.recall_at_5 <= relevance.recall_at_10
    assert 0 < relevance.mrr_at_10 <= 1
    assert report.recommendation.startswith("Use sql (sqlite)")


async def test_report_round_trips_through_json(tmp_path: Path) -> None:
    async with NullBackend() as null, SQLBackend(f"sqlite:///{tmp_path / 'm.db'}") as store:
        report = await evaluate([null, store], workload=SMALL)
    text = report.to_json()
    again = EvaluationReport.from_json(text)
    assert again == report
    assert again.to_json() == text
    markdown = report.to_markdown()
    assert markdown.startswith("# asyncmem evaluation")
    assert "| sql (sqlite) | store |" in markdown
    assert report.recommendation in markdown


async def test_chart_shows_score_throughput_latency_and_relevance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    async with NullBackend() as null, SQLBackend(f"sqlite:///{tmp_path / 'm.db'}") as store:
        report = await evaluate([null, store], workload=SMALL)
    drawn: list[Any] = []
    close = plt.close
    monkeypatch.setattr(plt, "close", drawn.append)
    chart = write_chart(report, tmp_path / "eval.png")
    assert chart.read_bytes().startswith(b"\x89PNG")
    (figure,) = drawn
    axes = {ax.get_title().split()[0]: ax for ax in figure.axes}
    assert set(axes) == {"Score", "Throughput", "Latency", "Relevance"}
    texts = {name: [t.get_text() for t in ax.texts] for name, ax in axes.items()}
    null, sqlite = report.results
    assert f"{null.score.total:.1f}" in texts["Score"]
    assert f"{sqlite.score.total:.1f}" in texts["Score"]
    assert sqlite.concurrency is not None
    assert f"{sqlite.concurrency.ops_per_s:,.0f} ops/s" in texts["Throughput"]
    assert texts["Relevance"].count("0.00") >= 4, "the null backend's zeros are labelled"
    renderer = figure.canvas.get_renderer()
    legend = axes["Latency"].get_legend().get_window_extent(renderer)
    plot = axes["Latency"].get_window_extent(renderer)
    assert legend.y1 <= plot.y0, "the percentile legend sits below the bars, not over them"
    close(figure)


async def test_chart_without_matplotlib_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with NullBackend() as null:
        report = await evaluate([null], workload=SMALL)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"asyncmem\[chart\]"):
        write_chart(report, tmp_path / "eval.png")


# --- failures: cleanup still happens ---------------------------------------------------------


class ListsOldestFirst(SQLBackend):
    """A store with one broken promise: list order."""

    async def list_keys(self, user_id: str) -> list[str]:
        return list(reversed(await super().list_keys(user_id)))


class QueriesBreakDown(SQLBackend):
    """A store whose search fails after a while, as a flaky server's would."""

    def __init__(self, url: str, *, fail_after: int, error: Exception) -> None:
        super().__init__(url)
        self.queries_left = fail_after
        self.error = error

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[Any]:
        self.queries_left -= 1
        if self.queries_left < 0:
            raise self.error
        return await super().query(user_id, text, limit)


async def test_cleanup_after_a_failed_check(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with ListsOldestFirst(f"sqlite:///{path}") as store:
        await store.store("bob", "job", "Bob is a plumber")
        report = await evaluate([store], workload=SMALL)
        assert await store.list_keys("bob") == ["job"]
    (result,) = report.results
    failed = {c.name: c.reason for c in result.checks if not c.passed}
    assert failed == {"list_order": "list_keys is not most recently updated first"}
    assert rows_of_eval_users(path) == 0
    assert result.score.functionality < 40


async def test_cleanup_after_a_backend_error_mid_run(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    error = BackendError("query failed: database error")
    async with QueriesBreakDown(f"sqlite:///{path}", fail_after=30, error=error) as store:
        report = await evaluate([store], workload=SMALL)
    (result,) = report.results
    assert result.relevance is None
    assert any(e.startswith("relevance: BackendError") for e in result.errors)
    assert any(e.startswith("latency: BackendError") for e in result.errors)
    assert result.concurrency is not None
    assert result.concurrency.errors > 0
    assert rows_of_eval_users(path) == 0


async def test_cleanup_when_something_unexpected_escapes(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = QueriesBreakDown(f"sqlite:///{path}", fail_after=40, error=RuntimeError("bug"))
    async with store:
        with pytest.raises(RuntimeError, match="bug"):
            await evaluate([store], workload=SMALL)
    assert rows_of_eval_users(path) == 0


async def test_an_unavailable_backend_scores_zero() -> None:
    backend = NullBackend()
    await backend.aclose()
    report = await evaluate([backend], workload=SMALL)
    (result,) = report.results
    assert not result.available
    assert result.score.total == 0
    assert result.checks == []
    assert "none can be recommended" in report.recommendation


# --- the command -----------------------------------------------------------------------------


def test_cli_eval_writes_reports_and_never_the_real_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("ASYNCMEM_BACKEND", "ASYNCMEM_URL", "HONCHO_URL", "HONCHO_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    args = ["eval", "--size", "30", "--concurrency", "3"]
    code = main([*args, "--json", str(out_json), "--markdown", str(out_md)])
    captured = capsys.readouterr()
    assert code == 0
    assert "sql (sqlite)" in captured.out
    assert "recall@10" in captured.out
    assert "relevance" in captured.err
    report = EvaluationReport.from_json(out_json.read_text())
    assert [r.name for r in report.results] == ["null", "sql (sqlite)"]
    assert report.workload.size == 30
    assert out_md.read_text().startswith("# asyncmem evaluation")
    assert not any((tmp_path / "data").rglob("*.db"))
    assert not any((tmp_path / "home").rglob("*.db"))


def test_cli_eval_rejects_a_bad_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    code = main(["eval", "--backend", "null", "--size", "5", "--dataset", str(bad)])
    assert code == 1
    assert "not JSON" in capsys.readouterr().err


def test_cli_eval_rejects_a_zero_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--size", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err


async def test_every_store_passes_and_is_left_clean(
    store: MemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The evaluator on each persistent backend of the shared suite (PostgreSQL included)."""
    fixed = uuid.UUID(int=0xE7A1)
    monkeypatch.setattr(runner.uuid, "uuid4", lambda: fixed)
    await store.store("carol", "job", "Carol is a pilot")
    report = await evaluate([store], workload=SMALL)
    (result,) = report.results
    assert all(c.passed for c in result.checks), result.checks
    assert not result.errors
    assert result.relevance is not None
    assert result.relevance.recall_at_10 >= substring_baseline_recall_at_10() + 0.3
    assert result.privacy.leaves_machine is store.is_cloud
    if result.cost.network_calls:
        assert "round trips" in result.cost.note
    base = f"{EVAL_USER_PREFIX}{fixed.hex}"
    users = [f"{base}-load"] + [f"{base}-rel{i}" for i in range(5)]
    users += [f"{base}-check-{name}{end}" for name in CHECKS for end in ("", "-other")]
    for user in users:
        assert await store.list_keys(user) == [], user
    assert await store.list_keys("carol") == ["job"]
