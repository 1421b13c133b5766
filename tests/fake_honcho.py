"""An in-memory Honcho server (API v3) for the real ``honcho-ai`` SDK, behind
``httpx.MockTransport``.

It serves the routes :mod:`asyncmem.honcho` uses, with the server's behaviour as read in
plastic-labs/honcho (``src/crud/session.py``, ``src/utils/filter.py``, ``src/schemas/api.py``):

- ``POST /v3/workspaces`` get-or-create; ``POST …/sessions`` get-or-create that replaces
  metadata when given and answers 404 for a session marked for deletion;
  ``PUT …/sessions/{id}`` get-or-create then replace metadata (404 when marked);
  ``DELETE …/sessions/{id}`` marks the session inactive and leaves erasing it to the
  worker (:meth:`FakeHoncho.run_deletions`);
- ``POST …/sessions/list`` lists active sessions only, oldest first, in pages of at most
  100 (``size`` over 100 is a 422, as ``fastapi_pagination`` answers);
- ``POST …/sessions/{id}/messages``: 1-100 messages of at most 25,000 characters, else 422.
  Messages are never deleted on their own, only with their session. Counting each message's
  tokens (the real server runs tiktoken inside the request) costs modelled time, see
  :func:`token_count_seconds`; a request whose modelled time exceeds the client's read
  timeout still takes effect, and the client gets ``httpx.ReadTimeout``, as from a real
  server that finishes an abandoned request;
- ``DELETE /v3/workspaces/{id}``: 409 while the workspace has an active session, else the
  workspace goes with everything in it;
- ``POST …/search`` as ``src/utils/search.py`` does it without embeddings: a query with
  punctuation is a case-insensitive substring match, newest first; otherwise
  ``plainto_tsquery('english', …)`` (every word, stemmed, stop words dropped) ranked by
  ``ts_rank``, or a substring match; at most ``limit`` (1-100). It does not know about
  sessions marked for deletion until the worker erased them;
- filters: top-level fields AND-ed; ``AND``, ``OR`` and ``NOT`` take a list of filters (``NOT``
  matches what none of them matches); ``metadata`` is JSON containment; ``id``, ``peer_id``,
  ``session_id`` take a value or ``{"in": [...]}``; anything else is a 422;
- ids match ``[A-Za-z0-9_-]{1,512}``; metadata has at most 100 top-level keys and 5 levels.

Faults for tests: a wrong bearer token is a 401; :meth:`FakeHoncho.fail` scripts error
answers (429 with ``Retry-After``, 500, …) for the next requests; :meth:`FakeHoncho.slow`
makes the next requests take longer than the client's timeout (they then raise
``httpx.ReadTimeout`` after the timeout, as a real transport would); :attr:`gate` holds
requests until set, to count how many run at once. :attr:`read_timeouts` records each
request's read timeout and :attr:`message_seconds` the modelled token-counting time of each
``…/messages`` request.
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
import os
import re
import threading
import time
import unicodedata
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ID = re.compile(r"^[A-Za-z0-9_-]{1,512}$")
MAX_MESSAGE_CHARS = 25_000
MAX_WORD_BYTES = 2047
MAX_FILTER_DEPTH = 5

TOKEN_COUNT_SECONDS = 3.9 / 100_000**2
"""Modelled seconds per squared UTF-8 byte of a run, from Honcho 3.0.12 on loopback: one
message of 25,000 emoji (a 100,000-byte run) took 3.9 s to add."""
_RUNS = re.compile(r"\s+|\S+")


def token_count_seconds(content: str) -> float:
    """The modelled time the server spends counting the tokens of one message.

    tiktoken splits text into pieces (words, runs of symbols, runs of whitespace) and merges
    each piece's bytes pair by pair, which is quadratic in the piece's length: prose is cheap,
    a long run without spaces is not. The model charges each maximal run of non-whitespace,
    or of whitespace, its length in bytes squared: an upper bound on tiktoken's pieces (it
    also splits letters from digits and symbols), calibrated on one message of 25,000 emoji
    (3.9 s), which also reproduces the 1 MiB measurements of issue 19 (~41 s in 25,000-char
    messages; 5,000: 8.2 s against 3.2-9.0 s measured; 2,000: 3.3 s against 1.6-3.7 s).
    """
    return TOKEN_COUNT_SECONDS * sum(len(m.group().encode()) ** 2 for m in _RUNS.finditer(content))


class Problem(Exception):
    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _contains(have: Any, want: Any) -> bool:
    """PostgreSQL ``jsonb @>``."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            k in have and _contains(have[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return isinstance(have, list) and all(any(_contains(h, w) for h in have) for w in want)
    if isinstance(have, bool) or isinstance(want, bool):
        return have is want
    return bool(have == want)


