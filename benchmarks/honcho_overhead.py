"""The Honcho adapter's own cost per call: ``HonchoBackend`` awaited from an event loop
against the same HTTP calls made with the ``honcho-ai`` SDK directly, in the calling thread.

Both talk to the in-memory fake server of ``tests/fake_honcho.py`` through
``httpx.MockTransport`` (no network), each on its own fake holding the same memories, so
the difference is what the adapter adds: input checks, id hashing, JSON of metadata, the
thread-pool hop, error translation and result mapping.

    PYTHONPATH=. python benchmarks/honcho_overhead.py [--repeat 2000]

Overhead is the median of paired differences (each SDK call is followed by the adapter's), so
drift affects both. On a busy machine the thread hop waits for a core, which inflates the
wall-clock p50: the minimums and the CPU time per call (all threads of this process) show
what the adapter itself costs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import honcho

from asyncmem.honcho import HonchoBackend
from tests.fake_honcho import FakeHoncho

URL = "http://127.0.0.1:8000"
USER = "alice"
KEYS = [f"fact{i}" for i in range(20)]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def value(i: int) -> str:
    return f"Alice fact number {i}: she keeps a grey cat and likes tulips {i}"


class Direct:
    """The same HTTP calls as the adapter, written straight against the SDK."""

    def __init__(self, fake: FakeHoncho) -> None:
        self.client = honcho.Honcho(
            base_url=URL,
            api_key="k",
            workspace_id="asyncmem",
            max_retries=0,
            http_client=fake.client(),
        )
        self.peer = "am-" + digest(USER)[:40]

    def key_filter(self, key: str) -> dict[str, Any]:
        return {"metadata": {"asyncmem": 1, "u": digest(USER), "k": digest(key)}}

    def store(self, key: str, text: str) -> None:
        found = self.client.sessions(filters=self.key_filter(key), size=100).items
        session = (
            found[0]
            if found
            else self.client.session(
                f"am-{digest(USER)[:24]}-{digest(key)[:24]}",
                metadata={"asyncmem": 1, "u": digest(USER), "k": digest(key)},
                peers=self.peer,
            )
        )
        session.add_messages(
            [honcho.MessageCreateParams(content=text, peer_id=self.peer, metadata={"rev": "r"})]
        )
        now = time.time()
        session.set_metadata(
            {
                "asyncmem": 1,
                "u": digest(USER),
                "k": digest(key),
                "user_id": USER,
                "key": key,
                "value": text,
                "meta": "{}",
                "rev": "r",
                "created_at": now,
                "updated_at": now,
            }
        )

    def retrieve(self, key: str) -> Any:
        found = self.client.sessions(filters=self.key_filter(key), size=100).items
        return found[0].metadata["value"] if found else None

    def query(self, words: list[str]) -> list[Any]:
        hits = [self.search(" ".join(words))]
        if len(words) > 1 and len({h.session_id for h in hits[0]}) < 10:
            hits += [self.search(word) for word in words]
        ids = list({h.session_id for found in hits for h in found})
        sessions = self.client.sessions(filters={"id": {"in": ids}}, size=100).items
        return [s.metadata["value"] for s in sessions]

    def search(self, text: str) -> list[Any]:
        return list(self.client.search(text, filters={"peer_id": self.peer}, limit=20))

    def list_keys(self) -> list[str]:
        filters = {"metadata": {"asyncmem": 1, "u": digest(USER)}}
        metas = [s.metadata for s in self.client.sessions(filters=filters, size=100)]
        return [m["key"] for m in sorted(metas, key=lambda m: -m["updated_at"])]

    def delete(self, key: str) -> bool:
        found = self.client.sessions(filters=self.key_filter(key), size=100).items
        for session in found:
            session.delete()
        return bool(found)


async def paired(
    sync_fn: Callable[[], Any], async_fn: Callable[[], Awaitable[Any]], repeat: int
) -> tuple[list[float], list[float], float, float]:
    """Alternate the two, so that drift (the fakes grow as stores add messages) hits both.

    Returns wall-clock µs per call of each, then mean CPU µs per call of each (all of the
    process's threads), which other processes on a busy machine do not inflate.
    """
    sdk, ours = [], []
    sdk_cpu = our_cpu = 0
    for _ in range(repeat):
        cpu, start = time.process_time_ns(), time.perf_counter_ns()
        sync_fn()
        sdk.append((time.perf_counter_ns() - start) / 1000)
        sdk_cpu += time.process_time_ns() - cpu
        cpu, start = time.process_time_ns(), time.perf_counter_ns()
        await async_fn()
        ours.append((time.perf_counter_ns() - start) / 1000)
        our_cpu += time.process_time_ns() - cpu
    return sdk, ours, sdk_cpu / repeat / 1000, our_cpu / repeat / 1000


async def main(repeat: int) -> None:
    fake_a, fake_d = FakeHoncho(), FakeHoncho()
    direct = Direct(fake_d)
    backend = HonchoBackend(base_url=URL, http_client=fake_a.client(), max_retries=0)
    async with backend:
        for i, key in enumerate(KEYS):
            await backend.store(USER, key, value(i))
            direct.store(key, value(i))
        counter = iter(range(10**9))
        cases: list[tuple[str, Callable[[], Any], Callable[[], Awaitable[Any]], int]] = [
            (
                "retrieve",
                lambda: direct.retrieve("fact2"),
                lambda: backend.retrieve(USER, "fact2"),
                1,
            ),
            (
                "query (one word)",
                lambda: direct.query(["tulips"]),
                lambda: backend.query(USER, "tulips?"),
                2,
            ),
            (
                "query (3 words, 1 hit)",
                lambda: direct.query(["grey", "cat", "7"]),
                lambda: backend.query(USER, "A grey cat, 7?"),
                5,
            ),
            ("list_keys (20 keys)", direct.list_keys, lambda: backend.list_keys(USER), 1),
            (
                "delete (missing key)",
                lambda: direct.delete("nope"),
                lambda: backend.delete(USER, "nope"),
                1,
            ),
            # Last: every store adds a message, and the fake's search reads them all.
            (
                "store (existing key)",
                lambda: direct.store("fact1", value(next(counter))),
                lambda: backend.store(USER, "fact1", value(next(counter))),
                3,
            ),
        ]
        print(
            f"{'operation':24} {'HTTP':>4} {'SDK p50':>8} {'adapter p50':>12} "
            f"{'overhead p50':>13} {'SDK min':>8} {'adapter min':>12} "
            f"{'SDK CPU':>8} {'adapter CPU':>12}   (µs per call)"
        )
        for name, sync_fn, async_fn, calls in cases:
            await paired(sync_fn, async_fn, max(20, repeat // 10))
            sdk_times, our_times, sdk_cpu, our_cpu = await paired(sync_fn, async_fn, repeat)
            sdk, ours = statistics.median(sdk_times), statistics.median(our_times)
            extra = statistics.median(b - a for a, b in zip(sdk_times, our_times, strict=True))
            print(
                f"{name:24} {calls:>4} {sdk:>8.0f} {ours:>12.0f} {extra:>13.0f} "
                f"{min(sdk_times):>8.0f} {min(our_times):>12.0f} {sdk_cpu:>8.0f} {our_cpu:>12.0f}"
            )
        loop = asyncio.get_running_loop()
        hop = [0.0] * repeat
        for i in range(repeat):
            start = time.perf_counter_ns()
            await loop.run_in_executor(backend._pool, int)
            hop[i] = (time.perf_counter_ns() - start) / 1000
        print(f"{'thread-pool hop alone':24} {0:>4} {'':>8} {statistics.median(hop):>12.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    asyncio.run(main(parser.parse_args().repeat))
