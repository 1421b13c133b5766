"""The contract every backend meets: :class:`MemoryEntry`, :class:`MemoryBackend`, limits and
the input checks that turn bad arguments into :class:`~asyncmem.errors.InvalidInputError`
before anything is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import math
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol, Self, runtime_checkable

from asyncmem.errors import BackendClosedError, InvalidInputError

__all__ = [
    "DEFAULT_MAX_VERSIONS",
    "MAX_BATCH",
    "MAX_ID_LENGTH",
    "MAX_IN_OPERANDS",
    "MAX_LIMIT",
    "MAX_METADATA_BYTES",
    "MAX_PAGE_SIZE",
    "MAX_PATH_DEPTH",
    "MAX_SESSION_BYTES",
    "MAX_TTL",
    "MAX_VALUE_BYTES",
    "MAX_WHERE_FIELDS",
    "OPERATORS",
    "BackendBase",
    "BatchItem",
    "Condition",
    "MemoryBackend",
    "MemoryEntry",
    "check_id",
    "check_items",
    "check_keys",
    "check_limit",
    "check_metadata",
    "check_offset",
    "check_page_limit",
    "check_page_size",
    "check_seconds",
    "check_text",
    "check_timestamp",
    "check_ttl",
    "check_value",
    "check_where",
    "metadata_json",
]

MAX_ID_LENGTH = 256
"""Longest user id or key, in characters."""
MAX_VALUE_BYTES = 1024 * 1024
"""Largest value, in bytes of UTF-8."""
MAX_METADATA_BYTES = 64 * 1024
"""Largest metadata object, in bytes of its UTF-8 JSON text."""
MAX_SESSION_BYTES = 1024
"""Largest ``metadata.session`` (a conversation id), in bytes of its UTF-8 JSON text.