def _check_metadata(meta: Any, depth: int = 1) -> None:
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise Problem(422, "metadata must be an object")
    if depth > 5:
        raise Problem(422, "Metadata nesting exceeds maximum depth of 5")
    if depth == 1 and len(meta) > 100:
        raise Problem(422, "Metadata exceeds maximum of 100 top-level keys")
    for value in meta.values():
        if isinstance(value, dict):
            _check_metadata(value, depth + 1)


def _check_id(value: Any) -> str:
    if not isinstance(value, str) or not ID.match(value):
        raise Problem(422, "id must match ^[a-zA-Z0-9_-]+$ (1-512 characters)")
    return value


# PostgreSQL's English stop words (snowball), the ones to_tsvector('english', …) drops.
STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very s t can will just
    don should now""".split()
)
SPECIAL = re.compile(r"[~`!@#$%^&*()_+=\[\]{};':\"\\|,.<>/?-]")


def _stem(word: str) -> str:
    """A rough English stemmer: the same for queries and documents, like the server's."""
    for suffix, repl in (("sses", "ss"), ("ies", "i"), ("ing", ""), ("ed", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: len(word) - len(suffix)] + repl
    return word


def _lower(text: str) -> str:
    """PostgreSQL's ``lower``: "İ" is "i", not "i" and a combining dot."""
    return text.lower().replace("i\u0307", "i")


def _words(text: str) -> list[str]:
    """PostgreSQL's parser: letters and digits with their combining marks make a word."""
    words, word = [], ""
    for char in text:
        if char.isalnum() or (word and unicodedata.category(char).startswith("M")):
            word += char
        elif word:
            words.append(word)
            word = ""
    return [*words, word] if word else words


def _lexemes(text: str) -> list[str]:
    """``to_tsvector('english', text)``: stemmed words, stop words and words over 2047 bytes
    dropped."""
    return [
        _stem(w)
        for w in _words(_lower(text))
        if w not in STOP_WORDS and len(w.encode()) <= MAX_WORD_BYTES
    ]


@dataclass
class FakeSession:
    id: str
    workspace_id: str
    metadata: dict[str, Any]
    configuration: dict[str, Any]
    created_at: str
    seq: int
    peers: set[str] = field(default_factory=set)
    is_active: bool = True

    def json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "is_active": self.is_active,
            "workspace_id": self.workspace_id,
            "metadata": self.metadata,
            "configuration": self.configuration,
            "created_at": self.created_at,
        }


@dataclass
class FakeMessage:
    id: str
    content: str
    peer_id: str
    session_id: str
    workspace_id: str
    metadata: dict[str, Any]
    created_at: str
    seq: int

    def json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "content": self.content,
            "peer_id": self.peer_id,
            "session_id": self.session_id,
            "workspace_id": self.workspace_id,
            "metadata": self.metadata,
            "created_at": self.created_at,
            "token_count": len(self.content.split()),
        }


@dataclass
class Fault:
    status: int
    headers: dict[str, str]
    method: str | None = None
    path_suffix: str | None = None

    def applies(self, request: httpx.Request) -> bool:
        return (self.method is None or request.method == self.method) and (
            self.path_suffix is None or request.url.path.endswith(self.path_suffix)
        )


