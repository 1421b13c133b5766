"""One of several processes writing one store at once (see ``tests/test_concurrency.py``).

``python -m tests._concurrency_worker <url> <schema or -> <process> <tasks> <rounds>`` runs
``tasks`` concurrent tasks on one backend. Each round a task stores a key of its own, stores the
key every process shares, stores its process's key, and sometimes deletes its own key again.
It prints one JSON document: every acknowledged write with the entry the store returned, and
every error as its type and message (there should be none).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from asyncmem import AsyncmemError, SQLBackend

USER = "shared"
SHARED_KEY = "everyone"


async def _task(
    backend: SQLBackend, process: int, task: int, rounds: int, log: list[dict[str, Any]]
) -> None:
    for n in range(rounds):
        own = f"p{process}-t{task}-r{n}"
        writes = [
            (own, f"own value {own}"),
            (SHARED_KEY, f"shared write by {own}"),
            (f"p{process}", f"process write by {own}"),
        ]
        for key, value in writes:
            entry = await backend.store(USER, key, value, {"by": own})
            log.append(
                {
                    "op": "store",
                    "key": key,
                    "value": value,
                    "created_at": entry.created_at,
                    "updated_at": entry.updated_at,
                }
            )
        if n % 3 == 2:
            removed = await backend.delete(USER, own)
            log.append({"op": "delete", "key": own, "removed": removed})


async def _run(url: str, schema: str | None, process: int, tasks: int, rounds: int) -> None:
    log: list[dict[str, Any]] = []
    errors: list[str] = []
    async with SQLBackend(url, schema=schema, auto_migrate=True) as backend:
        results = await asyncio.gather(
            *(_task(backend, process, t, rounds, log) for t in range(tasks)),
            return_exceptions=True,
        )
    for result in results:
        if isinstance(result, BaseException):
            kind = "asyncmem" if isinstance(result, AsyncmemError) else "raw"
            errors.append(f"{kind} {type(result).__name__}: {result}")
    print(json.dumps({"log": log, "errors": errors}))


def main() -> None:
    url, schema, process, tasks, rounds = sys.argv[1:6]
    asyncio.run(_run(url, None if schema == "-" else schema, int(process), int(tasks), int(rounds)))


if __name__ == "__main__":
    main()
