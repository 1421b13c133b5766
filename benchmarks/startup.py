"""How long asyncmem takes to start, as whole processes (interpreter start included).

    python benchmarks/startup.py                # 15 runs of each, minimum and median
    python benchmarks/startup.py --repeat 30

- ``python -c pass``: the interpreter alone, the floor under everything else;
- ``import asyncmem``: the package with its public names still unloaded;
- ``asyncmem --help``: the installed console script (next to this interpreter);
- ``open + query``: ``import asyncmem``, open a SQLite file and run one query (what the lazy
  names cost when they are used);
- ``mcp SDK import``: what any server on the MCP SDK pays before it can answer;
- ``mcp initialize``: spawn ``python -m asyncmem mcp --backend sqlite:///…`` and time until the
  answer to the MCP ``initialize`` request arrives on its stdout.

The machines are shared: the minimum is the least disturbed run, the median the typical one.
``python -X importtime -c "import asyncmem"`` shows where the rest goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SCRIPT = Path(PYTHON).with_name("asyncmem")

OPEN_AND_QUERY = """
import asyncio, sys
from asyncmem import SQLBackend
async def main():
    async with SQLBackend(f"sqlite:///{sys.argv[1]}") as memory:
        await memory.query("alice", "which cat?")
asyncio.run(main())
"""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "startup-benchmark", "version": "0"},
    },
}


def run(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=_env())
    return time.perf_counter() - started


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def mcp_initialize(database: Path) -> float:
    """Seconds from spawn to the ``initialize`` answer."""
    command = [PYTHON, "-m", "asyncmem", "mcp", "--backend", f"sqlite:///{database}"]
    started = time.perf_counter()
    server = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env(), bufsize=0
    )
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    answer = json.loads(server.stdout.readline())
    elapsed = time.perf_counter() - started
    if answer.get("id") != 1 or "result" not in answer:
        raise SystemExit(f"unexpected answer to initialize: {answer}")
    server.stdin.close()
    server.wait(timeout=30)
    return elapsed


def measure(name: str, once: Callable[[], float], repeat: int) -> tuple[str, float, float]:
    once()  # warm the page cache and the bytecode files
    times = [once() for _ in range(repeat)]
    return name, min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        database = Path(scratch) / "memory.db"
        rows = [
            measure("python -c pass", lambda: run([PYTHON, "-c", "pass"]), args.repeat),
            measure("import asyncmem", lambda: run([PYTHON, "-c", "import asyncmem"]), args.repeat),
            measure("asyncmem --help", lambda: run([str(SCRIPT), "--help"]), args.repeat),
            measure(
                "open + query",
                lambda: run([PYTHON, "-c", OPEN_AND_QUERY, str(database)]),
                args.repeat,
            ),
            measure(
                "mcp SDK import",
                lambda: run([PYTHON, "-c", "import mcp.server.lowlevel, mcp.server.stdio"]),
                args.repeat,
            ),
            measure("mcp initialize", lambda: mcp_initialize(database), args.repeat),
        ]
    print(f"{'':<18}{'min s':>8}{'median s':>10}   ({args.repeat} runs, load {_load()})")
    for name, fastest, typical in rows:
        print(f"{name:<18}{fastest:>8.3f}{typical:>10.3f}")


def _load() -> str:
    try:
        return " ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:  # pragma: no cover - not on this platform
        return "?"


if __name__ == "__main__":
    main()