class FakeHoncho:
    """The server's state and its request handler (``transport`` wraps it for httpx)."""

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.lock = threading.Lock()
        self.workspaces: dict[str, dict[str, Any]] = {}
        self.peers: dict[tuple[str, str], dict[str, Any]] = {}
        self.sessions: dict[tuple[str, str], FakeSession] = {}
        self.messages: list[FakeMessage] = []
        self.requests: list[tuple[str, str]] = []
        self.authorizations: list[str | None] = []
        self.faults: deque[Fault] = deque()
        self.slow_requests = 0
        self.gate: threading.Event | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.read_timeouts: list[float | None] = []
        self.message_seconds: list[float] = []
        self._work = threading.local()
        self._seq = itertools.count(1)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=self.transport)

    # test controls

    def fail(
        self,
        status: int,
        times: int = 1,
        headers: dict[str, str] | None = None,
        *,
        method: str | None = None,
        path_suffix: str | None = None,
    ) -> None:
        """Answer the next ``times`` requests (of ``method`` to a path ending in
        ``path_suffix``, when given) with ``status``."""
        with self.lock:
            self.faults.extend(
                Fault(status, headers or {}, method, path_suffix) for _ in range(times)
            )

    def slow(self, times: int = 1) -> None:
        """Make the next ``times`` requests outlast the client's timeout."""
        with self.lock:
            self.slow_requests += times

    def run_deletions(self) -> int:
        """The server's deletion worker: erase sessions marked for deletion, with messages."""
        with self.lock:
            doomed = {k for k, s in self.sessions.items() if not s.is_active}
            for k in doomed:
                del self.sessions[k]
            names = {(ws, sid) for ws, sid in doomed}
            self.messages = [
                m for m in self.messages if (m.workspace_id, m.session_id) not in names
            ]
            return len(doomed)

    def count(self, method: str, suffix: str = "") -> int:
        return sum(1 for m, p in self.requests if m == method and p.endswith(suffix))

    # HTTP

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests.append((request.method, request.url.path))
            self.authorizations.append(request.headers.get("authorization"))
            read_timeout = request.extensions.get("timeout", {}).get("read")
            self.read_timeouts.append(read_timeout)
            fault = next((f for f in self.faults if f.applies(request)), None)
            if fault is not None:
                self.faults.remove(fault)
            slow = self.slow_requests > 0
            if slow:
                self.slow_requests -= 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if slow:
                timeout = request.extensions.get("timeout", {}).get("read") or 5.0
                time.sleep(timeout)
                raise httpx.ReadTimeout("timed out", request=request)
            if self.gate is not None:
                self.gate.wait(10)
            if (
                self.api_key is not None
                and request.headers.get("authorization") != f"Bearer {self.api_key}"
            ):
                raise Problem(401, "Invalid authentication credentials")
            if fault is not None:
                raise Problem(fault.status, f"injected {fault.status}", fault.headers)
            body = json.loads(request.content) if request.content else None
            self._work.seconds = 0.0
            status, payload = self.route(request.method, request.url.path, request.url.params, body)
            if read_timeout is not None and self._work.seconds > read_timeout:
                raise httpx.ReadTimeout("timed out", request=request)
            return httpx.Response(status, json=payload)
        except Problem as exc:
            return httpx.Response(exc.status, json={"detail": exc.detail}, headers=exc.headers)
        finally:
            with self.lock:
                self.in_flight -= 1

    def route(
        self, method: str, path: str, params: httpx.QueryParams, body: Any
    ) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if parts[:2] != ["v3", "workspaces"]:
            raise Problem(404, "Not Found")
        rest = parts[2:]
        with self.lock:
            if method == "POST" and not rest:
                return 200, self._workspace(body)
            if method == "DELETE" and len(rest) == 1:
                return self._delete_workspace(rest[0])
            if len(rest) < 2:
                raise Problem(404, "Not Found")
            ws = rest[0]
            if ws not in self.workspaces:
                raise Problem(404, f"Workspace {ws} not found")
            tail = rest[1:]
            if tail[:1] == ["sessions"] and len(tail) >= 2 and tail[1] != "list":
                shape = ("sessions", "*", *tail[2:])
            else:
                shape = tuple(tail)
            handler = self._routes().get((method, *shape))
            if handler is None:
                raise Problem(404, "Not Found")
            return handler(ws, tail, params, body)

    def _routes(self) -> dict[tuple[str, ...], Callable[..., tuple[int, Any]]]:
        return {
            ("POST", "sessions"): self._get_or_create_session,
            ("POST", "sessions", "list"): self._list_sessions,
            ("PUT", "sessions", "*"): self._update_session,
            ("DELETE", "sessions", "*"): self._delete_session,
            ("POST", "sessions", "*", "messages"): self._add_messages,
            ("POST", "search"): self._search,
        }

    # handlers (called with the lock held)

    def _workspace(self, body: Any) -> dict[str, Any]:
        ws = _check_id((body or {}).get("id"))
        return self.workspaces.setdefault(
            ws, {"id": ws, "metadata": {}, "configuration": {}, "created_at": _now()}
        )

    def _delete_workspace(self, ws: str) -> tuple[int, Any]:
        if ws not in self.workspaces:
            raise Problem(404, f"Workspace {ws} not found")
        if any(s.workspace_id == ws and s.is_active for s in self.sessions.values()):
            raise Problem(409, "Cannot delete a workspace with active sessions")
        del self.workspaces[ws]
        self.sessions = {k: s for k, s in self.sessions.items() if s.workspace_id != ws}
        self.peers = {k: p for k, p in self.peers.items() if k[0] != ws}
        self.messages = [m for m in self.messages if m.workspace_id != ws]
        return 202, {"message": "Workspace deletion accepted"}

    def _session_or_create(
        self, ws: str, sid: str, metadata: Any, configuration: Any, peers: Any
    ) -> FakeSession:
        _check_id(sid)
        _check_metadata(metadata)
        session = self.sessions.get((ws, sid))
        if session is not None and not session.is_active:
            raise Problem(404, f"Session {sid} not found in workspace {ws}")
        if session is None:
            session = FakeSession(
                id=sid,
                workspace_id=ws,
                metadata=metadata or {},
                configuration=configuration or {},
                created_at=_now(),
                seq=next(self._seq),
            )
            self.sessions[(ws, sid)] = session
        else:
            if metadata is not None:
                session.metadata = metadata
            if configuration is not None:
                session.configuration = {**session.configuration, **configuration}
        for peer in peers or {}:
            self.peers.setdefault((ws, _check_id(peer)), {"metadata": {}})
            session.peers.add(peer)
        return session

    def _get_or_create_session(
        self, ws: str, rest: list[str], params: Any, body: Any
    ) -> tuple[int, Any]:
        body = body or {}
        session = self._session_or_create(
            ws,
            body.get("id"),
            body.get("metadata"),
            body.get("configuration"),
            body.get("peers"),
        )
        return 200, session.json()

    def _update_session(self, ws: str, rest: list[str], params: Any, body: Any) -> tuple[int, Any]:
        body = body or {}
        session = self._session_or_create(ws, rest[1], None, None, None)
        _check_metadata(body.get("metadata"))
        if body.get("metadata") is not None:
            session.metadata = body["metadata"]
        return 200, session.json()

    def _delete_session(self, ws: str, rest: list[str], params: Any, body: Any) -> tuple[int, Any]:
        session = self.sessions.get((ws, rest[1]))
        if session is None or not session.is_active:
            raise Problem(404, f"Session {rest[1]} not found in workspace {ws}")
        session.is_active = False
        return 202, {"message": "Session deletion accepted"}

    def _list_sessions(self, ws: str, rest: list[str], params: Any, body: Any) -> tuple[int, Any]:
        page = int(params.get("page", 1))
        size = int(params.get("size", 50))
        if page < 1 or not 1 <= size <= 100:
            raise Problem(422, "page must be >= 1 and size between 1 and 100")
        filters = (body or {}).get("filters")
        matching = [
            s
            for s in self.sessions.values()
            if s.workspace_id == ws
            and s.is_active
            and self._matches(filters, {"id": s.id, "metadata": s.metadata})
        ]
        matching.sort(key=lambda s: s.seq, reverse=params.get("reverse") == "true")
        total = len(matching)
        items = matching[(page - 1) * size : page * size]
        return 200, {
            "items": [s.json() for s in items],
            "page": page,
            "size": size,
            "total": total,
            "pages": math.ceil(total / size),
        }

    def _add_messages(self, ws: str, rest: list[str], params: Any, body: Any) -> tuple[int, Any]:
        session = self.sessions.get((ws, rest[1]))
        if session is None or not session.is_active:
            raise Problem(404, f"Session {rest[1]} not found in workspace {ws}")
        messages = (body or {}).get("messages")
        if not isinstance(messages, list) or not 1 <= len(messages) <= 100:
            raise Problem(422, "messages: between 1 and 100 items")
        for m in messages:
            if not isinstance(m.get("content"), str) or len(m["content"]) > MAX_MESSAGE_CHARS:
                raise Problem(422, f"content: at most {MAX_MESSAGE_CHARS} characters")
            _check_metadata(m.get("metadata"))
        seconds = sum(token_count_seconds(m["content"]) for m in messages)
        self.message_seconds.append(seconds)
        self._work.seconds += seconds
        created = []
        for m in messages:
            peer = m["peer_id"]
            self.peers.setdefault((ws, peer), {"metadata": {}})
            session.peers.add(peer)
            seq = next(self._seq)
            message = FakeMessage(
                id=f"msg{seq}",
                content=m["content"],
                peer_id=peer,
                session_id=session.id,
                workspace_id=ws,
                metadata=m.get("metadata") or {},
                created_at=m.get("created_at") or _now(),
                seq=seq,
            )
            self.messages.append(message)
            created.append(message.json())
        return 201, created

    def _search(self, ws: str, rest: list[str], params: Any, body: Any) -> tuple[int, Any]:
        body = body or {}
        query = body.get("query")
        limit = body.get("limit", 10)
        if not isinstance(query, str) or not query:
            raise Problem(422, "query must be a non-empty string")
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            raise Problem(422, "limit must be between 1 and 100")
        # src/utils/search.py: full-text search only (no embeddings configured). A query with
        # any punctuation is an ILIKE substring match, newest first; otherwise
        # plainto_tsquery('english', query), which needs every word, ranked by ts_rank then
        # newest first, or-ed with the ILIKE match. The server fetches 2 x limit and cuts.
        needle = _lower(query)
        wanted = set(_lexemes(query))
        special = bool(SPECIAL.search(query))
        scored = []
        for m in self.messages:
            if m.workspace_id != ws:
                continue
            row = {
                "id": m.id,
                "peer_id": m.peer_id,
                "session_id": m.session_id,
                "metadata": m.metadata,
            }
            if not self._matches(body.get("filters"), row):
                continue
            have = _lexemes(m.content)
            substring = needle in _lower(m.content)
            fts = not special and bool(wanted) and wanted <= set(have)
            if not (substring or fts):
                continue
            rank = sum(have.count(w) for w in wanted) / (1 + len(have)) if fts else 0.0
            scored.append((rank, m.seq, m))
        scored.sort(key=lambda t: (-t[0], -t[1]))
        return 200, [m.json() for _, _, m in scored[: 2 * limit][:limit]]

    def _matches(self, filters: Any, row: dict[str, Any], depth: int = 0) -> bool:
        if filters is None:
            return True
        if not isinstance(filters, dict):
            raise Problem(422, "filters must be an object")
        if depth > MAX_FILTER_DEPTH:
            raise Problem(422, "Filter nesting exceeds maximum depth of 5")
        for name, want in filters.items():
            if name in {"AND", "OR", "NOT"}:
                if not isinstance(want, list):
                    raise Problem(422, f"{name} operator must contain a list")
                # Empty sub-filters add no condition, as on the server.
                results = [self._matches(f, row, depth + 1) for f in want if f != {}]
                if name == "AND" and not all(results):
                    return False
                if name == "OR" and results and not any(results):
                    return False
                if name == "NOT" and any(results):
                    return False
                continue
            if name not in row:
                raise Problem(422, f"Invalid filter column: {name}")
            have = row[name]
            if name == "metadata":
                if not isinstance(want, dict):
                    raise Problem(422, "a JSONB column takes an object")
                if not _contains(have, want):
                    return False
            elif isinstance(want, dict):
                if set(want) != {"in"} or not isinstance(want["in"], list):
                    raise Problem(422, f"unsupported operator for {name}")
                if have not in want["in"]:
                    return False
            elif want != "*" and have != want:
                return False
        return True


