"""Export a store with ``asyncmem export`` and import it into an empty one with ``asyncmem
import``, through the installed executable, and check every memory came back exactly.

    python benchmarks/roundtrip.py                  # 10,000 memories of 100 users, SQLite
    python benchmarks/roundtrip.py --count 100000 --batch-size 1000

The source store is filled with ``SQLBackend.store`` (one awaited call per memory, so the
timestamps are real); only the two commands are timed, as whole processes (interpreter start
included). Equality is checked on every field, timestamps included, and on list order.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncmem import MemoryEntry, SQLBackend

WORDS = "cat piano nurse hiking curry sister Toronto July olive garden bike tea rain".split()


async def fill(url: str, count: int, users: int) -> None:
    async with SQLBackend(url) as store:
        for n in range(count):
            words = " ".join(WORDS[(n * 7 + i) % len(WORDS)] for i in range(12))
            await store.store(
                f"user-{n % users}",
                f"key-{n}",
                f'memory {n}: {words}; ünïcode ✓ "quotes"\nsecond line',
                {"n": n, "tags": [WORDS[n % len(WORDS)]], "nested": {"ok": n % 2 == 0}},
            )


async def snapshot(url: str, users: int) -> tuple[list[MemoryEntry], list[list[str]]]:
    async with SQLBackend(url) as store:
        entries = sorted([entry async for entry in store.scan()], key=lambda e: (e.user_id, e.key))
        orders = [await store.list_keys(f"user-{u}") for u in range(users)]
    return entries, orders


def executable() -> str:
    found = Path(sys.executable).parent / "asyncmem"
    return str(found) if found.exists() else shutil.which("asyncmem") or "asyncmem"


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=500)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="asyncmem-roundtrip-") as scratch:
        dump = Path(scratch) / "dump.jsonl"
        env = {**os.environ, "XDG_DATA_HOME": str(Path(scratch) / "xdg")}
        source_url = f"sqlite:///{Path(scratch) / 'source.db'}"
        target_url = f"sqlite:///{Path(scratch) / 'target.db'}"
        started = time.perf_counter()
        asyncio.run(fill(source_url, args.count, args.users))
        print(
            f"filled {args.count} memories of {args.users} users in "
            f"{time.perf_counter() - started:.1f} s"
        )
        exe = executable()
        export_s = timed([exe, "export", "--backend", source_url, "-o", str(dump)], env)
        lines = sum(1 for _ in dump.open("rb"))
        import_s = timed(
            [
                exe,
                "import",
                str(dump),
                "--backend",
                target_url,
                "--batch-size",
                str(args.batch_size),
            ],
            env,
        )
        source = asyncio.run(snapshot(source_url, args.users))
        target = asyncio.run(snapshot(target_url, args.users))
        exact = source == target
        size_mb = dump.stat().st_size / 1e6
        print(f"export: {lines} lines, {size_mb:.1f} MB in {export_s:.2f} s")
        print(
            f"import: {len(target[0])} memories in {import_s:.2f} s (batches of {args.batch_size})"
        )
        print(f"round trip exact (values, metadata, timestamps, list order): {exact}")
        if not exact:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
