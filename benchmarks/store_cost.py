"""What a ``store`` costs on this checkout against an older commit's code, on the same data.

    python benchmarks/store_cost.py --base 3cc52d2                 # SQLite on tmpfs
    python benchmarks/store_cost.py --base 3cc52d2 --url postgresql://postgres@127.0.0.1:5432/test

Issue 16 asks that a store cost at most 1.2x what it did before per-user postings (3cc52d2).
Two versions of the package cannot share a process, so each round runs one worker process
per code tree, in alternating order (``git archive`` of ``--base`` into a scratch directory
against the working tree), each on a fresh database of its own, and the p50 of each kind
is taken over all rounds' samples. Kinds, each timed ``--count`` times per round after
``--preload`` short memories of the same user:

- short: a new key with a ``workload.py`` sentence (8-20 words), no metadata;
- long: a new key with a RealMem turn's text (``--turns``; 400-1,500 characters), no metadata;
- turn: RealMem's turns in conversation order with their ``session``, ``speaker`` and
  ``date``: each one is its conversation's new last turn;
- update: an existing short memory stored again with a new sentence.

The worker imports ``asyncmem`` from the tree on its ``PYTHONPATH`` and nothing else of it.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TURNS = ROOT.parent / "shared" / "data" / "realmem" / "realmem-turns.json.gz"
KINDS = ("short", "long", "turn", "update")


def _long_texts(memories: list[dict[str, Any]]) -> list[str]:
    return [m["value"] for m in memories if 400 <= len(m["value"]) <= 1500]


def _turns(memories: list[dict[str, Any]]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for m in memories:
        meta = m.get("metadata") or {}
        if "session" in meta:
            kept = {k: meta[k] for k in ("session", "speaker", "date") if k in meta}
            yield m["key"], m["value"], kept


async def _work(url: str, schema: str | None, count: int, preload: int, turns: Path) -> None:
    import workload  # benchmarks/ is this script's directory, so it is on sys.path

    from asyncmem import SQLBackend

    memories = json.loads(gzip.decompress(turns.read_bytes()))["memories"]
    longs = _long_texts(memories)
    conversation = _turns(memories)
    rng = random.Random(11)
    user = "cost-user"
    samples: dict[str, list[int]] = {kind: [] for kind in KINDS}
    options: dict[str, Any] = {"schema": schema, "auto_migrate": True} if schema else {}
    async with SQLBackend(url, **options) as backend:
        for i in range(preload):
            await backend.store(user, f"pre-{i:06d}", workload.sentence(rng))

        async def timed(kind: str, key: str, value: str, meta: dict[str, Any] | None) -> None:
            start = time.perf_counter_ns()
            await backend.store(user, key, value, meta)
            samples[kind].append(time.perf_counter_ns() - start)

        for i in range(count):
            # The kinds take turns, so a slow moment of the machine hits all of them.
            await timed("short", f"short-{i:06d}", workload.sentence(rng), None)
            await timed("long", f"long-{i:06d}", longs[i % len(longs)], None)
            key, value, meta = next(conversation)
            await timed("turn", key, value, meta)
            await timed("update", f"pre-{rng.randrange(preload):06d}", workload.sentence(rng), None)
    print(json.dumps(samples))


def _run_worker(tree: Path, args: argparse.Namespace) -> dict[str, list[int]]:
    command = [sys.executable, str(HERE / "store_cost.py"), "--worker", "--turns", str(args.turns)]
    command += ["--count", str(args.count), "--preload", str(args.preload)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    schema = None
    with tempfile.TemporaryDirectory(prefix="asyncmem-cost-", dir=args.dir) as scratch:
        if args.url:
            schema = f"bench_{uuid.uuid4().hex[:12]}"
            command += ["--target", args.url, "--schema", schema]
        else:
            command += ["--target", f"sqlite:///{scratch}/cost.db"]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        finally:
            if schema:
                sys.path.insert(0, str(ROOT))
                from benchmarks.harness import pg_execute

                asyncio.run(pg_execute(args.url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    if done.returncode:
        raise SystemExit(f"worker on {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, list[int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _archive(base: str, into: Path) -> Path:
    tree = into / "base"
    tree.mkdir()
    blob = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", base, "asyncmem", "migrations"],
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.TemporaryFile() as tar:
        tar.write(blob)
        tar.seek(0)
        with tarfile.open(fileobj=tar) as archive:
            archive.extractall(tree, filter="data")
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="3cc52d2", help="the commit to compare against")
    parser.add_argument("--url", help="PostgreSQL URL (default: SQLite files on tmpfs)")
    parser.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else None)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--count", type=int, default=250, help="stores of each kind per round")
    parser.add_argument("--preload", type=int, default=2000)
    parser.add_argument("--turns", type=Path, default=TURNS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(_work(args.target, args.schema, args.count, args.preload, args.turns))
        return
    if not args.turns.is_file():
        raise SystemExit(f"{args.turns} is missing: give --turns (RealMem's turns file)")
    sys.path.insert(0, str(ROOT))
    from benchmarks.harness import loadavg, ms, pct, table

    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    pooled: dict[str, dict[str, list[int]]] = {"base": {}, "head": {}}
    with tempfile.TemporaryDirectory(prefix="asyncmem-cost-") as scratch:
        trees = {"base": _archive(args.base, Path(scratch)), "head": ROOT}
        for n in range(args.rounds):
            order = ("base", "head") if n % 2 == 0 else ("head", "base")
            for name in order:
                for kind, values in _run_worker(trees[name], args).items():
                    pooled[name].setdefault(kind, []).extend(values)
            print(f"round {n + 1}/{args.rounds} done, load {loadavg()}", file=sys.stderr)
    rows = []
    for kind in KINDS:
        base, ours = pct(pooled["base"][kind], 0.5), pct(pooled["head"][kind], 0.5)
        rows.append([kind, ms(base), ms(ours), f"{ours / base:.2f}×"])
    dialect = "postgresql" if args.url else "sqlite"
    print(
        f"\n{dialect}: store p50, {args.base} against {head} (working tree), {args.rounds} rounds"
    )
    print(f"× {args.count} stores of each kind after {args.preload} short memories")
    print(f"load {loadavg()}")
    print(table(["kind", args.base, head, "ratio"], rows))
    spread = [
        statistics.median(pooled["head"][k]) / statistics.median(pooled["base"][k]) for k in KINDS
    ]
    print(f"\nmedian ratio over kinds: {statistics.median(spread):.2f}×")


if __name__ == "__main__":
    main()
