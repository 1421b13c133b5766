"""LangGraph's long-term memory store over any asyncmem backend: :class:`AsyncmemStore`.

::

    async with open_backend() as memory:
        store = AsyncmemStore(memory)
        await store.aput(("users", "alice"), "pet", {"text": "has a grey cat"})
        hits = await store.asearch(("users",), query="which cat?")

How LangGraph's model maps onto asyncmem's:

- A namespace is one asyncmem user, ``"langgraph:" + ".".join(namespace)`` (LangGraph forbids
  ``.`` in labels, so the join is unambiguous); a name longer than the id limit becomes
  ``"langgraph#" + sha256``. The namespaces themselves are listed under one more user,
  ``"langgraph!namespaces"``: one memory per namespace, its labels in the metadata, so
  ``list_namespaces`` and ``search``'s prefix read that list (prefix labels filtered in the
  database), never the items.
- A key is the asyncmem key as it is when it fits and cannot be mistaken for an encoded one;
  otherwise ``"\\\\" + key``, or ``"#" + sha256`` when too long. The original key is kept in
  the metadata.
- The value dict is the memory's value, as JSON text: as large as the backend takes (1 MiB on
  the built-in ones), and what ``search(query=...)`` ranks with asyncmem's keyword ranking.
  There are no embeddings: ``index=`` is refused.
- TTL is LangGraph's: minutes, per item or ``ttl={"default_ttl": ...}``, refreshed by reads
  unless ``refresh_on_read`` is off or the read says ``refresh_ttl=False`` (a refresh
  stores the item again, keeping ``updated_at``). Expired items are never returned, swept or
  not (``omit_expired`` always holds); ``purge_expired`` on the backend deletes them.
- ``batch`` runs its reads against the state before the batch, then its writes (the last put
  of a key wins), as LangGraph's own stores do.

The sync methods run the async ones on the event loop the store was last used on when that
loop runs in another thread, and otherwise on a loop thread of the store's own (see
:meth:`close`); called inside a running loop they raise, since they would block it.

Needs the optional ``langgraph`` package: ``pip install 'asyncmem[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from asyncmem.backend import MAX_ID_LENGTH, MAX_LIMIT, MAX_WHERE_FIELDS, MemoryBackend, MemoryEntry
from asyncmem.errors import InvalidInputError

__all__ = ["INDEX_USER", "AsyncmemStore"]

_PLAIN: Final = "langgraph:"
_HASHED: Final = "langgraph#"
INDEX_USER: Final = "langgraph!namespaces"
"""The asyncmem user whose memories list the namespaces (one each)."""

_ESCAPE: Final = "\\"
_HASH: Final = "#"
_OPERATORS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _usable(text: str) -> bool:
    """Whether asyncmem takes ``text`` in an id as it is (no NUL, no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def namespace_user(namespace: tuple[str, ...]) -> str:
    """The asyncmem user id of ``namespace``: distinct namespaces get distinct ids."""
    joined = ".".join(namespace)
    plain = _PLAIN + joined
    return plain if len(plain) <= MAX_ID_LENGTH and _usable(joined) else _HASHED + _digest(joined)


def item_key(key: str) -> str:
    """The asyncmem key of a LangGraph ``key``: distinct keys get distinct asyncmem keys
    (plain keys never start with ``\\`` or ``#``, escaped ones with ``\\``, hashed ones
    with ``#``)."""
    plain = bool(key) and key[0] not in "\\#"
    if _usable(key) and len(key) <= MAX_ID_LENGTH and plain:
        return key
    if _usable(key) and len(key) < MAX_ID_LENGTH and not plain:
        return _ESCAPE + key
    return _HASH + _digest(key)


def _timestamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: nested dicts match as subsets, lists exactly, and the
    ``$eq $ne $gt $gte $lt $lte`` operators compare numbers."""
    if isinstance(wanted, dict):
        if any(isinstance(name, str) and name.startswith("$") for name in wanted):
            return all(_operator(value, name, operand) for name, operand in wanted.items())
        return isinstance(value, dict) and all(
            _matches(value.get(name), sub) for name, sub in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches(v, w) for v, w in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _operator(value: Any, name: str, operand: Any) -> bool:
    if name not in _OPERATORS:
        raise InvalidInputError(f"unsupported filter operator {name!r}; use one of $eq $ne $gt …")
    if name == "$eq":
        return bool(value == operand)
    if name == "$ne":
        return bool(value != operand)
    try:
        left, right = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right}.get(
        name, left <= right
    )


def _condition_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        part = namespace[: len(path)]
    elif condition.match_type == "suffix":
        part = namespace[len(namespace) - len(path) :]
    else:
        raise InvalidInputError(f"unsupported namespace match type {condition.match_type!r}")
    return all(want in ("*", have) for have, want in zip(part, path, strict=True))


class AsyncmemStore(BaseStore):
    """A LangGraph ``BaseStore`` on ``backend`` (opened and closed by the caller).

    ``ttl`` is LangGraph's ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``).
    ``index`` (embeddings) is refused: asyncmem ranks ``search(query=...)`` by keywords.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        if index is not None:
            raise InvalidInputError(
                "AsyncmemStore takes no index= configuration: asyncmem ranks search queries "
                "by their words (full-text search), without embeddings; leave index out"
            )
        self.backend = backend
        self.ttl_config = ttl
        self._loop: asyncio.AbstractEventLoop | None = None
        self._own: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._own_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AsyncmemStore({self.backend!r})"

    # -- the two entry points ---------------------------------------------------------------

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: reads first, against the state before the batch, then the writes."""
        self._loop = asyncio.get_running_loop()
        ops = list(ops)
        writes: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                writes[(tuple(op.namespace), op.key)] = op
            elif not isinstance(op, GetOp | SearchOp | ListNamespacesOp):
                raise InvalidInputError(f"unknown store operation {type(op).__name__}")
        results: list[Result] = [await self._read(op) for op in ops]
        for op in writes.values():
            await (self._put(op) if op.value is not None else self._delete(op))
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` from synchronous code (see the module docstring for which loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise InvalidInputError(
                "a sync AsyncmemStore method was called inside a running event loop, which it "
                "would block; await the async one there (aget, aput, asearch, abatch, …)"
            )
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            loop = self._own_loop()
        return asyncio.run_coroutine_threadsafe(self.abatch(list(ops)), loop).result()

    def close(self) -> None:
        """If the sync methods ran on the store's own loop thread: close the backend there
        (it was opened there) and stop the thread. Otherwise nothing: the caller owns the
        backend."""
        with self._own_lock:
            own, self._own = self._own, None
            thread, self._thread = self._thread, None
        if own is not None and thread is not None:
            try:
                asyncio.run_coroutine_threadsafe(self.backend.aclose(), own).result()
            finally:
                own.call_soon_threadsafe(own.stop)
                thread.join()
                own.close()

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        with self._own_lock:
            if self._own is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="asyncmem-langgraph", daemon=True
                )
                thread.start()
                self._own, self._thread = loop, thread
            return self._own

    # -- reads ------------------------------------------------------------------------------

    async def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return await self._get(op)
        if isinstance(op, SearchOp):
            return await self._search(op)
        if isinstance(op, ListNamespacesOp):
            return await self._list_namespaces(op)
        return None

    async def _get(self, op: GetOp) -> Item | None:
        namespace = tuple(op.namespace)
        entry = await self.backend.retrieve(namespace_user(namespace), item_key(op.key))
        if entry is None:
            return None
        if op.refresh_ttl:
            await self._refresh(namespace, entry)
        return self._item(namespace, entry)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit < 0 or op.offset < 0:
            raise InvalidInputError("search limit and offset must be at least 0")
        prefix = tuple(op.namespace_prefix)
        conditions = (MatchCondition("prefix", prefix),) if prefix else ()
        found: list[tuple[tuple[str, ...], MemoryEntry]] = []
        for namespace in await self._namespaces(conditions):
            user = namespace_user(namespace)
            if op.query:
                entries = await self.backend.query(user, op.query, MAX_LIMIT)
            else:
                entries = [entry async for entry in self.backend.scan(user)]
            for entry in entries:
                if not op.filter or _matches(json.loads(entry.value), op.filter):
                    found.append((namespace, entry))
        if op.query:
            found.sort(key=lambda hit: -(hit[1].score or 0.0))
        else:
            found.sort(key=lambda hit: -self._updated(hit[1]))
        page = found[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            for namespace, entry in page:
                await self._refresh(namespace, entry)
        return [self._search_item(namespace, entry) for namespace, entry in page]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = await self._namespaces(op.match_conditions or ())
        if op.max_depth is not None:
            namespaces = sorted({namespace[: op.max_depth] for namespace in namespaces})
        return namespaces[op.offset : op.offset + op.limit]

    async def _namespaces(self, conditions: Sequence[MatchCondition]) -> list[tuple[str, ...]]:
        """The namespaces that hold a live item and meet ``conditions``, sorted."""
        where: dict[str, Any] = {}
        for condition in conditions:
            if condition.match_type == "prefix":
                labels = list(condition.path)[: MAX_WHERE_FIELDS - 1]
                where |= {f"l{n}": label for n, label in enumerate(labels) if label != "*"}
                depth = max(len(condition.path), where.get("n", {}).get("$gte", 0))
                where["n"] = {"$gte": depth}
        kept = []
        async for entry in self.backend.scan(INDEX_USER, where=where):
            namespace = tuple(json.loads(entry.value))
            if all(_condition_matches(c, namespace) for c in conditions) and (
                await self.backend.list_keys(namespace_user(namespace), limit=1)
            ):
                kept.append(namespace)
        return sorted(kept)

    # -- writes -----------------------------------------------------------------------------

    async def _put(self, op: PutOp) -> None:
        assert op.value is not None
        namespace = tuple(op.namespace)
        if not isinstance(op.value, Mapping):
            raise InvalidInputError(f"a store value must be a dict, not {type(op.value).__name__}")
        try:
            text = json.dumps(dict(op.value), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"a store value must be JSON: {type(exc).__name__}") from None
        ttl = op.ttl if op.ttl is not None else None
        if ttl is not None and not ttl > 0:
            raise InvalidInputError("ttl must be a positive number of minutes")
        # JSON text, ASCII only: a LangGraph key may hold NUL or lone surrogates.
        metadata: dict[str, Any] = {"key": json.dumps(op.key), "updated_at": time.time()}
        if ttl is not None:
            metadata["ttl"] = ttl
        user = namespace_user(namespace)
        await self.backend.store(
            user, item_key(op.key), text, metadata, ttl=None if ttl is None else ttl * 60
        )
        await self._list_namespace(namespace, user)

    async def _delete(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        user = namespace_user(namespace)
        if await self.backend.delete(user, item_key(op.key)) and not await self.backend.list_keys(
            user, limit=1
        ):
            await self.backend.delete(INDEX_USER, user)
            if await self.backend.list_keys(user, limit=1):  # a put came in meanwhile
                await self._list_namespace(namespace, user)

    async def _list_namespace(self, namespace: tuple[str, ...], user: str) -> None:
        if await self.backend.retrieve(INDEX_USER, user) is not None:
            return
        labels = {f"l{n}": label for n, label in enumerate(namespace[: MAX_WHERE_FIELDS - 1])}
        await self.backend.store(
            INDEX_USER, user, json.dumps(list(namespace)), {"n": len(namespace), **labels}
        )

    async def _refresh(self, namespace: tuple[str, ...], entry: MemoryEntry) -> None:
        """Restart an item's TTL, as a LangGraph read does; ``updated_at`` stays."""
        ttl = entry.metadata.get("ttl")
        if isinstance(ttl, int | float) and ttl > 0:
            await self.backend.store(
                namespace_user(namespace), entry.key, entry.value, entry.metadata, ttl=ttl * 60
            )

    # -- answers ----------------------------------------------------------------------------

    @staticmethod
    def _key(entry: MemoryEntry) -> str:
        key = entry.metadata.get("key")
        return str(json.loads(key)) if isinstance(key, str) else entry.key

    @staticmethod
    def _updated(entry: MemoryEntry) -> float:
        updated = entry.metadata.get("updated_at")
        return float(updated) if isinstance(updated, int | float) else entry.updated_at

    def _item(self, namespace: tuple[str, ...], entry: MemoryEntry) -> Item:
        return Item(
            value=json.loads(entry.value),
            key=self._key(entry),
            namespace=namespace,
            created_at=_timestamp(entry.created_at),
            updated_at=_timestamp(self._updated(entry)),
        )

    def _search_item(self, namespace: tuple[str, ...], entry: MemoryEntry) -> SearchItem:
        return SearchItem(
            namespace=namespace,
            key=self._key(entry),
            value=json.loads(entry.value),
            created_at=_timestamp(entry.created_at),
            updated_at=_timestamp(self._updated(entry)),
            score=entry.score,
        )