Every backend holds to it: PostgreSQL indexes a turn's user id and session together, and
that index takes rows of at most 2,704 bytes."""
MAX_LIMIT = 1000
"""Largest ``limit`` a query accepts."""
MAX_BATCH = 10_000
"""Most items one ``store_many`` or ``delete_many`` call accepts."""
MAX_PAGE_SIZE = 10_000
"""Largest ``page_size`` of ``scan``."""
MAX_TTL = 100 * 366 * 24 * 3600.0
"""Longest ``ttl``, in seconds (about a century)."""
MAX_WHERE_FIELDS = 32
"""Most fields one ``where`` filter may name."""
MAX_IN_OPERANDS = 100
"""Most values one ``$in`` may list."""
MAX_PATH_DEPTH = 8
"""Most segments of a dotted field path."""
DEFAULT_MAX_VERSIONS = 10
"""Versions of one memory a store keeps by default, the current one included."""


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One memory of one user, as a backend returned it."""

    user_id: str
    """Whose memory this is; compared exactly, as a string of code points."""
    key: str
    """The memory's name, unique per user."""
    value: str
    """The remembered text."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """A JSON object stored alongside (``{}`` when none was given)."""
    created_at: float = 0.0
    """When the key was first stored (unix seconds); an upsert keeps it."""
    updated_at: float = 0.0
    """When the value was last stored (unix seconds)."""
    score: float | None = None
    """Relevance of this entry to the question; set by ``query`` only, higher is better."""
    expires_at: float | None = None
    """When this memory stops being visible (unix seconds), or ``None`` to keep it."""


@runtime_checkable
class MemoryBackend(Protocol):
    """What an agent awaits. Every backend passes the same conformance suite.

    ``store`` is an upsert: an existing key gets the new value and metadata, keeps its
    ``created_at`` and gets a new ``updated_at``. Nothing of one user is ever visible or
    changeable through another user's id. A call that raised changed nothing; a call that
    returned is durable.
    """

    backend_name: str
    """What it is, for people: ``"sql (sqlite)"``, ``"sql (postgresql)"``, ``"honcho"``..."""
    is_cloud: bool
    """True when stored memories leave this machine."""

    async def is_available(self) -> bool:
        """True when the backend can be used now; ``False`` instead of raising when not."""
        ...

    async def store(
        self,
        user_id: str,
        key: str,
        value: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        ttl: float | None = None,
    ) -> MemoryEntry:
        """Store ``value`` under ``key`` for ``user_id``, replacing what was there; return it.

        An existing key gets the new value and metadata, keeps its ``created_at`` and gets a
        new ``updated_at``; its previous version goes to :meth:`history`. With ``ttl`` the
        memory expires that many seconds from now; without, it never does (storing again
        without ``ttl`` removes an expiry). Raises ``InvalidInputError`` for bad arguments,
        before anything is written.
        """
        ...

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        """The memory under ``key``, or ``None`` when there is none (or it has expired)."""
        ...

    async def query(
        self,
        user_id: str,
        text: str,
        limit: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryEntry]:
        """At most ``limit`` of the user's memories, most relevant to ``text`` first.

        ``text`` is a natural-language question, never syntax: it is split into words, common
        function words are dropped, and memories rank by the words they share with it
        (stemmed). Each result has ``score`` set, higher is better. A question with no
        searchable words returns ``[]``. ``where`` keeps only memories whose metadata matches
        (a field → a value, or → ``{"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte" | "$in" |
        "$exists": operand}``; fields AND together; a dotted field reaches into objects).
        """
        ...

    async def list_keys(
        self,
        user_id: str,
        *,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        """The user's keys, most recently updated first: ``limit`` of them after ``offset``.

        ``where`` filters on metadata as in :meth:`query`; ``limit=None`` means all.
        """
        ...

    async def delete(self, user_id: str, key: str) -> bool:
        """Remove the memory under ``key`` and its history; True if there was one."""
        ...

    async def forget_user(self, user_id: str) -> int:
        """Erase every memory of ``user_id``, history included; return how many there were."""
        ...

    def scan(
        self,
        user_id: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[MemoryEntry]:
        """Stream memories in a stable order, ``page_size`` at a time; ``None`` = every user.

        Arguments are checked when called, before the first item is awaited.
        """
        ...

    async def history(self, user_id: str, key: str, limit: int = 10) -> list[MemoryEntry]:
        """The kept versions of the memory under ``key``, newest (the current one) first.

        ``[]`` when there is no such memory. How many versions are kept is the backend's
        ``max_versions`` (default :data:`DEFAULT_MAX_VERSIONS`).
        """
        ...

    async def store_many(
        self, user_id: str, items: Iterable[Mapping[str, Any]]
    ) -> list[MemoryEntry]:
        """Store several memories at once; return them in the order given.

        Each item is a mapping with ``key`` and ``value`` and optionally ``metadata`` and
        ``ttl``; keys must be distinct. Every item is checked before anything is written.
        The SQL store writes them in one transaction (all or nothing); see each backend for
        its guarantee.
        """
        ...

    async def delete_many(self, user_id: str, keys: Iterable[str]) -> int:
        """Remove the memories under ``keys``; return how many there were."""
        ...

    async def purge_expired(self) -> int:
        """Delete every expired memory of every user; return how many.

        Not needed for correctness (expired memories are invisible to every read already);
        it frees their space.
        """
        ...

    async def aclose(self) -> None:
        """Release connections and threads. Closing twice is fine; any other call after it
        raises ``BackendClosedError``."""
        ...

    async def __aenter__(self) -> Self:
        """Open the backend (connect, check the schema) and return it."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the backend, as :meth:`aclose`."""
        ...


def _check_text_content(what: str, value: str) -> None:
    if "\x00" in value:
        raise InvalidInputError(f"{what} must not contain NUL characters")
    if value.isascii():  # no surrogate in it: skip encoding a copy (ids run on every call)
        return
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
    """Let the encoder write any ``Mapping`` (already checked), not just ``dict``."""
    if isinstance(node, Mapping):
        return dict(node)
    raise TypeError(type(node).__name__)  # pragma: no cover - _check_json rejected it


_ENCODE_JSON = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_mapping_as_dict
).encode
_DECODE_JSON = json.JSONDecoder().decode


