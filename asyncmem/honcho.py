"""Memories on a Honcho server (Plastic Labs), through the official ``honcho-ai`` 2.x SDK.

The SDK is synchronous and imported only when a backend opens, so ``import asyncmem`` works
without it. Install it with ``pip install 'asyncmem[honcho]'``.

How memories map onto Honcho's workspace → peers → sessions → messages model:

- a user is a peer whose id is a hash of the user id (Honcho ids are ``[A-Za-z0-9_-]``);
- a (user, key) pair is one session. Its metadata holds the original user id and key, the
  value, the caller's metadata (as JSON text, so Honcho's limit of 100 keys and 5 levels on
  metadata never applies to it), the timestamps and a revision id;
- each store adds the value as messages (cut where Honcho counts their tokens quickly, see
  :func:`_chunks`) tagged with the revision, so Honcho's server-side ``search`` finds it.
  Messages cannot be deleted, so older revisions stay on the server until the key is
  deleted; ``query`` drops hits whose revision is not the session's current one, and
  searches again past them until it has ``limit`` memories or no more matches;
- the expiry time (``ttl``) and the previous versions (``history``) are in the same
  metadata; ``where`` filters are applied here, with :func:`asyncmem.filtering.matches`;
- ``delete`` and ``forget_user`` delete sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import ipaddress
import json
import re
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from asyncmem.backend import (
    MAX_LIMIT,
    BackendBase,
    BatchItem,
    Condition,
    MemoryEntry,
    check_id,
    check_items,
    check_keys,
    check_limit,
    check_offset,
    check_page_limit,
    check_page_size,
    check_seconds,
    check_text,
    check_ttl,
    check_value,
    check_where,
    metadata_json,
)
from asyncmem.errors import (
    AsyncmemError,
    BackendClosedError,
    BackendError,
    BackendUnavailableError,
    InvalidInputError,
)
from asyncmem.filtering import matches
from asyncmem.sql.search import query_terms

if TYPE_CHECKING:
    import httpx
    from honcho import Honcho, Message, Session

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_PROBE_TIMEOUT",
    "DEFAULT_WORKSPACE",
    "MAX_MESSAGES_PER_CALL",
    "MAX_MESSAGE_CHARS",
    "MAX_RUN_BYTES",
    "MAX_SEARCH_HITS",
    "MAX_TERM_SEARCHES",
    "HonchoBackend",
]

DEFAULT_BASE_URL = "https://api.honcho.dev"
"""The hosted Honcho API, used when no ``base_url`` is given (the SDK's own default)."""
DEFAULT_WORKSPACE = "asyncmem"
"""The workspace memories live in unless ``workspace_id`` says otherwise."""
MAX_MESSAGE_CHARS = 25_000
"""Longest message the Honcho server accepts; longer values are stored as several messages."""
MAX_MESSAGES_PER_CALL = 100
"""Most messages the Honcho server accepts in one request."""
MAX_RUN_BYTES = 4096
"""Most UTF-8 bytes of runs without whitespace (or of whitespace) in one message, squared
and summed: the cost budget of one message.

Honcho counts each message's tokens with tiktoken inside the request, and that work is
quadratic in the length of a run without spaces: on Honcho 3.0.12 one message of 25,000
emoji (100,000 bytes) took 3.9 s, and a 1 MiB value of emoji in 25,000-character messages
~41 s, past the 30 s timeout. On that cost model (``tests/fake_honcho.py``,
``benchmarks/honcho_chunking.py``) a 1 MiB run costs ``3.9e-10 s × 1 MiB × MAX_RUN_BYTES``
in all and at most ``100 × 3.9e-10 s × MAX_RUN_BYTES²`` per request: 4096 gives 1.7 s in 256
messages and 0.65 s for the slowest of 3 requests. 16,384 puts 6.7 s in one request; 2,048
halves the total (0.84 s) for twice the messages and requests; 1,024 (0.42 s) needs 1,024
messages in 11 requests and slows the cutting of prose tenfold (0.56 s per MiB). Prose
stays in messages of up to 25,000 characters (its runs are short)."""
MAX_SEARCH_HITS = 100
"""Most messages one Honcho search returns; ``query`` ranks among at most this many."""
MAX_TERM_SEARCHES = 8
"""Most single-word searches one ``query`` adds when the words together find too little."""
PAGE_SIZE = 100
"""Largest page the Honcho server serves."""
DEFAULT_PROBE_TIMEOUT = 3.0
"""Seconds :meth:`HonchoBackend.is_available` waits for its one request, without retries."""

_RRF_K = 60
_HONCHO_ID = re.compile(r"[A-Za-z0-9_-]{1,512}")

_MARK = "asyncmem"
_FORMAT = 1
_T = TypeVar("_T")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.cache
def _long_run_patterns(chars: int) -> tuple[re.Pattern[str], re.Pattern[str]]:
    # Two patterns, each anchored at a run's start: one alternation scans each word from
    # every position and is 4x slower on prose.
    return re.compile(rf"(?<!\S)\S{{{chars},}}"), re.compile(rf"\s{{{chars},}}")


def _long_runs(value: str, chars: int) -> list[tuple[int, int]]:
    """Where the runs of at least ``chars`` non-whitespace or whitespace characters are."""
    if len(value) < chars:
        return []
    found = [m.span() for pattern in _long_run_patterns(chars) for m in pattern.finditer(value)]
    return sorted(found)


def _head(text: str, start: int, max_bytes: int) -> int:
    """The end of the longest piece of ``text`` from ``start`` of at most ``max_bytes`` UTF-8
    bytes (one character at least)."""
    end = min(len(text), start + max_bytes)
    size = len(text[start:end].encode())
    while size > max_bytes and end > start + 1:
        end = start + max(1, (end - start) * max_bytes // size)
        size = len(text[start:end].encode())
    return end


def _cut(text: str, end: int, back: int) -> int:
    """Where to end a message at or before ``end``: after the last whitespace of the
    ``back`` characters before it, else at ``end``."""
    for i in range(end, max(0, end - back) - 1, -1):
        if i < len(text) and text[i - 1 : i].isspace():
            return i
    return end


def _chunks(value: str, max_run_bytes: int = MAX_RUN_BYTES) -> list[str]:
    """Cut ``value`` into the messages that carry it to Honcho's search.

    A message holds at most :data:`MAX_MESSAGE_CHARS` characters and runs (of non-whitespace,
    or of whitespace) whose squared UTF-8 lengths add up to at most ``max_run_bytes²``, so the
    server's token counting stays fast (see :data:`MAX_RUN_BYTES`). Text whose runs are all
    shorter than ``short`` characters is charged an upper bound (``16·short`` per character,
    which lets such text fill a message) and cut after a whitespace, so words are not cut; a
    longer run is charged exactly, and one too long for a message is cut into pieces that
    each end a message (two pieces in one message would join again).
    """
    if not value:
        return [""]
    budget = max_run_bytes * max_run_bytes
    short = max(1, budget // (16 * MAX_MESSAGE_CHARS))
    per_char = 16 * short
    chunks: list[str] = []
    parts: list[str] = []
    length = cost = 0

    def flush() -> None:
        nonlocal parts, length, cost
        if parts:
            chunks.append("".join(parts))
        parts, length, cost = [], 0, 0

    def add(text: str, size: int) -> None:
        nonlocal length, cost
        parts.append(text)
        length += len(text)
        cost += size

    def plain(start: int, stop: int) -> None:
        while start < stop:
            room = min(MAX_MESSAGE_CHARS - length, (budget - cost) // per_char)
            if stop - start <= room:
                add(value[start:stop], (stop - start) * per_char)
                return
            end = _cut(value, start + room, short) if room > 0 else start
            if end <= start:
                if not parts:
                    end = start + max(1, room)
                else:
                    flush()
                    continue
            add(value[start:end], (end - start) * per_char)
            flush()
            start = end

    def long(start: int, stop: int) -> None:
        while start < stop:
            if stop - start <= max_run_bytes:
                run = value[start:stop]
                size = len(run) if run.isascii() else len(run.encode())
                if length + len(run) <= MAX_MESSAGE_CHARS and cost + size * size <= budget:
                    add(run, size * size)
                    return
            if parts:
                flush()
                continue
            end = _head(value, start, min(max_run_bytes, MAX_MESSAGE_CHARS))
            chunks.append(value[start:end])
            start = end

    pos = 0
    for start, stop in _long_runs(value, short):
        plain(pos, start)
        long(start, stop)
        pos = stop
    plain(pos, len(value))
    flush()
    return chunks


def _is_loopback(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextmanager
def _translate(operation: str) -> Iterator[None]:
    """Map ``honcho`` (and pydantic) errors to asyncmem's, once, at the boundary.

    Messages name the operation and the HTTP status only: server error bodies can echo the
    request, which holds stored values.
    """
    try:
        yield
    except AsyncmemError:
        raise
    except Exception as exc:
        import honcho

        if isinstance(exc, honcho.AuthenticationError | honcho.PermissionDeniedError):
            raise BackendUnavailableError(
                f"{operation} failed: the Honcho server refused the credentials (HTTP {exc.status})"
            ) from exc
        if isinstance(exc, honcho.TimeoutError):
            raise BackendUnavailableError(f"{operation} failed: Honcho timed out") from exc
        if isinstance(exc, honcho.ConnectionError):
            raise BackendUnavailableError(
                f"{operation} failed: cannot connect to the Honcho server"
            ) from exc
        if isinstance(exc, honcho.RateLimitError):
            after = "" if exc.retry_after is None else f"; retry after {exc.retry_after:g} s"
            raise BackendError(f"{operation} failed: Honcho rate limit (HTTP 429){after}") from exc
        if isinstance(exc, honcho.HonchoError):
            raise BackendError(
                f"{operation} failed: Honcho answered HTTP {exc.status} ({type(exc).__name__})"
            ) from exc
        from pydantic import ValidationError

        if isinstance(exc, ValidationError | KeyError | TypeError | ValueError):
            raise BackendError(f"{operation} failed: unexpected Honcho response") from exc
        raise


class HonchoBackend(BackendBase):
    """Memories on a Honcho server, through the ``honcho-ai`` SDK on a thread pool.

    ``base_url`` defaults to the hosted API (:data:`DEFAULT_BASE_URL`): memories then leave
    the machine, and ``is_cloud`` is True unless ``base_url`` is a loopback address.
    ``api_key`` is sent as a bearer token and never appears in reprs, logs or errors.
    ``timeout`` bounds every HTTP request and ``max_retries`` the SDK's retries (on 429,
    5xx, timeouts and connection errors, honouring ``Retry-After``); a call can take up to
    ``timeout * (max_retries + 1)`` plus back-off. :meth:`is_available` makes one request
    bounded by ``probe_timeout`` (at most ``timeout``), without retries. ``max_workers``
    bounds the threads that run SDK calls, so that many operations at most are in flight.
    ``http_client`` replaces the ``httpx.Client`` (tests inject one with a mock transport);
    the backend closes only a client it made. ``reasoning`` leaves Honcho's background
    reasoning on for memory sessions (off by default: it sends stored values to a language
    model). ``max_versions`` is how many versions of a memory :meth:`history` keeps, the
    current one included. Nothing is read from the environment.

    Weaker guarantees than the SQL store, because Honcho offers no transactions:

    - ``store`` makes three HTTP calls (four for a new key; one more per 100 messages past
      the first 100): find the key's session, add the value as messages, then replace the
      session's metadata. A store that raised before the last call changed nothing visible
      (a new key may leave an empty placeholder session that reads ignore and the next
      store reuses); one that raised during the last call may or may not have taken effect.
      Stores and deletes of one key take turns within a process; two processes storing the
      same key at once: the last metadata write wins, which need not be the one with the
      latest ``updated_at``.
    - Deletion is asynchronous on the server: ``delete`` and ``forget_user`` return once
      Honcho has accepted it, after which the memory is invisible to every operation here;
      Honcho's worker erases the session and its messages later. Peers cannot be deleted:
      after ``forget_user`` a peer named by a hash of the user id remains, holding nothing.
    - ``query`` is Honcho's own search (semantic and full-text) in windows of at most
      :data:`MAX_SEARCH_HITS` messages, filtered to the user and repeated past the stale hits
      that fill a window; ``score`` is derived from the rank, not a server score. Reads see
      the server's state at the time of each request.
    - ``where`` filters, ``list_keys`` paging and expiry are done here, not by the server
      (the caller's metadata is JSON text to Honcho, and ``expires_at`` a plain number):
      ``list_keys``, ``scan`` and ``purge_expired`` read every session of the user (or of
      the workspace) each time, and ``query`` filters among its search hits. The semantics
      are the SQL store's (:mod:`asyncmem.filtering`). Expired memories are hidden from every
      read at once; their sessions stay on the server until ``purge_expired`` or a delete.
    - ``history`` keeps the previous versions in the session metadata, so each version adds
      its value's size to every read of that session.
    - ``store_many`` and ``delete_many`` check every item first, then write one key after
      another: not atomic. A batch that raised midway has written the items before the
      failing one and not the rest.
    - Cancelling an awaiting task does not stop its thread; the HTTP timeout does.
    """

    backend_name = "honcho"

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        workspace_id: str = DEFAULT_WORKSPACE,
        timeout: float = 30.0,
        max_retries: int = 2,
        probe_timeout: float = DEFAULT_PROBE_TIMEOUT,
        max_workers: int = 8,
        reasoning: bool = False,
        max_versions: int = 10,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(base_url, str) or urlsplit(base_url).scheme not in {"http", "https"}:
            raise InvalidInputError("base_url must be an http:// or https:// URL")
        if not isinstance(workspace_id, str) or not _HONCHO_ID.fullmatch(workspace_id):
            raise InvalidInputError("workspace_id must be 1-512 of A-Z, a-z, 0-9, '_' and '-'")
        timeout = check_seconds("timeout", timeout, low=0.001)
        probe_timeout = check_seconds("probe_timeout", probe_timeout, low=0.001)
        if max_retries < 0:
            raise InvalidInputError("max_retries must not be negative")
        if max_workers < 1:
            raise InvalidInputError("max_workers must be at least 1")
        if (
            isinstance(max_versions, bool)
            or not isinstance(max_versions, int)
            or not 1 <= max_versions <= MAX_LIMIT
        ):
            raise InvalidInputError(f"max_versions must be an int from 1 to {MAX_LIMIT}")
        self.base_url = base_url.rstrip("/")
        self.workspace_id = workspace_id
        self.timeout = timeout
        self.probe_timeout = min(probe_timeout, timeout)
        self.max_retries = max_retries
        self.max_workers = max_workers
        self.reasoning = reasoning
        self.max_versions = max_versions
        self.is_cloud = not _is_loopback(self.base_url)
        self._api_key = api_key
        self._injected_client = http_client
        self._http: httpx.Client | None = None
        self._client: Honcho | None = None
        self._probe: Honcho | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._probe_pool: ThreadPoolExecutor | None = None
        self._key_locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def __repr__(self) -> str:
        return f"HonchoBackend(base_url={self.base_url!r}, workspace_id={self.workspace_id!r})"

    async def _open(self) -> None:
        try:
            import honcho
            import httpx
        except ImportError as exc:
            raise BackendUnavailableError(
                "the Honcho backend needs the honcho-ai SDK: pip install 'asyncmem[honcho]'"
            ) from exc
        http = self._injected_client or httpx.Client(
            timeout=httpx.Timeout(self.timeout), trust_env=False
        )
        with _translate("open"):
            client = honcho.Honcho(
                api_key=self._api_key,
                base_url=self.base_url,
                workspace_id=self.workspace_id,
                timeout=self.timeout,
                max_retries=self.max_retries,
                http_client=http,
            )
            # The health probe: the same HTTP client, its own short timeout, no retries.
            probe = honcho.Honcho(
                api_key=self._api_key,
                base_url=self.base_url,
                workspace_id=self.workspace_id,
                timeout=self.probe_timeout,
                max_retries=0,
                http_client=http,
            )
        # The SDK falls back to HONCHO_API_KEY when no key is given; backends read no
        # environment, so the key is exactly what the caller passed.
        client._http.api_key = self._api_key
        probe._http.api_key = self._api_key
        self._http = http
        self._client = client
        self._probe = probe
        self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="asyncmem-honcho")
        # Its own thread, so that a probe does not wait behind calls stuck on a frozen server.
        self._probe_pool = ThreadPoolExecutor(1, thread_name_prefix="asyncmem-honcho-probe")

    async def _close(self) -> None:
        pools = [p for p in (self._pool, self._probe_pool) if p is not None]
        self._pool = self._probe_pool = None
        for pool in pools:
            # Calls already submitted finish (their HTTP timeout bounds the wait), off the loop.
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)
        http, self._http = self._http, None
        if http is not None and http is not self._injected_client:
            http.close()
        self._client = self._probe = None

    async def _call(self, operation: str, fn: Callable[..., _T], /, *args: Any) -> _T:
        """Run ``fn(client, *args)``, which calls the SDK, on the backend's thread pool.

        The one place SDK code runs: never on the event loop, always inside the error
        translation.
        """
        return await self._run(operation, False, fn, *args)

    async def _run(self, operation: str, probe: bool, fn: Callable[..., _T], /, *args: Any) -> _T:
        await self._ready()
        if probe:
            client, pool = self._probe, self._probe_pool
        else:
            client, pool = self._client, self._pool
        if client is None or pool is None:
            raise BackendClosedError(f"the {self.backend_name} backend is closed")
        try:
            future = asyncio.get_running_loop().run_in_executor(
                pool, functools.partial(fn, client, *args)
            )
        except RuntimeError as exc:
            raise BackendClosedError(f"the {self.backend_name} backend is closed") from exc
        with _translate(operation):
            return await future

    def _key_lock(self, user_id: str, key: str) -> asyncio.Lock:
        """The lock that makes this process's writes to one key happen one after another, so
        the last write is the one with the latest ``updated_at``."""
        lock = self._key_locks.get((user_id, key))
        if lock is None:
            lock = self._key_locks[(user_id, key)] = asyncio.Lock()
        return lock

    async def is_available(self) -> bool:
        """Whether the server answers and accepts the credentials.

        One HTTP request on a thread of its own, bounded by ``probe_timeout`` and never
        retried: a frozen server is reported within ``probe_timeout`` seconds, not after
        ``timeout * (max_retries + 1)``.
        """
        if self.closed:
            return False
        try:
            await self._run("is_available", True, _ping)
        except AsyncmemError:
            return False
        return True

    async def store(
        self,
        user_id: str,
        key: str,
        value: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        ttl: float | None = None,
    ) -> MemoryEntry:
        """Insert or replace; the replaced value becomes a version (see :meth:`history`).

        ``ttl`` (seconds) makes the memory invisible to every read once it has passed;
        storing again without ``ttl`` keeps it until it is deleted.
        """
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        value = check_value(value)
        clean, text = metadata_json(metadata)
        seconds = check_ttl(ttl)
        item = BatchItem(key, value, clean, seconds, text)
        return await self._store_item(user_id, item)

    async def _store_item(self, user_id: str, item: BatchItem) -> MemoryEntry:
        async with self._key_lock(user_id, item.key):
            return await self._call(
                "store", _store, user_id, item, self.reasoning, self.max_versions
            )

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        return await self._call("retrieve", _retrieve, user_id, key)

    async def query(
        self,
        user_id: str,
        text: str,
        limit: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryEntry]:
        """Memories of ``user_id`` ranked by Honcho's search for the words of ``text``.

        Honcho's full-text search needs every word of a query (``plainto_tsquery``) and
        turns any punctuation into a substring match, so the question is reduced to its
        words first (text without searchable words returns ``[]`` without a request). When
        all the words together find fewer than ``limit`` memories, each word (up to
        :data:`MAX_TERM_SEARCHES`) is searched on its own, concurrently, and the lists are
        fused by reciprocal rank, so memories sharing more of the words rank higher; a
        server with embeddings adds its semantic matches to every list. One more call reads
        the sessions of the hits, to drop deleted keys, superseded values, expired memories
        and, with ``where``, memories whose metadata does not match (filtered here, among
        the hits: each search then asks for :data:`MAX_SEARCH_HITS`). A search whose window
        is full of such hits is repeated past the sessions it saw (two more calls each
        time), so overwritten keys and big values never hide other memories.
        """
        user_id = check_id("user_id", user_id)
        text = check_text(text)
        limit = check_limit(limit)
        conditions = check_where(where)
        terms = query_terms(text)
        if not terms:
            await self._ready()
            return []
        size = MAX_SEARCH_HITS if conditions else min(MAX_SEARCH_HITS, max(2 * limit, limit + 10))
        # All the words together, in one thread call: its sessions are read there when it
        # is the only search, or when they might be ``limit`` memories on their own.
        read_at = 1 if len(terms) == 1 else limit
        phrase, known = await self._call(
            "query", _hits, user_id, " ".join(terms), size, limit, conditions, read_at
        )
        ranked = [phrase]
        if len(terms) > 1 and len(_live_sessions(phrase, known)) < limit:
            ranked += await self._searches(
                user_id, terms[:MAX_TERM_SEARCHES], size, limit, known, conditions
            )
            await self._learn(user_id, ranked, known, conditions)
        return _fuse(ranked, limit, known)

    async def _searches(
        self,
        user_id: str,
        texts: list[str],
        size: int,
        want: int,
        known: _Known,
        conditions: tuple[Condition, ...],
    ) -> list[list[Message]]:
        """The user's messages matching each of ``texts``, each list widened as
        :func:`_hits` does, the lists' searches concurrent and one read per round for all
        the full windows."""
        lists: list[list[Message]] = [[] for _ in texts]
        seen: list[dict[str, str | None]] = [{} for _ in texts]
        active = list(range(len(texts)))
        while active:
            found = await asyncio.gather(
                *(self._call("query", _search, user_id, texts[i], size, seen[i]) for i in active)
            )
            full = [
                i for i, hits in zip(active, found, strict=True) if _extend(lists[i], hits, size)
            ]
            await self._learn(user_id, [lists[i] for i in full], known, conditions)
            active = [i for i in full if len(_live_sessions(lists[i], known)) < want]
            for i in active:
                seen[i] = _widen(lists[i], known)
        return lists

    async def _learn(
        self,
        user_id: str,
        ranked: list[list[Message]],
        known: _Known,
        conditions: tuple[Condition, ...],
    ) -> None:
        """Read the sessions of ``ranked`` not in ``known`` yet: one call, or none."""
        unknown = _unknown(ranked, known)
        if unknown:
            known.update(await self._call("query", _read, user_id, unknown, conditions))

    async def list_keys(
        self,
        user_id: str,
        *,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        """Keys of live memories, most recently updated first; a page of them with ``limit``.

        Honcho cannot filter or page by asyncmem's fields, so every call reads all the user's
        sessions and filters, orders and pages them here.
        """
        user_id = check_id("user_id", user_id)
        conditions = check_where(where)
        count = check_page_limit(limit)
        skip = check_offset(offset)
        return await self._call("list_keys", _list_keys, user_id, conditions, count, skip)

    async def delete(self, user_id: str, key: str) -> bool:
        """Delete a memory and its versions; ``True`` if it was there and not expired."""
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        async with self._key_lock(user_id, key):
            return await self._call("delete", _delete, user_id, key)

    async def forget_user(self, user_id: str) -> int:
        """Delete every memory of ``user_id``; return how many live ones there were."""
        user_id = check_id("user_id", user_id)
        return await self._call("forget_user", _forget_user, user_id)

    def scan(
        self,
        user_id: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[MemoryEntry]:
        """Stream live memories (of one user, or of the whole workspace with ``None``).

        The order is the memories' ``created_at`` (then session id), fixed when the scan
        starts by one listing of the sessions; each page of ``page_size`` is read again
        before it is yielded, so memories deleted or changed during the scan are seen as
        they are then. Memories created after the scan started are not included.
        """
        if user_id is not None:
            user_id = check_id("user_id", user_id)
        conditions = check_where(where)
        size = check_page_size(page_size)
        return self._scan(user_id, conditions, size)

    async def _scan(
        self, user_id: str | None, conditions: tuple[Condition, ...], size: int
    ) -> AsyncIterator[MemoryEntry]:
        ids = await self._call("scan", _scan_ids, user_id, conditions)
        for start in range(0, len(ids), size):
            page = await self._call(
                "scan", _scan_page, user_id, ids[start : start + size], conditions
            )
            for entry in page:
                yield entry

    async def history(self, user_id: str, key: str, limit: int = 10) -> list[MemoryEntry]:
        """The memory and its kept previous versions, newest first; ``[]`` if it is gone.

        Versions live in the key's session metadata (at most ``max_versions``, the current
        one included), so they are read in one call and go with the session.
        """
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        limit = check_limit(limit)
        return await self._call("history", _history, user_id, key, limit)

    async def store_many(
        self, user_id: str, items: Iterable[Mapping[str, Any]]
    ) -> list[MemoryEntry]:
        """Store every item (``key``, ``value``, optional ``metadata`` and ``ttl``).

        Every item is checked before anything is written. Honcho has no transactions, so
        the items are then stored one after another, as :meth:`store` does: a batch that
        raised during the writes has stored the items before the failing one, not the rest.
        """
        user_id = check_id("user_id", user_id)
        checked = check_items(items)
        if not checked:
            await self._ready()
            return []
        return [await self._store_item(user_id, item) for item in checked]

    async def delete_many(self, user_id: str, keys: Iterable[str]) -> int:
        """Delete the memories under ``keys``, one after another; count the live ones."""
        user_id = check_id("user_id", user_id)
        checked = check_keys(keys)
        if not checked:
            await self._ready()
            return 0
        removed = 0
        for key in checked:
            async with self._key_lock(user_id, key):
                removed += await self._call("delete_many", _delete, user_id, key)
        return removed

    async def purge_expired(self) -> int:
        """Delete the workspace's expired memories; return how many went.

        Not needed for correctness (reads already hide them): it frees the server's space.
        One call lists every asyncmem session; each expired key then takes two more.
        """
        expired = await self._call("purge_expired", _expired_keys)
        purged = 0
        for user_id, key in expired:
            async with self._key_lock(user_id, key):
                purged += await self._call("purge_expired", _purge_key, user_id, key)
        return purged


# The functions below run on the pool's threads and make the SDK calls.


def _peer_id(user_id: str) -> str:
    return f"am-{_digest(user_id)[:40]}"


def _base_session_id(user_id: str, key: str) -> str:
    return f"am-{_digest(user_id)[:24]}-{_digest(key)[:24]}"


def _ping(client: Honcho) -> None:
    client.get_metadata()


def _sessions(client: Honcho, filters: dict[str, object]) -> list[Session]:
    """Every active session matching ``filters``, all pages."""
    return list(client.sessions(filters=filters, size=PAGE_SIZE))


def _key_sessions(client: Honcho, user_id: str, key: str) -> list[Session]:
    found = _sessions(
        client, {"metadata": {_MARK: _FORMAT, "u": _digest(user_id), "k": _digest(key)}}
    )
    return [
        s
        for s in found
        if (s.metadata or {}).get("user_id") == user_id and (s.metadata or {}).get("key") == key
    ]


def _committed(session: Session) -> bool:
    return "rev" in (session.metadata or {})


def _unexpired(expires_at: Any, now: float) -> bool:
    return expires_at is None or float(expires_at) > now


def _live(session: Session | None, now: float) -> bool:
    """Whether ``session`` holds a memory that has not expired."""
    if session is None or not _committed(session):
        return False
    return _unexpired((session.metadata or {}).get("expires_at"), now)


def _expires_at(meta: Mapping[str, Any]) -> float | None:
    expires_at = meta.get("expires_at")
    return None if expires_at is None else float(expires_at)


def _entry(meta: Mapping[str, Any], score: float | None = None) -> MemoryEntry:
    return MemoryEntry(
        user_id=meta["user_id"],
        key=meta["key"],
        value=meta["value"],
        metadata=json.loads(meta["meta"]),
        created_at=float(meta["created_at"]),
        updated_at=float(meta["updated_at"]),
        score=score,
        expires_at=_expires_at(meta),
    )


def _versions(meta: Mapping[str, Any]) -> list[list[Any]]:
    """The kept previous versions, newest first: ``[value, meta, created, updated, expires]``."""
    text = meta.get("versions")
    versions: list[list[Any]] = json.loads(text) if isinstance(text, str) else []
    return versions


def _latest(sessions: list[Session]) -> Session | None:
    committed = [s for s in sessions if _committed(s)]
    if committed:
        return max(committed, key=lambda s: float((s.metadata or {})["updated_at"]))
    return sessions[0] if sessions else None


def _current(sessions: Iterable[Session]) -> dict[tuple[str, str], Session]:
    """The latest committed session of each (user, key)."""
    latest: dict[tuple[str, str], Session] = {}
    for session in sessions:
        if not _committed(session):
            continue
        meta = session.metadata or {}
        seen = latest.get((meta["user_id"], meta["key"]))
        if seen is None or float(meta["updated_at"]) > float((seen.metadata or {})["updated_at"]):
            latest[(meta["user_id"], meta["key"])] = session
    return latest


def _visible(session: Session, now: float, conditions: Sequence[Condition]) -> bool:
    """Live, and its metadata matches ``conditions``."""
    if not _live(session, now):
        return False
    return not conditions or matches(json.loads((session.metadata or {})["meta"]), conditions)


def _store(
    client: Honcho,
    user_id: str,
    item: BatchItem,
    reasoning: bool,
    max_versions: int,
) -> MemoryEntry:
    import honcho
    from honcho.api_types import SessionConfiguration

    key, value = item.key, item.value
    session = _latest(_key_sessions(client, user_id, key))
    identity: dict[str, object] = {
        _MARK: _FORMAT,
        "u": _digest(user_id),
        "k": _digest(key),
        "user_id": user_id,
        "key": key,
    }
    peer_id = _peer_id(user_id)
    if session is None:
        configuration = None if reasoning else SessionConfiguration(reasoning={"enabled": False})
        session_id = _base_session_id(user_id, key)
        try:
            session = client.session(
                session_id, metadata=identity, peers=peer_id, configuration=configuration
            )
        except honcho.NotFoundError:
            # The key's session was deleted and the server has not erased it yet; its id
            # stays taken until then, so the key starts over under a fresh one.
            session = client.session(
                f"{session_id}-{secrets.token_hex(6)}",
                metadata=identity,
                peers=peer_id,
                configuration=configuration,
            )
    previous = session.metadata or {}
    now = time.time()
    versions: list[list[Any]] = []
    if _live(session, now):
        created_at = float(previous["created_at"])
        updated_at = max(now, float(previous["updated_at"]) + 1e-6)
        replaced = [
            previous["value"],
            previous["meta"],
            created_at,
            float(previous["updated_at"]),
            _expires_at(previous),
        ]
        versions = [replaced, *_versions(previous)][: max_versions - 1]
    else:
        # A new key, or one whose memory expired: it starts afresh, without history.
        created_at = updated_at = now
    expires_at = None if item.ttl is None else updated_at + item.ttl
    revision = secrets.token_hex(8)
    messages = [
        honcho.MessageCreateParams(
            content=part, peer_id=peer_id, metadata={_MARK: _FORMAT, "rev": revision}
        )
        for part in _chunks(value)
    ]
    for start in range(0, len(messages), MAX_MESSAGES_PER_CALL):
        session.add_messages(messages[start : start + MAX_MESSAGES_PER_CALL])
    session.set_metadata(
        {
            **identity,
            "value": value,
            "meta": item.metadata_text,
            "rev": revision,
            "created_at": created_at,
            "updated_at": updated_at,
            "expires_at": expires_at,
            "versions": json.dumps(versions, ensure_ascii=False, separators=(",", ":")),
        }
    )
    return MemoryEntry(user_id, key, value, item.metadata, created_at, updated_at, None, expires_at)


def _retrieve(client: Honcho, user_id: str, key: str) -> MemoryEntry | None:
    session = _latest(_key_sessions(client, user_id, key))
    if session is None or not _live(session, time.time()):
        return None
    return _entry(session.metadata or {})


def _history(client: Honcho, user_id: str, key: str, limit: int) -> list[MemoryEntry]:
    session = _latest(_key_sessions(client, user_id, key))
    now = time.time()
    if session is None or not _live(session, now):
        return []
    meta = session.metadata or {}
    entries = [_entry(meta)]
    for value, meta_text, created_at, updated_at, expires_at in _versions(meta):
        if _unexpired(expires_at, now):
            entries.append(
                MemoryEntry(
                    user_id,
                    key,
                    value,
                    json.loads(meta_text),
                    float(created_at),
                    float(updated_at),
                    None,
                    None if expires_at is None else float(expires_at),
                )
            )
    return entries[:limit]


def _user_sessions(client: Honcho, user_id: str) -> list[Session]:
    found = _sessions(client, {"metadata": {_MARK: _FORMAT, "u": _digest(user_id)}})
    return [s for s in found if (s.metadata or {}).get("user_id") == user_id]


def _list_keys(
    client: Honcho,
    user_id: str,
    conditions: tuple[Condition, ...],
    limit: int | None,
    offset: int,
) -> list[str]:
    now = time.time()
    live = [
        s.metadata or {}
        for s in _current(_user_sessions(client, user_id)).values()
        if _visible(s, now, conditions)
    ]
    live.sort(key=lambda m: (float(m["updated_at"]), float(m["created_at"])), reverse=True)
    end = None if limit is None else offset + limit
    return [m["key"] for m in live[offset:end]]


def _scan_order(session: Session) -> tuple[float, str]:
    return float((session.metadata or {})["created_at"]), session.id


def _scan_ids(client: Honcho, user_id: str | None, conditions: tuple[Condition, ...]) -> list[str]:
    """The ids of the sessions a scan visits, in its order."""
    if user_id is None:
        found = _sessions(client, {"metadata": {_MARK: _FORMAT}})
    else:
        found = _user_sessions(client, user_id)
    now = time.time()
    current = [s for s in _current(found).values() if _visible(s, now, conditions)]
    return [s.id for s in sorted(current, key=_scan_order)]


def _scan_page(
    client: Honcho, user_id: str | None, ids: list[str], conditions: tuple[Condition, ...]
) -> list[MemoryEntry]:
    """The sessions ``ids`` as they are now, in the order given, still live and matching."""
    marks: dict[str, object] = {_MARK: _FORMAT}
    if user_id is not None:
        marks["u"] = _digest(user_id)
    now = time.time()
    found = {
        s.id: s
        for s in _sessions(client, {"id": {"in": ids}, "metadata": marks})
        if user_id is None or (s.metadata or {}).get("user_id") == user_id
    }
    page = [found[sid] for sid in ids if sid in found]
    return [_entry(s.metadata or {}) for s in page if _visible(s, now, conditions)]


_Known = dict[str, Mapping[str, Any] | None]
"""Session id → the metadata of the visible memory it holds, or ``None`` (gone, expired,
another user's, not matching ``where``)."""


def _search_filters(peer_id: str, seen: Mapping[str, str | None]) -> dict[str, object]:
    """Filters for a search among ``peer_id``'s messages that leaves out the sessions of
    ``seen``, except the messages of the revision a session is mapped to."""
    filters: dict[str, object] = {"peer_id": peer_id}
    if not seen:
        return filters
    outside = {"NOT": [{"session_id": {"in": list(seen)}}]}
    wanted = [{"session_id": sid, "metadata": {"rev": rev}} for sid, rev in seen.items() if rev]
    if wanted:
        filters["OR"] = [outside, *wanted]
    else:
        filters.update(outside)
    return filters


def _search(
    client: Honcho,
    user_id: str,
    text: str,
    size: int,
    seen: Mapping[str, str | None] | None = None,
) -> list[Message]:
    filters = _search_filters(_peer_id(user_id), seen or {})
    return list(client.search(text, filters=filters, limit=size))


def _read(
    client: Honcho, user_id: str, ids: list[str], conditions: tuple[Condition, ...]
) -> _Known:
    """What the sessions ``ids`` hold now. Hits are the user's peer's messages already, so
    the sessions are read by id alone and checked here."""
    known: _Known = dict.fromkeys(ids)
    now = time.time()
    for session in _sessions(client, {"id": {"in": ids}}):
        meta = session.metadata or {}
        if (
            meta.get(_MARK) == _FORMAT
            and meta.get("user_id") == user_id
            and _visible(session, now, conditions)
        ):
            known[session.id] = meta
    return known


def _current_hit(hit: Message, known: _Known) -> bool:
    """Whether ``hit`` is a message of the current value of a visible memory."""
    meta = known.get(hit.session_id)
    return meta is not None and (hit.metadata or {}).get("rev") == meta["rev"]


def _live_sessions(hits: list[Message], known: _Known) -> set[str]:
    return {hit.session_id for hit in hits if _current_hit(hit, known)}


def _unknown(ranked: list[list[Message]], known: _Known) -> list[str]:
    """The sessions of ``ranked`` not in ``known``, in order."""
    ids = dict.fromkeys(hit.session_id for hits in ranked for hit in hits)
    return [sid for sid in ids if sid not in known]


def _extend(hits: list[Message], found: list[Message], size: int) -> bool:
    """Add the hits of ``found`` not in ``hits`` yet; whether the window was full of them."""
    ids = {hit.id for hit in hits}
    fresh = [hit for hit in found if hit.id not in ids]
    hits.extend(fresh)
    return len(found) >= size and bool(fresh)


def _hits(
    client: Honcho,
    user_id: str,
    text: str,
    size: int,
    want: int,
    conditions: tuple[Condition, ...],
    read_at: int,
) -> tuple[list[Message], _Known]:
    """The user's messages matching ``text``, best first, widened past stale hits; and what
    their sessions hold, read when they are at least ``read_at`` sessions.

    Messages of replaced values are never deleted, and deleted sessions keep theirs until
    the server's worker erases them, so a window of ``size`` hits can hold few current
    ones. While the window is full and the hits hold fewer than ``want`` memories, search
    again, leaving out the sessions seen (but for the messages of a live session's current
    revision), until ``want`` memories or no more matches. Sessions are read only to decide
    that; a window that is not full needs no read.
    """
    hits: list[Message] = []
    known: _Known = {}
    seen: dict[str, str | None] = {}
    while _extend(hits, _search(client, user_id, text, size, seen), size):
        unknown = _unknown([hits], known)
        if unknown:
            known.update(_read(client, user_id, unknown, conditions))
        if len(_live_sessions(hits, known)) >= want:
            break
        seen = _widen(hits, known)
    unknown = _unknown([hits], known)
    if unknown and len({hit.session_id for hit in hits}) >= read_at:
        known.update(_read(client, user_id, unknown, conditions))
    return hits, known


def _widen(hits: list[Message], known: _Known) -> dict[str, str | None]:
    """What the next search of a full window leaves out: every session of ``hits``, but
    for the messages of the current revision of a live session that had no current hit."""
    live = _live_sessions(hits, known)
    seen: dict[str, str | None] = {}
    for sid in dict.fromkeys(hit.session_id for hit in hits):
        meta = known[sid]
        seen[sid] = None if meta is None or sid in live else str(meta["rev"])
    return seen


def _fuse(ranked: list[list[Message]], limit: int, known: _Known) -> list[MemoryEntry]:
    """Fuse ranked hit lists into memories, keeping only hits of a key's current value."""
    scores: dict[str, float] = {}
    for hits in ranked:
        seen: set[str] = set()
        for hit in hits:
            if hit.session_id in seen or not _current_hit(hit, known):
                continue
            seen.add(hit.session_id)
            scores[hit.session_id] = scores.get(hit.session_id, 0.0) + 1.0 / (_RRF_K + len(seen))
    current = {sid: meta for sid, meta in known.items() if meta is not None and sid in scores}
    newest: dict[str, str] = {}
    for sid in scores:
        key = current[sid]["key"]
        other = newest.get(key)
        if other is None or current[sid]["updated_at"] > current[other]["updated_at"]:
            newest[key] = sid
    best = sorted(newest.values(), key=lambda sid: -scores[sid])[:limit]
    return [_entry(current[sid], score=scores[sid]) for sid in best]


def _delete_sessions(client: Honcho, sessions: list[Session]) -> None:
    """Delete ``sessions``; ones already gone are fine."""
    import honcho

    for session in sessions:
        with contextlib.suppress(honcho.NotFoundError):
            session.delete()


def _delete(client: Honcho, user_id: str, key: str) -> bool:
    sessions = _key_sessions(client, user_id, key)
    live = _live(_latest(sessions), time.time())
    _delete_sessions(client, sessions)
    return live


def _forget_user(client: Honcho, user_id: str) -> int:
    sessions = _user_sessions(client, user_id)
    now = time.time()
    live = sum(_live(s, now) for s in _current(sessions).values())
    _delete_sessions(client, sessions)
    return live


def _expired_keys(client: Honcho) -> list[tuple[str, str]]:
    now = time.time()
    current = _current(_sessions(client, {"metadata": {_MARK: _FORMAT}}))
    return [ids for ids, session in current.items() if not _live(session, now)]


def _purge_key(client: Honcho, user_id: str, key: str) -> int:
    """Delete the key's sessions if its memory is (still) expired; 1 if it was."""
    sessions = _key_sessions(client, user_id, key)
    latest = _latest(sessions)
    if latest is None or not _committed(latest) or _live(latest, time.time()):
        return 0
    _delete_sessions(client, sessions)
    return 1