LIVE_URL_VARIABLE = "ASYNCMEM_TEST_HONCHO_URL"
LIVE_KEY_VARIABLE = "ASYNCMEM_TEST_HONCHO_KEY"
TEST_KEY = "test-key-0123456789"


def live_settings() -> tuple[str, str | None] | None:
    """The live server the tests use instead of the fake, when one is configured."""
    url = os.environ.get(LIVE_URL_VARIABLE)
    if not url:
        return None
    return url, os.environ.get(LIVE_KEY_VARIABLE) or None


def fake_backend(fake: FakeHoncho, **options: Any) -> Any:
    """A :class:`~asyncmem.honcho.HonchoBackend` on ``fake``: no retries and a 5 s timeout
    unless ``options`` say otherwise."""
    from asyncmem.honcho import HonchoBackend

    settings: dict[str, Any] = {"max_retries": 0, "timeout": 5.0, **options}
    return HonchoBackend(
        base_url="http://127.0.0.1:8000", api_key=TEST_KEY, http_client=fake.client(), **settings
    )


def drop_workspace(client: Any, workspace: str, *, attempts: int = 20, pause: float = 0.25) -> None:
    """Delete every session of ``workspace``, then the workspace itself.

    Honcho answers 409 to deleting a workspace while it has an active session, so the
    sessions go first (deleting marks them inactive at once). A 409 left after that (a
    session created meanwhile) is retried a few times, then raised: a clean-up that fails
    says so.
    """
    import honcho

    for attempt in range(attempts):
        for session in list(client.sessions(size=100)):
            with suppress(honcho.NotFoundError):
                session.delete()
        try:
            client.delete_workspace(workspace)
        except honcho.NotFoundError:
            return
        except honcho.ConflictError:
            if attempt == attempts - 1:
                raise
            time.sleep(pause)
        else:
            return


