"""Many processes, each with many tasks, writing one store at once (SQLite file, PostgreSQL).

Each process is started with ``sys.executable`` on a database nobody has opened yet, so the
first open (schema creation) races too. The processes write keys of their own, one key per
process that its tasks share, and one key that every task of every process overwrites. What
must hold afterwards:

- no call failed: no "database is locked", no timeout, no error of any kind;
- every acknowledged write of a key nobody else writes is there with its exact value (or gone,
  when its last acknowledged operation was a delete);
- a key written concurrently holds the acknowledged write with the latest ``updated_at``
  (last writer wins, as documented), and every write to it kept the first ``created_at``;
- one row per (user, key), one search-index entry per row; ``list_keys`` is in
  ``updated_at`` order.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from asyncmem import SQLBackend
from tests._concurrency_worker import SHARED_KEY, USER
from tests.backends import PG_ENABLED, PG_URL, pg_schema
from tests.search_index import async_problems, sqlite_problems

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = 4
TASKS = 8
ROUNDS = 4


@pytest.fixture(params=["sqlite", *(["postgresql"] if PG_ENABLED else [])])
async def fresh_database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str | None]]:
    """(URL, PostgreSQL schema) of a database nobody has opened yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'memory.db'}", None
    else:
        async with pg_schema() as schema:
            yield PG_URL, schema


async def _worker(url: str, schema: str | None, process: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests._concurrency_worker",
        url,
        schema or "-",
        str(process),
        str(TASKS),
        str(ROUNDS),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), timeout=120)
    assert child.returncode == 0, err.decode()[-3000:]
    report: dict[str, Any] = json.loads(out)
    return report


async def _duplicates(url: str, schema: str | None) -> list[Any]:
    """(user, key) pairs with more than one row; on SQLite, after both integrity checks."""
    find = "SELECT user_id, key FROM memories GROUP BY user_id, key HAVING COUNT(*) > 1"
    if schema is None:
        raw = sqlite3.connect(make_url(url).database or "")
        try:
            assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert sqlite_problems(raw) == []
            return raw.execute(find).fetchall()
        finally:
            raw.close()
    import asyncpg

    connection = await asyncpg.connect(url, server_settings={"search_path": schema})
    try:
        assert await async_problems(connection.fetch) == []
        return list(await connection.fetch(find))
    finally:
        await connection.close()


def _latest(writes: list[dict[str, Any]]) -> set[str]:
    newest = max(write["updated_at"] for write in writes)
    return {write["value"] for write in writes if write["updated_at"] == newest}


@pytest.mark.slow
async def test_processes_and_tasks_lose_nothing(fresh_database: tuple[str, str | None]) -> None:
    url, schema = fresh_database
    reports = await asyncio.gather(*(_worker(url, schema, p) for p in range(PROCESSES)))
    errors = [error for report in reports for error in report["errors"]]
    assert errors == []
    log = [entry for report in reports for entry in report["log"]]

    by_key: dict[str, list[dict[str, Any]]] = {}
    for entry in log:
        by_key.setdefault(entry["key"], []).append(entry)
    expected_own: dict[str, str | None] = {}
    for key, entries in by_key.items():
        if key.startswith("p") and "-t" in key:
            last = entries[-1]
            expected_own[key] = last["value"] if last["op"] == "store" else None
            if last["op"] == "delete":
                assert last["removed"] is True
    assert len(expected_own) == PROCESSES * TASKS * ROUNDS

    async with SQLBackend(url, schema=schema) as backend:
        for key, value in expected_own.items():
            entry = await backend.retrieve(USER, key)
            assert (entry.value if entry else None) == value, key
        for key in [SHARED_KEY, *(f"p{p}" for p in range(PROCESSES))]:
            writes = [entry for entry in by_key[key] if entry["op"] == "store"]
            current = await backend.retrieve(USER, key)
            assert current is not None
            assert current.value in _latest(writes), f"{key}: not the last writer's value"
            assert current.updated_at == max(write["updated_at"] for write in writes)
            assert {write["created_at"] for write in writes} == {current.created_at}
        listed = await backend.list_keys(USER)
        present = {key for key, value in expected_own.items() if value is not None}
        assert sorted(listed) == sorted(
            present | {SHARED_KEY} | {f"p{p}" for p in range(PROCESSES)}
        )
        stamps = [(await backend.retrieve(USER, key)) for key in listed]
        times = [entry.updated_at for entry in stamps if entry is not None]
        assert times == sorted(times, reverse=True)
        hits = await backend.query(USER, "shared write", limit=1000)
        assert [hit.key for hit in hits].count(SHARED_KEY) == 1
    assert await _duplicates(url, schema) == []
    print(
        f"\n{backend.backend_name}: {PROCESSES} processes × {TASKS} tasks, "
        f"{len(log)} acknowledged operations checked"
    )
