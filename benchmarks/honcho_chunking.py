"""How a 1 MiB value is cut into Honcho messages, and what that costs the server.

Honcho counts each message's tokens with tiktoken inside the request handler, quadratic in
the length of a run without spaces (issue 19: one message of 25,000 emoji took 3.9 s on
Honcho 3.0.12). The fake server of ``tests/fake_honcho.py`` charges that cost as modelled
seconds (:func:`tests.fake_honcho.token_count_seconds`); this stores 1 MiB values through
``HonchoBackend`` on the fake, once per way of cutting them, and reports per value: the
messages, the ``…/messages`` requests (at most 100 messages each), the modelled server
seconds in all and of the slowest request (the one that must finish within the client's
timeout, 30 s by default), the client's own time to cut the value, and the wall time of the
whole ``store`` on the fake (which models the server's token counting, but does not sleep
it: a real server adds the modelled seconds).

    PYTHONPATH=. python benchmarks/honcho_chunking.py

"fixed N" is cutting every N characters (the adapter cut every 25,000 before issue 19);
"runs ≤ N B" is :func:`asyncmem.honcho._chunks` with ``max_run_bytes=N`` (the adapter's is
:data:`asyncmem.honcho.MAX_RUN_BYTES`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncmem.honcho as adapter
from asyncmem.backend import MAX_VALUE_BYTES
from tests.fake_honcho import FakeHoncho, fake_backend

Chunker = Callable[[str], list[str]]
ADAPTER_CHUNKS = adapter._chunks


def fixed(size: int) -> Chunker:
    def cut(value: str) -> list[str]:
        return [value[i : i + size] for i in range(0, len(value), size)] or [""]

    return cut


def runs(max_run_bytes: int) -> Chunker:
    def cut(value: str) -> list[str]:
        return ADAPTER_CHUNKS(value, max_run_bytes)

    return cut


def values() -> dict[str, str]:
    rng = random.Random(19)
    words = "the cat sat on a mat with tulips and grey zeppelin over blue hills".split()
    prose = " ".join(rng.choice(words) for _ in range(MAX_VALUE_BYTES // 4))[:MAX_VALUE_BYTES]
    return {
        "emoji (262,144)": "🐈" * (MAX_VALUE_BYTES // 4),
        "letters (1 MiB 'a')": "a" * MAX_VALUE_BYTES,
        "prose (1 MiB)": prose,
    }


async def measure(name: str, chunker: Chunker, value: str) -> str:
    fake = FakeHoncho()
    adapter._chunks = lambda text, *_: chunker(text)  # type: ignore[assignment]
    try:
        async with fake_backend(fake, timeout=600.0) as backend:
            await backend.store("bench", "warm", "up")
            fake.message_seconds.clear()
            start = time.perf_counter()
            chunks = chunker(value)
            cut_ms = (time.perf_counter() - start) * 1000
            start = time.perf_counter()
            await backend.store("bench", "big", value)
            store_ms = (time.perf_counter() - start) * 1000
    finally:
        adapter._chunks = ADAPTER_CHUNKS
    total, slowest = sum(fake.message_seconds), max(fake.message_seconds)
    late = " (times out at 30 s)" if slowest > 30 else ""
    return (
        f"| {name} | {len(chunks):,} | {len(fake.message_seconds)} | {total:.2f} | "
        f"{slowest:.2f}{late} | {cut_ms:.0f} | {store_ms:.0f} |"
    )


async def main(sizes: list[int], budgets: list[int]) -> None:
    schemes = [(f"fixed {n:,}", fixed(n)) for n in sizes]
    schemes += [(f"runs ≤ {n:,} B", runs(n)) for n in budgets]
    for label, value in values().items():
        print(f"\n{label}\n")
        print(
            "| cut | messages | requests | server s (modelled) | slowest request s | cut ms "
            "| store ms (fake, wall) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, chunker in schemes:
            print(await measure(name, chunker, value))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="25000,10000,5000,2000,1000")
    parser.add_argument("--budgets", default="16384,8192,4096,2048,1024")
    args = parser.parse_args()
    asyncio.run(
        main(
            [int(n) for n in args.sizes.split(",")],
            [int(n) for n in args.budgets.split(",")],
        )
    )
