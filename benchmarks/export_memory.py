"""Peak memory of ``asyncmem export`` as the store grows: it should stay flat (``scan`` pages).

    python benchmarks/export_memory.py --sizes 10000,100000

Fills a scratch SQLite store with N memories (``store_many``), runs ``asyncmem export`` in a
child process and reports the child's peak resident memory and its run time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import SQLBackend
from benchmarks.workload import make_workload


async def fill(url: str, size: int) -> None:
    work = make_workload(size, questions=1)
    async with SQLBackend(url) as store:
        for start in range(0, size, 5000):
            chunk = work.items[start : start + 5000]
            items = [{"key": k, "value": v, "metadata": {"n": i}} for i, (k, v) in enumerate(chunk)]
            await store.store_many(f"user-{start // 5000}", items)


def export_peak(url: str, out: Path) -> tuple[float, float, float]:
    """(peak Python heap, peak RSS, both MiB; seconds) of one ``asyncmem export`` process."""
    script = (
        "import resource, sys, tracemalloc; from asyncmem.cli import main; "
        "tracemalloc.start(); code = main(sys.argv[1:]); "
        "print(tracemalloc.get_traced_memory()[1]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(code)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, "export", "--backend", url, "-o", str(out)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    elapsed = time.perf_counter() - start
    heap, rss = done.stdout.split()[-2:]
    return int(heap) / 2**20, int(rss) / 1024, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    print("| memories | export file | peak Python heap | peak RSS of the process | time |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for size in (int(s) for s in args.sizes.split(",")):
            url = f"sqlite:///{Path(scratch) / f'{size}.db'}"
            asyncio.run(fill(url, size))
            out = Path(scratch) / f"{size}.jsonl"
            heap, rss, seconds = export_peak(url, out)
            mib = out.stat().st_size / 2**20
            print(
                f"| {size:,} | {mib:.1f} MiB | {heap:.2f} MiB | {rss:.0f} MiB | {seconds:.1f} s |"
            )


if __name__ == "__main__":
    main()
