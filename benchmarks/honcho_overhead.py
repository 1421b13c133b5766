"""The Honcho adapter's own cost per call: ``HonchoBackend`` awaited from an event loop
against the same HTTP calls made with the ``honcho-ai`` SDK directly, in the calling thread.

Both talk to the in-memory fake server of ``tests/fake_honcho.py`` through
``httpx.MockTransport`` (no network), each on its own fake holding the same memories, so
the difference is what the adapter adds: input checks, id hashing, JSON of metadata, the
thread-pool hop, error translation and result mapping. With ``--url`` both talk to a live
Honcho server instead, each in a fresh workspace of its own (deleted afterwards, sessions
first); the bearer token, if the server needs one, comes from ``HONCHO_API_KEY``.

    PYTHONPATH=. python benchmarks/honcho_overhead.py [--repeat 2000]
    HONCHO_API_KEY=... PYTHONPATH=. python benchmarks/honcho_overhead.py \
        --url http://127.0.0.1:8000 --repeat 300

Overhead is the median of paired differences (the arms alternate call by call, so drift hits
all of them). "SDK on thread" runs the same SDK calls through a one-thread pool from the event
loop: what any async wrapper of a synchronous SDK pays for the hop ("of which hop"). On a busy
machine that hop waits for a core and the GIL, which inflates every wall-clock p50; the
minimums and the CPU time per call (all threads of this process) are steadier.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import honcho
import httpx
from honcho.api_types import SessionConfiguration

from asyncmem.honcho import HonchoBackend
from tests.fake_honcho import FakeHoncho, drop_workspace

URL = "http://127.0.0.1:8000"
USER = "alice"
KEYS = [f"fact{i}" for i in range(20)]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def value(i: int) -> str:
    return f"Alice fact number {i}: she keeps a grey cat and likes tulips {i}"


class Direct:
    """The same HTTP calls as the adapter, written straight against the SDK."""

    def __init__(self, url: str, api_key: str | None, workspace: str, http: httpx.Client) -> None:
        self.client = honcho.Honcho(
            base_url=url,
            api_key=api_key,
            workspace_id=workspace,
            max_retries=0,
            http_client=http,
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
                configuration=SessionConfiguration(reasoning={"enabled": False}),
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
    arms: list[Callable[[], Awaitable[Any]]], repeat: int
) -> list[tuple[list[float], float]]:
    """Alternate the arms call by call, so that drift (the fakes grow as stores add messages)
    hits all of them. Per arm: wall-clock µs per call, and mean CPU µs per call (all of the
    process's threads), which other processes on a busy machine do not inflate."""
    walls: list[list[float]] = [[] for _ in arms]
    cpus = [0] * len(arms)
    for _ in range(repeat):
        for i, arm in enumerate(arms):
            cpu, start = time.process_time_ns(), time.perf_counter_ns()
            await arm()
            walls[i].append((time.perf_counter_ns() - start) / 1000)
            cpus[i] += time.process_time_ns() - cpu
    return [(wall, cpu / repeat / 1000) for wall, cpu in zip(walls, cpus, strict=True)]


def diff(a: list[float], b: list[float]) -> float:
    return statistics.median(y - x for x, y in zip(a, b, strict=True))


def clients(url: str | None) -> tuple[httpx.Client, httpx.Client]:
    """The adapter's and the SDK's HTTP clients: on two fakes, or to the live server."""
    if url is None:
        return FakeHoncho().client(), FakeHoncho().client()
    return (
        httpx.Client(timeout=30.0, trust_env=False),
        httpx.Client(timeout=30.0, trust_env=False),
    )


async def main(repeat: int, url: str | None) -> None:
    api_key = os.environ.get("HONCHO_API_KEY") if url is not None else None
    run = uuid.uuid4().hex[:8]
    workspaces = (
        ("asyncmem", "asyncmem") if url is None else (f"am-bench-{run}-a", f"am-bench-{run}-d")
    )
    http_a, http_d = clients(url)
    base = url or URL
    direct = Direct(base, api_key, workspaces[1], http_d)
    backend = HonchoBackend(
        base_url=base,
        api_key=api_key,
        workspace_id=workspaces[0],
        http_client=http_a,
        max_retries=0,
    )
    try:
        async with backend:
            await measure(backend, direct, repeat)
    finally:
        if url is not None:
            async with HonchoBackend(
                base_url=base, api_key=api_key, workspace_id=workspaces[0], http_client=http_a
            ) as cleaner:
                await cleaner._call("cleanup", drop_workspace, workspaces[0])
            drop_workspace(direct.client, workspaces[1])
        http_a.close()
        http_d.close()


async def measure(backend: HonchoBackend, direct: Direct, repeat: int) -> None:
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
        f"{'operation':22} {'HTTP':>4} {'SDK':>6} {'SDK on thread':>13} {'adapter':>8} "
        f"{'overhead':>9} {'of which hop':>12} {'SDK min':>8} {'adapter min':>11} "
        f"{'SDK CPU':>8} {'adapter CPU':>11}"
    )
    print("(µs per call; p50 unless marked; overhead = adapter - SDK, paired)")
    worker = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()
    for name, sync_fn, async_fn, calls in cases:

        async def direct_arm(fn: Callable[[], Any] = sync_fn) -> Any:
            return fn()

        async def thread_arm(fn: Callable[[], Any] = sync_fn) -> Any:
            return await loop.run_in_executor(worker, fn)

        arms = [direct_arm, thread_arm, async_fn]
        await paired(arms, max(20, repeat // 10))
        (sdk, sdk_cpu), (hopped, _), (ours, our_cpu) = await paired(arms, repeat)
        print(
            f"{name:22} {calls:>4} {statistics.median(sdk):>6.0f} "
            f"{statistics.median(hopped):>13.0f} {statistics.median(ours):>8.0f} "
            f"{diff(sdk, ours):>9.0f} {diff(sdk, hopped):>12.0f} {min(sdk):>8.0f} "
            f"{min(ours):>11.0f} {sdk_cpu:>8.0f} {our_cpu:>11.0f}"
        )
    worker.shutdown()
    hop = [0.0] * repeat
    for i in range(repeat):
        start = time.perf_counter_ns()
        await loop.run_in_executor(backend._pool, int)
        hop[i] = (time.perf_counter_ns() - start) / 1000
    print(f"thread-pool hop alone, p50: {statistics.median(hop):.0f} µs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--url", help="a live Honcho server (default: the in-memory fake)")
    args = parser.parse_args()
    asyncio.run(main(args.repeat, args.url))
