"""The contract every backend meets: :class:`MemoryEntry`, :class:`MemoryBackend`, limits and
the input checks that turn bad arguments into :class:`~asyncmem.errors.InvalidInputError`
before anything is written.
"""

from __future__ import annotations

import asyncio
import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from asyncmem.errors import BackendClosedError, InvalidInputError

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_LIMIT",
    "MAX_METADATA_BYTES",
    "MAX_VALUE_BYTES",
    "BackendBase",
    "MemoryBackend",
    "MemoryEntry",
    "check_id",
    "check_limit",
    "check_metadata",
    "check_text",
    "check_value",
]

MAX_ID_LENGTH = 256
"""Longest user id or key, in characters."""
MAX_VALUE_BYTES = 1024 * 1024
"""Largest value, in bytes of UTF-8."""
MAX_METADATA_BYTES = 64 * 1024
"""Largest metadata object, in bytes of its UTF-8 JSON text."""
MAX_LIMIT = 1000
"""Largest ``limit`` a query accepts."""


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One memory of one user, as a backend returned it."""

    user_id: str
    key: str
    value: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    score: float | None = None
    """Relevance of this entry to the question; set by ``query`` only, higher is better."""


@runtime_checkable
class MemoryBackend(Protocol):
    """What an agent awaits. Every backend passes the same conformance suite.

    ``store`` is an upsert: an existing key gets the new value and metadata, keeps its
    ``created_at`` and gets a new ``updated_at``. Nothing of one user is ever visible or
    changeable through another user's id. A call that raised changed nothing; a call that
    returned is durable.
    """

    backend_name: str
    is_cloud: bool

    async def is_available(self) -> bool: ...

    async def store(
        self,
        user_id: str,
        key: str,
        value: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryEntry: ...

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None: ...

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]: ...

    async def list_keys(self, user_id: str) -> list[str]: ...

    async def delete(self, user_id: str, key: str) -> bool: ...

    async def forget_user(self, user_id: str) -> int: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def _check_text_content(what: str, value: str) -> None:
    if "\x00" in value:
        raise InvalidInputError(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} must be valid Unicode (no lone surrogates)") from None


def check_id(what: str, value: object) -> str:
    """Return ``value`` if it is a usable user id or key, else raise ``InvalidInputError``."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidInputError(f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidInputError(f"{what} is longer than {MAX_ID_LENGTH} characters")
    _check_text_content(what, value)
    return value


def check_value(value: object) -> str:
    """Return ``value`` if it can be stored as a memory's value."""
    if not isinstance(value, str):
        raise InvalidInputError(f"value must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInputError("value must not contain NUL characters")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError("value must be valid Unicode (no lone surrogates)") from None
    if size > MAX_VALUE_BYTES:
        raise InvalidInputError(f"value is {size} bytes; the limit is {MAX_VALUE_BYTES}")
    return value


def _check_json(node: object, depth: int) -> None:
    if depth > 64:
        raise InvalidInputError("metadata is nested more than 64 levels deep")
    if node is None or isinstance(node, bool | int):
        return
    if isinstance(node, float):
        if not math.isfinite(node):
            raise InvalidInputError("metadata numbers must be finite (no NaN or infinity)")
        return
    if isinstance(node, str):
        _check_text_content("metadata strings", node)
        return
    if isinstance(node, Mapping):
        for k, v in node.items():
            if not isinstance(k, str):
                raise InvalidInputError(f"metadata keys must be str, not {type(k).__name__}")
            _check_text_content("metadata keys", k)
            _check_json(v, depth + 1)
        return
    if isinstance(node, list | tuple):
        for item in node:
            _check_json(item, depth + 1)
        return
    raise InvalidInputError(f"metadata must be JSON: {type(node).__name__} is not")


def _mapping_as_dict(node: object) -> dict[str, Any]:
    """Let ``json.dumps`` write any ``Mapping`` (already checked), not just ``dict``."""
    if isinstance(node, Mapping):
        return dict(node)
    raise TypeError(type(node).__name__)  # pragma: no cover - _check_json rejected it


def check_metadata(metadata: object) -> dict[str, Any]:
    """Return a plain JSON copy of ``metadata`` (``{}`` for ``None``) or raise."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(
            f"metadata must be a mapping (a JSON object), not {type(metadata).__name__}"
        )
    _check_json(metadata, 0)
    try:
        text = json.dumps(
            metadata, ensure_ascii=False, separators=(",", ":"), default=_mapping_as_dict
        )
    except ValueError:
        raise InvalidInputError(
            "metadata numbers must be at most 4300 digits (Python's int/str limit)"
        ) from None
    if len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise InvalidInputError(f"metadata is larger than {MAX_METADATA_BYTES} bytes as JSON")
    copy: dict[str, Any] = json.loads(text)
    return copy


def check_limit(limit: object) -> int:
    """Return ``limit`` if it is an int from 1 to :data:`MAX_LIMIT`."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInputError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    return limit


def check_text(text: object) -> str:
    """Return query ``text`` if it is a str. Its content is data, whatever it holds."""
    if not isinstance(text, str):
        raise InvalidInputError(f"query text must be a str, not {type(text).__name__}")
    return text


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class BackendBase:
    """The lifecycle the built-in backends share: unopened → open → closed.

    ``__init__`` does no I/O. ``async with`` (or :meth:`open`) opens; any operation on an
    unopened backend opens it first. After :meth:`aclose`, every operation raises
    :class:`BackendClosedError`; closing twice is fine.
    """

    backend_name: str = "base"
    is_cloud: bool = False

    def __init__(self) -> None:
        self._state = _State.UNOPENED
        self._open_lock = asyncio.Lock()

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    async def open(self) -> Self:
        """Connect and prepare the backend; a no-op when it is already open."""
        if self._state is _State.OPEN:
            return self
        async with self._open_lock:
            if self._state is _State.CLOSED:
                raise BackendClosedError(f"the {self.backend_name} backend is closed")
            if self._state is _State.UNOPENED:
                await self._open()
                self._state = _State.OPEN
        return self

    async def _ready(self) -> None:
        if self._state is not _State.OPEN:
            await self.open()

    async def aclose(self) -> None:
        """Release connections and threads. Safe to call more than once."""
        if self._state is _State.CLOSED:
            return
        was_open = self._state is _State.OPEN
        self._state = _State.CLOSED
        if was_open:
            await self._close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _open(self) -> None:
        """Acquire resources; subclasses override."""

    async def _close(self) -> None:
        """Release resources; subclasses override."""
