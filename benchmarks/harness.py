"""Pieces the issue 16 / 17 probes share: scratch stores, percentiles, Markdown tables.

SQLite files go to tmpfs (``/dev/shm``) unless told otherwise, so the disk's noise stays out
of the ratios; a PostgreSQL URL gets a schema (or a database) of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from asyncmem import SQLBackend
from asyncmem.sql.engine import normalize_url

TMPFS = Path("/dev/shm")


@contextmanager
def scratch_dir(base: str | Path | None = None) -> Iterator[Path]:
    """A temporary directory under ``base``, else on tmpfs when there is one; removed after."""
    parent = Path(base) if base else (TMPFS if TMPFS.is_dir() else None)
    with tempfile.TemporaryDirectory(prefix="asyncmem-bench-", dir=parent) as path:
        yield Path(path)


def asyncpg_dsn(url: str) -> str:
    """``url`` as a plain ``postgresql://`` DSN (no SQLAlchemy driver suffix)."""
    return normalize_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def with_database(url: str, database: str) -> str:
    return normalize_url(url).set(database=database).render_as_string(hide_password=False)


async def pg_execute(url: str, sql: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(asyncpg_dsn(url), timeout=30)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@asynccontextmanager
async def pg_schema(url: str) -> AsyncIterator[str]:
    """A fresh schema name (whoever uses it creates it); the schema is dropped afterwards."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        await pg_execute(url, f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@asynccontextmanager
async def pg_database(url: str) -> AsyncIterator[str]:
    """A fresh, empty database on the server of ``url``; yields its URL, drops it afterwards."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    await pg_execute(url, f'CREATE DATABASE "{name}"')
    try:
        yield with_database(url, name)
    finally:
        await pg_execute(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def scratch_store(
    directory: Path, url: str | None = None, **options: Any
) -> AsyncIterator[SQLBackend]:
    """An open ``SQLBackend`` on a new SQLite file in ``directory``, or in a new schema at
    ``url`` (PostgreSQL)."""
    if url is None:
        path = directory / f"{uuid.uuid4().hex[:12]}.db"
        try:
            async with SQLBackend(f"sqlite:///{path}", **options) as backend:
                yield backend
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    async with (
        pg_schema(url) as schema,
        SQLBackend(url, schema=schema, auto_migrate=True, **options) as backend,
    ):
        yield backend


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"wants a whole number of at least 1: {text!r}")
    return number


def pct(samples_ns: Sequence[int], q: float) -> float:
    """The ``q`` quantile of ``samples_ns`` in milliseconds (nearest rank; NaN when empty)."""
    if not samples_ns:
        return float("nan")
    ordered = sorted(samples_ns)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


def ms(value: float) -> str:
    """Milliseconds, with as many digits as make sense."""
    if value != value:  # NaN
        return "—"
    if value < 1:
        return f"{value:.3f} ms"
    if value < 100:
        return f"{value:.2f} ms"
    return f"{value:.0f} ms"


def ratio(ours: float, floor: float) -> str:
    return "—" if not floor or floor != floor or ours != ours else f"{ours / floor:.2f}×"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def need(module: str, package: str) -> ModuleType:
    """Import an optional benchmark dependency, or stop with how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise SystemExit(
            f"{module} is missing ({package}): pip install -e '.[bench]' from the repository "
            f"root, or skip this part ({exc})"
        ) from exc


def cpu_count() -> int:
    return os.cpu_count() or 1
