"""Wall time of ``asyncmem`` commands from a cold start: a new process each time.

    python benchmarks/cold_start.py --repeat 15

Each command runs ``--repeat`` times against a SQLite file of a few memories made first (the
file's schema at head, so no migration runs), and the median, minimum and maximum wall time
are printed with the median CPU time (user + system) of the process, next to a bare
``python -c pass`` and ``import sqlalchemy`` for the machine's own floor. On a shared, loaded
machine the CPU time is the steadier number. Where the time goes:
``python -X importtime -m asyncmem query ...``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import sqlalchemy'": [sys.executable, "-c", "import sqlalchemy"],
    "asyncmem --version": [sys.executable, "-m", "asyncmem", "--version"],
    "asyncmem query": [sys.executable, "-m", "asyncmem", "query", "alice", "What is her cat?"],
    "asyncmem get": [sys.executable, "-m", "asyncmem", "get", "alice", "pet"],
    "asyncmem store": [sys.executable, "-m", "asyncmem", "store", "alice", "job", "a nurse"],
    "asyncmem list": [sys.executable, "-m", "asyncmem", "list", "alice"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, ASYNCMEM_URL=f"sqlite:///{Path(scratch) / 'memory.db'}")
        env.pop("ASYNCMEM_BACKEND", None)
        subprocess.run(
            [sys.executable, "-m", "asyncmem", "store", "alice", "pet", "a grey cat called Miso"],
            env=env,
            check=True,
            capture_output=True,
        )
        print(f"{'command':<32} {'median':>8} {'min':>8} {'max':>8} {'cpu':>8}", end="")
        print(f"   (seconds, {args.repeat} runs)")
        for name, argv in COMMANDS.items():
            times, cpu = [], []
            for _ in range(args.repeat):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                subprocess.run(argv, env=env, check=True, capture_output=True)
                times.append(time.perf_counter() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            print(
                f"{name:<32} {statistics.median(times):8.3f} {min(times):8.3f} "
                f"{max(times):8.3f} {statistics.median(cpu):8.3f}"
            )


if __name__ == "__main__":
    main()
