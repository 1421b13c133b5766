"""The ``asyncmem`` command: small functions over the public API, one per subcommand."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import asyncmem
from asyncmem.backend import MemoryBackend
from asyncmem.config import open_backend
from asyncmem.errors import AsyncmemError
from asyncmem.sql import migrate
from asyncmem.sql.engine import (
    default_path,
    make_engine,
    normalize_url,
    prepare_sqlite_file,
    sqlite_path,
)
from asyncmem.sql.store import SQLBackend

__all__ = ["main"]

DEMO_MEMORIES = [
    ("pet", "Alice has a grey cat called Miso who sleeps on the piano."),
    ("job", "Alice works night shifts as a nurse at St. Mary's hospital."),
    ("food", "Alice loves spicy Thai curries but cannot stand olives."),
    ("trip", "Alice is planning a hiking trip to the Dolomites next July."),
    ("sister", "Alice's sister Jenny lives in Toronto and teaches piano."),
]
DEMO_QUESTIONS = [
    "What is the name of Alice's cat?",
    "Which hospital does she work at?",
    "Where does her sister live?",
    "When are the Dolomites hikes planned?",
]


def _info(args: argparse.Namespace) -> int:
    backend = open_backend(args.backend)
    details = {
        "version": asyncmem.__version__,
        "backend": backend.backend_name,
        "is_cloud": backend.is_cloud,
        "default_path": str(default_path()),
    }
    if isinstance(backend, SQLBackend):
        details["url"] = backend.url
        details["schema_head"] = migrate.head_revision()
    print(json.dumps(details, indent=2))
    return 0


async def _demo(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        spec = args.backend or f"sqlite:///{Path(scratch) / 'demo.db'}"
        backend: MemoryBackend = open_backend(spec)
        async with backend:
            print(f"backend: {backend.backend_name}")
            user = "asyncmem-demo"
            for key, value in DEMO_MEMORIES:
                await backend.store(user, key, value, {"source": "demo"})
            print(f"stored {len(DEMO_MEMORIES)} memories for {user!r}\n")
            for question in DEMO_QUESTIONS:
                print(f"? {question}")
                for rank, hit in enumerate(await backend.query(user, question, limit=3), 1):
                    print(f"  {rank}. [{hit.key}] {hit.value}  (score {hit.score:.3f})")
            await backend.forget_user(user)
    return 0


async def _db(args: argparse.Namespace) -> int:
    url = normalize_url(args.url)
    if args.action == "purge":
        async with SQLBackend(url) as backend:
            purged = await backend.purge_expired()
        print(f"purged {purged} expired memories from {backend.url}")
        return 0
    path = sqlite_path(url)
    if path is not None and args.action == "upgrade":
        prepare_sqlite_file(path)
    engine = make_engine(url, pooled=False)
    try:
        if args.action == "upgrade":
            await migrate.upgrade(engine, args.revision or "head")
        elif args.action == "downgrade":
            await migrate.downgrade(engine, args.revision or "base")
        revisions = await migrate.current(engine)
    finally:
        await engine.dispose()
    head = migrate.head_revision()
    at = ", ".join(revisions) or "none"
    print(f"database: {url.render_as_string(hide_password=True)}")
    print(f"revision: {at} (head: {head})")
    return 0


def _eval(args: argparse.Namespace) -> int:
    """Evaluate backends: null and a scratch SQLite file by default, Honcho when configured."""
    import contextlib
    import os
    import time
    from typing import cast

    from asyncmem.backend import MemoryBackend
    from asyncmem.evaluation import EvaluationReport, Workload, evaluate, write_chart
    from asyncmem.evaluation.report import BackendResult

    if args.size < 1 or args.concurrency < 1:
        print("asyncmem eval: error: --size and --concurrency must be at least 1", file=sys.stderr)
        return 2
    specs = list(args.backend or ["null", "sqlite"])
    if not args.backend and (os.environ.get("HONCHO_URL") or os.environ.get("HONCHO_BASE_URL")):
        specs.append("honcho?")
    workload = Workload(
        size=args.size,
        repetitions=min(300, args.size),
        concurrent_operations=min(2000, args.size),
        concurrency=args.concurrency,
        dataset=args.dataset,
    )
    tty = sys.stderr.isatty()
    shown: dict[str, str] = {}

    def progress(name: str, phase: str, done: int, total: int) -> None:
        if tty:
            filled = int(24 * done / max(total, 1))
            bar = "#" * filled + "." * (24 - filled)
            print(f"\r{name:<14} {phase:<12} [{bar}] {done}/{total}  ", end="", file=sys.stderr)
        elif shown.get(name) != phase:
            shown[name] = phase
            print(f"{name}: {phase} ...", file=sys.stderr)

    async def run() -> EvaluationReport:
        with tempfile.TemporaryDirectory(prefix="asyncmem-eval-") as scratch:
            async with contextlib.AsyncExitStack() as stack:
                backends: list[MemoryBackend] = []
                for spec in specs:
                    optional = spec.endswith("?")
                    spec = spec.rstrip("?")
                    if spec == "sqlite":
                        spec = f"sqlite:///{Path(scratch) / 'eval.db'}"
                    try:
                        backend = open_backend(spec)
                        backends.append(
                            cast(MemoryBackend, await stack.enter_async_context(backend))
                        )
                    except (AsyncmemError, ImportError) as exc:
                        if not optional:
                            raise
                        print(f"skipping {spec}: {exc}", file=sys.stderr)
                return await evaluate(backends, workload=workload, progress=progress)

    started = time.perf_counter()
    report = asyncio.run(run())
    if tty:
        print(file=sys.stderr)
    elapsed = time.perf_counter() - started

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
        f"{workload.concurrency}-task ops/s",
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
    for number, row in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if number == 0:
            print("  ".join("-" * w for w in widths))
    print("(latency columns: p50/p99 over one call at a time)")
    for r in report.results:
        if r.relevance is not None and r.relevance.recall_at_10 > 0:
            v = r.relevance
            print(
                f"{r.name} relevance on {v.dataset} ({v.queries} questions): recall@1 "
                f"{v.recall_at_1:.3f}, recall@5 {v.recall_at_5:.3f}, recall@10 "
                f"{v.recall_at_10:.3f}, MRR@10 {v.mrr_at_10:.3f}"
            )
        for error in r.errors:
            print(f"{r.name}: {error}")
    print(report.recommendation)
    print(f"evaluated {len(report.results)} backend(s) in {elapsed:.1f} s")
    if args.json:
        Path(args.json).write_text(report.to_json() + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(report.to_markdown(), encoding="utf-8")
    if args.chart:
        try:
            write_chart(report, args.chart)
        except ImportError as exc:
            print(f"asyncmem: error: {exc}", file=sys.stderr)
            return 1
        print(f"chart: {args.chart}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncmem", description=__doc__)
    parser.add_argument("--version", action="version", version=asyncmem.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="show the configured backend and versions")
    info.add_argument("--backend", help="null, sqlite or a database URL")

    demo = sub.add_parser("demo", help="store a few memories in a scratch store and query them")
    demo.add_argument("--backend", help="null or a database URL (default: a temporary file)")

    ev = sub.add_parser("eval", help="compare backends: latency, relevance, privacy, score")
    ev.add_argument(
        "--backend",
        action="append",
        help="null, sqlite (a temporary file), honcho or a database URL; repeatable "
        "(default: null and sqlite, plus honcho when HONCHO_URL is set)",
    )
    ev.add_argument(
        "--size",
        type=int,
        default=2000,
        help="memories in the timed set (default 2000; a smaller set also times fewer calls)",
    )
    ev.add_argument("--concurrency", type=int, default=32, help="concurrent tasks")
    ev.add_argument("--dataset", help="your own labelled JSON/JSONL set (default: the shipped one)")
    ev.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    ev.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    ev.add_argument("--chart", metavar="PATH", help="draw a PNG chart (needs asyncmem[chart])")

    db = sub.add_parser("db", help="manage the SQL schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "downgrade", "current", "purge"])
    db.add_argument("revision", nargs="?", help="target revision (default: head / base)")
    db.add_argument("--url", help="database URL (default: ASYNCMEM_URL or the embedded file)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failed, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "info":
            return _info(args)
        if args.command == "demo":
            return asyncio.run(_demo(args))
        if args.command == "eval":
            return _eval(args)
        if args.command == "db":
            if args.url is None:
                args.url = open_backend_url()
            return asyncio.run(_db(args))
    except AsyncmemError as exc:
        print(f"asyncmem: error: {exc}", file=sys.stderr)
        return 1
    return 2  # pragma: no cover - argparse rejects unknown commands first


def open_backend_url() -> str | None:
    """The URL the environment names, for commands that work on the database itself."""
    import os

    return os.environ.get("ASYNCMEM_URL") or None