def check_metadata(metadata: object) -> dict[str, Any]:
    """Return a plain JSON copy of ``metadata`` (``{}`` for ``None``) or raise."""
    return metadata_json(metadata)[0]


def metadata_json(metadata: object) -> tuple[dict[str, Any], str]:
    """:func:`check_metadata` and the copy's JSON text, which is what a database stores."""
    if metadata is None:
        return {}, "{}"
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(
            f"metadata must be a mapping (a JSON object), not {type(metadata).__name__}"
        )
    if not metadata:
        return {}, "{}"
    _check_json(metadata, 0)
    try:
        text = _ENCODE_JSON(metadata)
    except ValueError:
        raise InvalidInputError(
            "metadata numbers must be at most 4300 digits (Python's int/str limit)"
        ) from None
    if len(text) > MAX_METADATA_BYTES // 4 and len(text.encode("utf-8")) > MAX_METADATA_BYTES:
        raise InvalidInputError(f"metadata is larger than {MAX_METADATA_BYTES} bytes as JSON")
    copy: dict[str, Any] = _DECODE_JSON(text)
    session = copy.get("session")
    if isinstance(session, str | int | float) and not isinstance(session, bool):
        size = len(_ENCODE_JSON(session).encode("utf-8"))
        if size > MAX_SESSION_BYTES:
            raise InvalidInputError(
                f"metadata.session is {size} bytes as JSON; the limit is {MAX_SESSION_BYTES}"
            )
    return copy, text


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


def _finite(value: int | float) -> float | None:
    """``value`` as a finite float, or ``None`` (NaN, infinity, an int beyond float range)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def check_ttl(ttl: object) -> float | None:
    """Return ``ttl`` in seconds (a positive finite number up to :data:`MAX_TTL`) or ``None``."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidInputError(f"ttl must be a number of seconds, not {type(ttl).__name__}")
    seconds = _finite(ttl)
    if seconds is None or not 0 < seconds <= MAX_TTL:
        raise InvalidInputError(f"ttl must be more than 0 and at most {MAX_TTL:.0f} seconds")
    return seconds


def check_timestamp(what: str, value: object) -> float:
    """Return ``value`` as unix seconds if it is a finite number (an imported timestamp)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{what} must be a finite number of unix seconds")
    seconds = _finite(value)
    if seconds is None:
        raise InvalidInputError(f"{what} must be a finite number of unix seconds")
    return seconds


def check_seconds(what: str, value: object, *, low: float = 0.0) -> float:
    """Return a timeout-like setting in seconds: a finite number of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = _finite(value)
    if seconds is None or seconds < low or seconds > MAX_TTL:
        raise InvalidInputError(f"{what} must be a finite number of seconds, at least {low:g}")
    return seconds


