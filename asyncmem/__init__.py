"""asyncmem: memory that lasts across sessions for async AI agents.

::

    async with open_backend() as memory:
        await memory.store("alice", "pet", "Alice has a grey cat called Miso")
        hits = await memory.query("alice", "What animal does Alice live with?")

The names below load on first use, so ``import asyncmem`` (and the CLI's ``--help``) does not
pay for SQLAlchemy, aiosqlite or the Honcho SDK until a backend is made.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncmem.backend import (
        MAX_ID_LENGTH,
        MAX_LIMIT,
        MAX_METADATA_BYTES,
        MAX_VALUE_BYTES,
        MemoryBackend,
        MemoryEntry,
    )
    from asyncmem.config import open_backend
    from asyncmem.errors import (
        AsyncmemError,
        BackendClosedError,
        BackendError,
        BackendUnavailableError,
        InvalidInputError,
        SchemaError,
    )
    from asyncmem.honcho import HonchoBackend
    from asyncmem.null import NullBackend
    from asyncmem.sql.store import SQLBackend

    __version__: str

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_LIMIT",
    "MAX_METADATA_BYTES",
    "MAX_VALUE_BYTES",
    "AsyncmemError",
    "BackendClosedError",
    "BackendError",
    "BackendUnavailableError",
    "HonchoBackend",
    "InvalidInputError",
    "MemoryBackend",
    "MemoryEntry",
    "NullBackend",
    "SQLBackend",
    "SchemaError",
    "__version__",
    "open_backend",
]

_HOMES = {
    "MAX_ID_LENGTH": "asyncmem.backend",
    "MAX_LIMIT": "asyncmem.backend",
    "MAX_METADATA_BYTES": "asyncmem.backend",
    "MAX_VALUE_BYTES": "asyncmem.backend",
    "MemoryBackend": "asyncmem.backend",
    "MemoryEntry": "asyncmem.backend",
    "AsyncmemError": "asyncmem.errors",
    "BackendClosedError": "asyncmem.errors",
    "BackendError": "asyncmem.errors",
    "BackendUnavailableError": "asyncmem.errors",
    "InvalidInputError": "asyncmem.errors",
    "SchemaError": "asyncmem.errors",
    "HonchoBackend": "asyncmem.honcho",
    "NullBackend": "asyncmem.null",
    "SQLBackend": "asyncmem.sql.store",
    "open_backend": "asyncmem.config",
}
"""Where each public name lives (tests/test_public.py keeps this and ``__all__`` in step)."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("asyncmem")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise accept any attribute of the package.

    def __getattr__(name: str) -> object:
        if name == "__version__":
            value = _version()
        elif name in _HOMES:
            value = getattr(importlib.import_module(_HOMES[name]), name)
        else:
            raise AttributeError(f"module 'asyncmem' has no attribute {name!r}")
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
