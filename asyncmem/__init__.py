"""asyncmem: memory that lasts across sessions for async AI agents.

::

    async with open_backend() as memory:
        await memory.store("alice", "pet", "Alice has a grey cat called Miso")
        hits = await memory.query("alice", "What animal does Alice live with?")
"""

from importlib.metadata import PackageNotFoundError, version

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

try:
    __version__ = version("asyncmem")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

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