@asynccontextmanager
async def honcho_backend(tmp_path: Path | None = None, **options: Any) -> AsyncIterator[Any]:
    """A :class:`~asyncmem.honcho.HonchoBackend`, open: on the live server named by
    ``ASYNCMEM_TEST_HONCHO_URL`` (in a fresh workspace) when set, else on a fresh
    :class:`FakeHoncho`. The factory for the shared conformance suite. Afterwards the
    workspace is deleted, sessions first, on the fake too (so the clean-up is tested)."""
    from asyncmem.honcho import HonchoBackend

    live = live_settings()
    workspace = f"asyncmem-test-{uuid.uuid4().hex[:12]}"
    if live is not None:
        url, key = live
        settings: dict[str, Any] = {"base_url": url, "api_key": key, "workspace_id": workspace}
    else:
        fake = FakeHoncho(api_key=TEST_KEY)
        options.setdefault("max_retries", 0)
        http = fake.client()
        settings = {
            "base_url": "http://127.0.0.1:8000",
            "api_key": TEST_KEY,
            "workspace_id": workspace,
            "http_client": http,
        }
    async with HonchoBackend(**settings, **options) as backend:
        yield backend
    async with HonchoBackend(**settings) as cleaner:
        await cleaner._call("cleanup", drop_workspace, workspace)
    if live is None:
        assert workspace not in fake.workspaces
