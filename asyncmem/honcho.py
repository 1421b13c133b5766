"""Memories on a Honcho server (Plastic Labs), through the official ``honcho-ai`` 2.x SDK.

The SDK is synchronous and imported only when a backend opens, so ``import asyncmem`` works
without it. Install it with ``pip install 'asyncmem[honcho]'``.

How the five operations map onto Honcho's workspace → peers → sessions → messages model:

- a user is a peer whose id is a hash of the user id (Honcho ids are ``[A-Za-z0-9_-]``);
- a (user, key) pair is one session. Its metadata holds the original user id and key, the
  value, the caller's metadata (as JSON text, so Honcho's limit of 100 keys and 5 levels on
  metadata never applies to it), the timestamps and a revision id;
- each store adds the value as messages (one per 25,000 characters) tagged with the
  revision, so Honcho's server-side ``search`` finds it. Messages cannot be deleted, so older
  revisions stay on the server until the key is deleted; ``query`` drops hits whose revision
  is not the session's current one;
- ``delete`` and ``forget_user`` delete sessions.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import json
import re
import secrets
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from asyncmem.backend import (
    BackendBase,
    MemoryEntry,
    check_id,
    check_limit,
    check_metadata,
    check_text,
    check_value,
)
from asyncmem.errors import (
    AsyncmemError,
    BackendClosedError,
    BackendError,
    BackendUnavailableError,
    InvalidInputError,
)
from asyncmem.sql.search import query_terms

if TYPE_CHECKING:
    import httpx
    from honcho import Honcho, Message, Session

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_WORKSPACE",
    "MAX_MESSAGE_CHARS",
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
MAX_SEARCH_HITS = 100
"""Most messages one Honcho search returns; ``query`` ranks among at most this many."""
MAX_TERM_SEARCHES = 8
"""Most single-word searches one ``query`` adds when the words together find too little."""
PAGE_SIZE = 100
"""Largest page the Honcho server serves."""

_RRF_K = 60
_HONCHO_ID = re.compile(r"[A-Za-z0-9_-]{1,512}")

_MARK = "asyncmem"
_FORMAT = 1
_T = TypeVar("_T")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _chunks(value: str) -> list[str]:
    if not value:
        return [""]
    return [value[i : i + MAX_MESSAGE_CHARS] for i in range(0, len(value), MAX_MESSAGE_CHARS)]


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
    ``timeout * (max_retries + 1)`` plus back-off. ``max_workers`` bounds the threads that
    run SDK calls, so that many operations at most are in flight. ``http_client`` replaces
    the ``httpx.Client`` (tests inject one with a mock transport); the backend closes only a
    client it made. ``reasoning`` leaves Honcho's background reasoning on for memory sessions
    (off by default: it sends stored values to a language model). Nothing is read from the
    environment.

    Weaker guarantees than the SQL store, because Honcho offers no transactions:

    - ``store`` makes three HTTP calls (four for a new key): find the key's session, add the
      value as messages, then replace the session's metadata. A store that raised before
      the last call changed nothing visible (a new key may leave an empty placeholder
      session that reads ignore and the next store reuses); one that raised during the last
      call may or may not have taken effect. Stores and deletes of one key take turns
      within a process; two processes storing the same key at once: the last metadata
      write wins, which need not be the one with the latest ``updated_at``.
    - Deletion is asynchronous on the server: ``delete`` and ``forget_user`` return once
      Honcho has accepted it, after which the memory is invisible to every operation here;
      Honcho's worker erases the session and its messages later. Peers cannot be deleted:
      after ``forget_user`` a peer named by a hash of the user id remains, holding nothing.
    - ``query`` is Honcho's own search (semantic and full-text) over at most
      :data:`MAX_SEARCH_HITS` messages, filtered to the user; ``score`` is derived from the
      rank, not a server score. Reads see the server's state at the time of each request.
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
        max_workers: int = 8,
        reasoning: bool = False,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(base_url, str) or urlsplit(base_url).scheme not in {"http", "https"}:
            raise InvalidInputError("base_url must be an http:// or https:// URL")
        if not isinstance(workspace_id, str) or not _HONCHO_ID.fullmatch(workspace_id):
            raise InvalidInputError("workspace_id must be 1-512 of A-Z, a-z, 0-9, '_' and '-'")
        if timeout <= 0:
            raise InvalidInputError("timeout must be positive")
        if max_retries < 0:
            raise InvalidInputError("max_retries must not be negative")
        if max_workers < 1:
            raise InvalidInputError("max_workers must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.workspace_id = workspace_id
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_workers = max_workers
        self.reasoning = reasoning
        self.is_cloud = not _is_loopback(self.base_url)
        self._api_key = api_key
        self._injected_client = http_client
        self._http: httpx.Client | None = None
        self._client: Honcho | None = None
        self._pool: ThreadPoolExecutor | None = None
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
        # The SDK falls back to HONCHO_API_KEY when no key is given; backends read no
        # environment, so the key is exactly what the caller passed.
        client._http.api_key = self._api_key
        self._http = http
        self._client = client
        self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="asyncmem-honcho")

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            # Calls already submitted finish (their HTTP timeout bounds the wait), off the loop.
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)
        http, self._http = self._http, None
        if http is not None and http is not self._injected_client:
            http.close()
        self._client = None

    async def _call(self, operation: str, fn: Callable[..., _T], /, *args: Any) -> _T:
        """Run ``fn(client, *args)``, which calls the SDK, on the backend's thread pool.

        The one place SDK code runs: never on the event loop, always inside the error
        translation.
        """
        await self._ready()
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
        """Whether the server answers and accepts the credentials (one HTTP call)."""
        if self.closed:
            return False
        try:
            await self._call("is_available", _ping)
        except AsyncmemError:
            return False
        return True

    async def store(
        self,
        user_id: str,
        key: str,
        value: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryEntry:
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        value = check_value(value)
        clean = check_metadata(metadata)
        async with self._key_lock(user_id, key):
            return await self._call("store", _store, user_id, key, value, clean, self.reasoning)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        return await self._call("retrieve", _retrieve, user_id, key)

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        """Memories of ``user_id`` ranked by Honcho's search for the words of ``text``.

        Honcho's full-text search needs every word of a query (``plainto_tsquery``) and
        turns any punctuation into a substring match, so the question is reduced to its
        words first (text without searchable words returns ``[]`` without a request). When
        all the words together find fewer than ``limit`` memories, each word (up to
        :data:`MAX_TERM_SEARCHES`) is searched on its own, concurrently, and the lists are
        fused by reciprocal rank, so memories sharing more of the words rank higher; a
        server with embeddings adds its semantic matches to every list. One more call reads
        the sessions of the hits, to drop deleted keys and superseded values.
        """
        user_id = check_id("user_id", user_id)
        text = check_text(text)
        limit = check_limit(limit)
        terms = query_terms(text)
        if not terms:
            await self._ready()
            return []
        size = min(MAX_SEARCH_HITS, max(2 * limit, limit + 10))
        found, phrase = await self._call("query", _query_words, user_id, terms, size, limit)
        if found is not None:
            return found
        each = await asyncio.gather(
            *(
                self._call("query", _search, user_id, term, size)
                for term in terms[:MAX_TERM_SEARCHES]
            )
        )
        return await self._call("query", _resolve, user_id, [phrase, *each], limit)

    async def list_keys(self, user_id: str) -> list[str]:
        user_id = check_id("user_id", user_id)
        return await self._call("list_keys", _list_keys, user_id)

    async def delete(self, user_id: str, key: str) -> bool:
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        async with self._key_lock(user_id, key):
            return await self._call("delete", _delete, user_id, key)

    async def forget_user(self, user_id: str) -> int:
        user_id = check_id("user_id", user_id)
        return await self._call("forget_user", _forget_user, user_id)


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


def _entry(meta: Mapping[str, Any], score: float | None = None) -> MemoryEntry:
    return MemoryEntry(
        user_id=meta["user_id"],
        key=meta["key"],
        value=meta["value"],
        metadata=json.loads(meta["meta"]),
        created_at=float(meta["created_at"]),
        updated_at=float(meta["updated_at"]),
        score=score,
    )


def _latest(sessions: list[Session]) -> Session | None:
    committed = [s for s in sessions if _committed(s)]
    if committed:
        return max(committed, key=lambda s: float((s.metadata or {})["updated_at"]))
    return sessions[0] if sessions else None


def _store(
    client: Honcho,
    user_id: str,
    key: str,
    value: str,
    metadata: dict[str, Any],
    reasoning: bool,
) -> MemoryEntry:
    import honcho
    from honcho.api_types import SessionConfiguration

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
    if _committed(session):
        created_at = float(previous["created_at"])
        updated_at = max(now, float(previous["updated_at"]) + 1e-6)
    else:
        created_at = updated_at = now
    revision = secrets.token_hex(8)
    session.add_messages(
        [
            honcho.MessageCreateParams(
                content=part, peer_id=peer_id, metadata={_MARK: _FORMAT, "rev": revision}
            )
            for part in _chunks(value)
        ]
    )
    meta_text = json.dumps(metadata, ensure_ascii=False, separators=(",", ":"))
    session.set_metadata(
        {
            **identity,
            "value": value,
            "meta": meta_text,
            "rev": revision,
            "created_at": created_at,
            "updated_at": updated_at,
        }
    )
    return MemoryEntry(user_id, key, value, metadata, created_at, updated_at)


def _retrieve(client: Honcho, user_id: str, key: str) -> MemoryEntry | None:
    session = _latest(_key_sessions(client, user_id, key))
    if session is None or not _committed(session):
        return None
    return _entry(session.metadata or {})


def _user_sessions(client: Honcho, user_id: str) -> list[Session]:
    found = _sessions(client, {"metadata": {_MARK: _FORMAT, "u": _digest(user_id)}})
    return [s for s in found if (s.metadata or {}).get("user_id") == user_id]


def _list_keys(client: Honcho, user_id: str) -> list[str]:
    latest: dict[str, Mapping[str, Any]] = {}
    for session in _user_sessions(client, user_id):
        meta = session.metadata or {}
        if not _committed(session):
            continue
        seen = latest.get(meta["key"])
        if seen is None or float(meta["updated_at"]) > float(seen["updated_at"]):
            latest[meta["key"]] = meta
    ordered = sorted(latest.values(), key=lambda m: float(m["updated_at"]), reverse=True)
    return [m["key"] for m in ordered]


def _search(client: Honcho, user_id: str, text: str, size: int) -> list[Message]:
    return list(client.search(text, filters={"peer_id": _peer_id(user_id)}, limit=size))


def _query_words(
    client: Honcho, user_id: str, terms: list[str], size: int, limit: int
) -> tuple[list[MemoryEntry] | None, list[Message]]:
    """Search all the words together; the memories when that is enough, else the hits."""
    hits = _search(client, user_id, " ".join(terms), size)
    if len(terms) > 1 and len({hit.session_id for hit in hits}) < limit:
        return None, hits
    return _resolve(client, user_id, [hits], limit), hits


def _resolve(
    client: Honcho, user_id: str, ranked: list[list[Message]], limit: int
) -> list[MemoryEntry]:
    """Fuse ranked hit lists into memories, keeping only hits of a key's current value."""
    ids = list(dict.fromkeys(hit.session_id for hits in ranked for hit in hits))
    if not ids:
        return []
    current: dict[str, Mapping[str, Any]] = {}
    for session in _sessions(
        client, {"id": {"in": ids}, "metadata": {_MARK: _FORMAT, "u": _digest(user_id)}}
    ):
        meta = session.metadata or {}
        if _committed(session) and meta.get("user_id") == user_id:
            current[session.id] = meta
    scores: dict[str, float] = {}
    for hits in ranked:
        seen: list[str] = []
        for hit in hits:
            meta = current.get(hit.session_id)
            if meta is None or hit.session_id in seen:
                continue
            if (hit.metadata or {}).get("rev") != meta["rev"]:
                continue
            seen.append(hit.session_id)
            rank = len(seen)
            scores[hit.session_id] = scores.get(hit.session_id, 0.0) + 1.0 / (_RRF_K + rank)
    newest: dict[str, str] = {}
    for sid in scores:
        key = current[sid]["key"]
        other = newest.get(key)
        if other is None or current[sid]["updated_at"] > current[other]["updated_at"]:
            newest[key] = sid
    best = sorted(newest.values(), key=lambda sid: -scores[sid])[:limit]
    return [_entry(current[sid], score=scores[sid]) for sid in best]


def _delete_sessions(client: Honcho, sessions: list[Session]) -> int:
    """Delete ``sessions``; how many of them held a memory."""
    import honcho

    removed = 0
    for session in sessions:
        try:
            session.delete()
        except honcho.NotFoundError:
            continue
        removed += _committed(session)
    return removed


def _delete(client: Honcho, user_id: str, key: str) -> bool:
    return _delete_sessions(client, _key_sessions(client, user_id, key)) > 0


def _forget_user(client: Honcho, user_id: str) -> int:
    sessions = _user_sessions(client, user_id)
    keys = {(s.metadata or {})["key"] for s in sessions if _committed(s)}
    _delete_sessions(client, sessions)
    return len(keys)
