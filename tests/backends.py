"""The backends the shared suites run on: a name → an async context manager factory.

Each factory gets the test's ``tmp_path`` and yields an open backend that no other test sees.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from asyncmem import MemoryBackend, NullBackend, SQLBackend

BackendFactory = Callable[[Path], AbstractAsyncContextManager[MemoryBackend]]


@asynccontextmanager
async def null_backend(tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    async with NullBackend() as backend:
        yield backend


@asynccontextmanager
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        yield backend


BACKEND_FACTORIES: dict[str, BackendFactory] = {
    "null": null_backend,
    "sqlite": sqlite_backend,
}
NON_PERSISTENT = frozenset({"null"})
"""Backends that store nothing: they run the input and lifecycle tests, not the semantics."""