def _check_count(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidInputError(f"{what} must be between {low} and {high}, got {value}")
    return value


def check_page_limit(limit: object) -> int | None:
    """Return a ``list_keys`` ``limit``: ``None`` (everything) or a positive int."""
    return None if limit is None else _check_count("limit", limit, 1, 2**31 - 1)


def check_offset(offset: object) -> int:
    """``offset`` of ``list_keys``: an int from 0 to 2**31 - 1."""
    return _check_count("offset", offset, 0, 2**31 - 1)


def check_page_size(page_size: object) -> int:
    """``page_size`` of ``scan``: an int from 1 to :data:`MAX_PAGE_SIZE`."""
    return _check_count("page_size", page_size, 1, MAX_PAGE_SIZE)


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One checked item of ``store_many``."""

    key: str
    value: str
    metadata: dict[str, Any]
    ttl: float | None
    metadata_text: str
    """``metadata`` as JSON text."""


_ITEM_FIELDS = frozenset({"key", "value", "metadata", "ttl"})


def check_items(items: object) -> list[BatchItem]:
    """Check every item of a ``store_many`` call before anything is written."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidInputError("items must be a list of mappings with key and value")
    checked: list[BatchItem] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if len(checked) == MAX_BATCH:
            raise InvalidInputError(f"a batch holds at most {MAX_BATCH} items")
        if not isinstance(item, Mapping):
            raise InvalidInputError(f"items[{index}] must be a mapping, not {type(item).__name__}")
        if not _ITEM_FIELDS.issuperset(item):
            names = ", ".join(sorted(repr(name) for name in set(item) - _ITEM_FIELDS))
            raise InvalidInputError(f"items[{index}] has unknown fields: {names}")
        if "key" not in item or "value" not in item:
            raise InvalidInputError(f"items[{index}] needs a key and a value")
        try:
            key = check_id("key", item["key"])
            value = check_value(item["value"])
            metadata, text = metadata_json(item.get("metadata"))
            ttl = check_ttl(item.get("ttl"))
        except InvalidInputError as exc:
            raise InvalidInputError(f"items[{index}]: {exc}") from None
        if key in seen:
            raise InvalidInputError(f"items[{index}] repeats a key given earlier in the batch")
        seen.add(key)
        checked.append(BatchItem(key, value, metadata, ttl, text))
    return checked


def check_keys(keys: object) -> list[str]:
    """Check the keys of a ``delete_many`` call; duplicates are dropped, order kept."""
    if isinstance(keys, str | bytes | Mapping) or not isinstance(keys, Iterable):
        raise InvalidInputError("keys must be a list of str")
    checked: dict[str, None] = {}
    for key in keys:
        if len(checked) == MAX_BATCH:
            raise InvalidInputError(f"a batch holds at most {MAX_BATCH} keys")
        checked[check_id("key", key)] = None
    return list(checked)


Operator = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$exists"]
OPERATORS: frozenset[str] = frozenset(
    {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$exists"}
)
Scalar = str | int | float | bool | None
_SEGMENT = re.compile(r"[\w-]{1,128}")
_INT64 = 2**63


@dataclass(frozen=True, slots=True)
class Condition:
    """One checked condition of a ``where`` filter: the metadata at ``path`` ``op`` ``operand``.

    ``$in`` has a tuple of scalars as operand, ``$exists`` a bool, the comparisons a str or a
    number, ``$eq``/``$ne`` any JSON scalar.
    """

    path: tuple[str, ...]
    op: Operator
    operand: Scalar | tuple[Scalar, ...]


def _check_path(field_name: object) -> tuple[str, ...]:
    if not isinstance(field_name, str):
        raise InvalidInputError(f"where: field names must be str, not {type(field_name).__name__}")
    if field_name.startswith("$"):
        raise InvalidInputError(
            "where: operators go inside a field's mapping ({'field': {'$gt': 1}}); "
            "top-level operators such as $and/$or are not supported (fields are AND-ed)"
        )
    segments = tuple(field_name.split("."))
    if len(segments) > MAX_PATH_DEPTH:
        raise InvalidInputError(f"where: a field path has at most {MAX_PATH_DEPTH} segments")
    for segment in segments:
        if not _SEGMENT.fullmatch(segment) or segment.isdigit():
            raise InvalidInputError(
                "where: a field is a dotted path of names made of letters, digits, '_' and '-' "
                "(not all digits, at most 128 characters each)"
            )
    return segments


def _check_scalar(op: str, operand: object) -> Scalar:
    if operand is None or isinstance(operand, bool | str):
        if isinstance(operand, str):
            _check_text_content(f"where: the {op} operand", operand)
        return operand
    if isinstance(operand, int):
        if not -_INT64 <= operand < _INT64:
            raise InvalidInputError(f"where: the {op} operand is outside the 64-bit range")
        return operand
    if isinstance(operand, float):
        if not math.isfinite(operand):
            raise InvalidInputError(f"where: the {op} operand must be a finite number")
        return operand
    raise InvalidInputError(
        f"where: the {op} operand must be a JSON scalar (str, number, bool or None), "
        f"not {type(operand).__name__}"
    )


def _check_operation(op: object, operand: object) -> tuple[Operator, Scalar | tuple[Scalar, ...]]:
    if not isinstance(op, str) or op not in OPERATORS:
        shown = op if isinstance(op, str) and len(op) <= 16 else type(op).__name__
        raise InvalidInputError(
            f"where: unknown operator {shown!r}; use one of {', '.join(sorted(OPERATORS))}"
        )
    operator: Operator = op  # type: ignore[assignment]
    if operator == "$exists":
        if not isinstance(operand, bool):
            raise InvalidInputError("where: $exists takes true or false")
        return operator, operand
    if operator == "$in":
        if isinstance(operand, str | bytes | Mapping) or not isinstance(operand, list | tuple):
            raise InvalidInputError("where: $in takes a list of JSON scalars")
        if len(operand) > MAX_IN_OPERANDS:
            raise InvalidInputError(f"where: $in takes at most {MAX_IN_OPERANDS} values")
        return operator, tuple(_check_scalar(op, item) for item in operand)
    scalar = _check_scalar(op, operand)
    if operator in ("$gt", "$gte", "$lt", "$lte") and (scalar is None or isinstance(scalar, bool)):
        raise InvalidInputError(f"where: {op} compares numbers or strings only")
    return operator, scalar


def check_where(where: object) -> tuple[Condition, ...]:
    """Turn a ``where`` filter into checked conditions (AND-ed); ``None`` or ``{}`` is none.

    ``where`` maps a metadata field (a dotted path reaches into nested objects) to a JSON
    scalar (equality) or to a mapping of operators to operands.
    """
    if where is None:
        return ()
    if not isinstance(where, Mapping):
        raise InvalidInputError(f"where must be a mapping, not {type(where).__name__}")
    if len(where) > MAX_WHERE_FIELDS:
        raise InvalidInputError(f"where names at most {MAX_WHERE_FIELDS} fields")
    conditions: list[Condition] = []
    for field_name, wanted in where.items():
        path = _check_path(field_name)
        if isinstance(wanted, Mapping):
            if not wanted:
                raise InvalidInputError("where: an operator mapping must not be empty")
            if not all(isinstance(op, str) and op.startswith("$") for op in wanted):
                raise InvalidInputError(
                    "where: a field's value is a JSON scalar or a mapping of operators; "
                    "to match a nested field use a dotted path ('a.b')"
                )
            for op, operand in wanted.items():
                operator, checked = _check_operation(op, operand)
                conditions.append(Condition(path, operator, checked))
        else:
            conditions.append(Condition(path, "$eq", _check_scalar("equality", wanted)))
    return tuple(conditions)


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
        self._opening: asyncio.Future[None] | None = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called (every operation then raises)."""
        return self._state is _State.CLOSED

    async def open(self) -> Self:
        """Connect and prepare the backend; a no-op when it is already open.

        The opening runs to its end even if the caller is cancelled meanwhile, so it never
        leaves connections half made (a cancelled caller's backend is open, or closed again
        by :meth:`aclose`); a failed opening is tried again by the next call.
        """
        if self._state is _State.OPEN:
            return self
        async with self._open_lock:
            if self._state is _State.CLOSED:
                raise BackendClosedError(f"the {self.backend_name} backend is closed")
            if self._state is _State.UNOPENED:
                if self._opening is None or self._opening.done():
                    self._opening = asyncio.ensure_future(self._open_once())
                await asyncio.shield(self._opening)
        if self.closed:  # closed by another task while this one waited for the opening
            raise BackendClosedError(f"the {self.backend_name} backend is closed")
        return self

    async def _open_once(self) -> None:
        await self._open()
        if self.closed:  # closed while it was opening
            await self._close()
        else:
            self._state = _State.OPEN

    async def _ready(self) -> None:
        if self._state is not _State.OPEN:
            await self.open()

    async def aclose(self) -> None:
        """Release connections and threads. Safe to call more than once, and while another
        task is still opening the backend (the opening finishes, then closes)."""
        if self._state is _State.CLOSED:
            return
        was_open = self._state is _State.OPEN
        self._state = _State.CLOSED
        opening = self._opening
        if not was_open and opening is not None and not opening.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(opening)
            return
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
