"""Where a ``store`` call spends its time: 3,000 stores on a scratch SQLite file, profiled.

    pip install pyinstrument
    python benchmarks/profile_store.py

Prints the time per store without the profiler, then pyinstrument's call tree.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyinstrument import Profiler

from asyncmem import SQLBackend


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        async with SQLBackend(f"sqlite:///{scratch}/profile.db") as backend:
            for i in range(200):
                await backend.store("u", f"warm{i}", "warm up value")
            start = time.perf_counter()
            for i in range(3000):
                await backend.store("u", f"k{i % 500}", f"value number {i} about the weekend")
            print(f"unprofiled: {(time.perf_counter() - start) / 3000 * 1e6:.0f} µs per store")
            profiler = Profiler(interval=0.001, async_mode="enabled")
            profiler.start()
            for i in range(3000):
                await backend.store("u", f"k{i % 500}", f"value number {i} about the weekend")
            profiler.stop()
    print(profiler.output_text(unicode=True, color=False))


if __name__ == "__main__":
    asyncio.run(main())
