"""The SQL store: one class for SQLite (embedded, the default) and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import math
import re
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import bindparam
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL

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
    check_text,
    check_ttl,
    check_value,
    check_where,
    metadata_json,
)
from asyncmem.errors import AsyncmemError, InvalidInputError
from asyncmem.sql import filters, migrate, search
from asyncmem.sql.drivers import (
    Driver,
    PostgresDriver,
    SQLiteDriver,
    Transaction,
    translate_errors,
)
from asyncmem.sql.engine import (
    is_local,
    make_engine,
    normalize_url,
    prepare_sqlite_file,
    sqlite_path,
)
from asyncmem.sql.models import Memory
from asyncmem.sql.search import (
    candidate_count,
    facets_of,
    fts5_expression,
    neighbour_contexts,
    query_terms,
    rerank,
    session_of,
    tsquery_expression,
)
from asyncmem.sql.statements import (
    _DIALECTS,
    SQL,
    Statements,
    compile_sql,
    filtered_statement,
    statements_for,
)

__all__ = ["SQLBackend"]

_T = TypeVar("_T")
_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _metadata(raw: Any) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return loaded


_BATCH_TEXT = 32 * 1024 * 1024
"""Largest JSON text of the items of one ``store_many`` statement, in characters."""


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _batch_chunks(items: list[BatchItem]) -> list[str]:
    """The items as JSON arrays of ``[key, value, metadata, ttl, session, facets]``, split
    by size."""
    chunks: list[str] = []
    parts: list[str] = []
    size = 0
    for item in items:
        ttl = "null" if item.ttl is None else repr(item.ttl)
        key_and_value = _dumps([item.key, item.value])
        extra = _dumps([session_of(item.metadata), facets_of(item.metadata, item.value)])
        part = f"{key_and_value[:-1]},{item.metadata_text},{ttl},{extra[1:]}"
        if parts and size + len(part) > _BATCH_TEXT:
            chunks.append("[" + ",".join(parts) + "]")
            parts, size = [], 0
        parts.append(part)
        size += len(part) + 1
    chunks.append("[" + ",".join(parts) + "]")
    return chunks


def _live_count(rows: list[Any]) -> int:
    """How many deleted rows (``expires_at``, ``now``, ...) had not expired."""
    return sum(1 for row in rows if row[0] is None or row[0] > row[1])


def _one_word_queries(terms: list[str]) -> dict[str, str]:
    """PostgreSQL's per-word ``to_tsquery`` texts, as the BM25 statement binds them."""
    return {f"term{i}": tsquery_expression([term]) for i, term in enumerate(terms)}


def _entry(row: Any, score: float | None = None) -> MemoryEntry:
    return MemoryEntry(row[0], row[1], row[2], _metadata(row[3]), row[4], row[5], score, row[6])


class SQLBackend(BackendBase):
    """Memories in a SQL database: SQLite by default, PostgreSQL on request.

    ``url`` is a SQLAlchemy URL (``sqlite:///path/memory.db``, ``postgresql://host/db``; the
    async driver is chosen for you); ``None`` is the embedded file in the user data directory.
    ``auto_migrate`` upgrades an older schema on open (default: on for SQLite, off for
    PostgreSQL, where an operator runs ``asyncmem db upgrade``). A schema newer than this code
    always raises :class:`~asyncmem.errors.SchemaError`.

    SQLite: WAL with ``synchronous=NORMAL``. A returned write survives a crash of the process;
    a power loss may lose the last moments of writes but never corrupts the file. Each write is
    one statement holding the write lock only while it runs (a conversation turn's, one short
    transaction that also updates its neighbours, DESIGN.md §8); writers in other processes
    wait up to ``busy_timeout`` seconds. ``readers`` connections serve reads next to the writer.

    ``max_versions`` is how many versions of a memory :meth:`history` keeps, the current one
    included (default 10). It is kept in the database, because the triggers that keep the
    history read it: giving it sets it for every store on that database; ``None`` leaves it.

    PostgreSQL: ``schema`` puts the tables in that schema (created on open when
    ``auto_migrate``), so several stores can share one database; ``timeout`` bounds connecting
    and each statement, in seconds; ``pool_size`` caps the connections.

    The schema lives in the ORM model (:mod:`asyncmem.sql.models`) and Alembic; the statements
    are built from that model and compiled once (:mod:`asyncmem.sql.statements`), then each
    call is one round trip on the driver connection.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        auto_migrate: bool | None = None,
        busy_timeout: float = 5.0,
        readers: int = 1,
        schema: str | None = None,
        timeout: float = 30.0,
        pool_size: int = 10,
        max_versions: int | None = None,
    ) -> None:
        super().__init__()
        if max_versions is not None and (
            isinstance(max_versions, bool)
            or not isinstance(max_versions, int)
            or not 1 <= max_versions <= MAX_LIMIT
        ):
            raise InvalidInputError(f"max_versions must be an int from 1 to {MAX_LIMIT}")
        self.max_versions = max_versions
        self._url = normalize_url(url)
        self.dialect = self._url.get_backend_name()
        if self.dialect == "sqlite" and sqlite_path(self._url) is None:
            raise InvalidInputError(
                "in-memory SQLite is not supported: give a file path (a temporary directory "
                "works), or use the null backend"
            )
        if schema is not None and (self.dialect != "postgresql" or not _SCHEMA.fullmatch(schema)):
            raise InvalidInputError(
                "schema must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 "
                "characters) and is for PostgreSQL only"
            )
        self.schema = schema
        self.backend_name = f"sql ({self.dialect})"
        self.is_cloud = not is_local(self._url)
        self.auto_migrate = self.dialect == "sqlite" if auto_migrate is None else auto_migrate
        self._busy_timeout = busy_timeout
        self._timeout = timeout
        self._sql: Statements = statements_for(self.dialect)
        self._driver: Driver
        if self.dialect == "sqlite":
            self._driver = SQLiteDriver(
                sqlite_path(self._url), busy_timeout=busy_timeout, readers=readers
            )
        else:
            self._driver = PostgresDriver(
                self._url, pool_size=pool_size, timeout=timeout, schema=schema
            )
        self._last_time = 0.0

    @property
    def url(self) -> str:
        """The database URL with any password masked."""
        return self._url.render_as_string(hide_password=True)

    @property
    def path(self) -> str | None:
        """The SQLite database file, or ``None`` for a server."""
        found = sqlite_path(self._url)
        return None if found is None else str(found)

    def __repr__(self) -> str:
        return f"SQLBackend({self.url!r})"

    async def _open(self) -> None:
        with translate_errors("open"):
            path = sqlite_path(self._url)
            if path is not None:
                await asyncio.to_thread(prepare_sqlite_file, path, self._busy_timeout)
            engine = make_engine(
                self._url,
                busy_timeout=self._busy_timeout,
                timeout=self._timeout,
                schema=self.schema,
            )
            try:
                await migrate.ensure_schema(
                    engine, auto_migrate=self.auto_migrate, schema=self.schema
                )
            finally:
                await engine.dispose()
            await self._driver.open()
            if self.max_versions is not None:
                setting = self._sql.set_setting
                await self._driver.execute(
                    setting, setting.args(name="max_versions", value=self.max_versions)
                )

    async def _close(self) -> None:
        await self._driver.close()

    async def _fetch(
        self, operation: str, sql: SQL, args: Sequence[Any], *, write: bool = False
    ) -> list[Any]:
        """Run one statement for ``operation`` (opening first if need be); return its rows."""
        await self._ready()
        with translate_errors(operation):
            return await self._driver.fetch(sql, args, write=write)

    async def _execute(self, operation: str, sql: SQL, args: Sequence[Any]) -> int:
        """Run one writing statement for ``operation``; return how many rows it changed."""
        await self._ready()
        with translate_errors(operation):
            return await self._driver.execute(sql, args)

    def _now(self) -> float:
        """This process's clock, never repeating, for SQLite writes (which it serialises)."""
        now = max(time.time(), self._last_time + 1e-6)
        self._last_time = now
        return now

    async def is_available(self) -> bool:
        if self.closed:
            return False
        try:
            await self._fetch("is_available", self._sql.ping, ())
        except AsyncmemError:
            return False
        return True

    def _filter(
        self, kind: str, where: tuple[Condition, ...], *, one_user: bool = True, terms: int = 0
    ) -> tuple[SQL, dict[str, Any]]:
        """The statement for a ``where`` filter's shape (compiled once) and its bound values."""
        if not where and one_user and kind != "scan" and not terms:
            return getattr(self._sql, kind), {}
        sql = filtered_statement(self.dialect, kind, filters.shape_of(where), one_user, terms)
        return sql, filters.values(where, self.dialect)

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
        storing again without ``ttl`` keeps the memory until it is deleted.
        """
        check_id("user_id", user_id)
        check_id("key", key)
        check_value(value)
        clean, metadata_text = metadata_json(metadata)
        seconds = check_ttl(ttl)
        session = session_of(clean)
        upsert = self._sql.upsert
        values = {
            "user_id": user_id,
            "key": key,
            "value": value,
            "metadata": metadata_text,
            "ttl": seconds,
            "session": session,
            "facets": facets_of(clean, value),
        }
        if session is None:
            args = upsert.args(context="", now=self._now(), **values)
            (row,) = await self._fetch("store", upsert, args, write=True)
            if row[4] is not None:
                async with self._upkeep("store", [user_id]) as transaction:
                    await self._leave(transaction, user_id, row[3], row[4])
        else:
            now = self._now()
            row = await self._atomic(
                "store", [user_id], lambda transaction: self._store_turn(transaction, values, now)
            )
        return MemoryEntry(user_id, key, value, clean, row[0], row[1], None, row[2])

    async def _store_turn(
        self, transaction: Transaction, values: dict[str, Any], now: float
    ) -> Any:
        """Upsert a conversation turn and keep its neighbours' contexts exact.

        The common case, a new last turn, reads the conversation's last turns once, writes
        the turn with its context and updates the previous turns whose context changed. A
        turn stored again, or moved from another conversation, has the windows around it
        (in the old and the new conversation) recomputed.
        """
        sql = self._sql
        user_id, session = values["user_id"], values["session"]
        tail = list(
            reversed(
                await transaction.fetch(
                    sql.turns_tail, sql.turns_tail.args(user_id=user_id, session=session)
                )
            )
        )
        # Only the last CONTEXT_AFTER turns of the tail see the new turn; the rest are read
        # for their words.
        first = max(0, len(tail) - search.CONTEXT_AFTER)
        contexts = neighbour_contexts([turn[1] for turn in tail] + [values["value"]], first=first)
        args = sql.upsert.args(context=contexts[-1], now=now, **values)
        (row,) = await transaction.fetch(sql.upsert, args)
        row_id, old = row[3], row[4]
        if old == session and (not tail or row_id > tail[-1][0]):
            await self._write_contexts(transaction, tail[first:], contexts, None)
            return row
        if old != session:
            await transaction.fetch(
                sql.set_session, sql.set_session.args(id=row_id, new_session=session)
            )
            if old is not None:
                await self._refresh(transaction, user_id, old, row_id)
        await self._refresh(transaction, user_id, session, row_id)
        return row

    @asynccontextmanager
    async def _upkeep(self, operation: str, users: Collection[str]) -> AsyncIterator[Transaction]:
        """A write transaction for conversation upkeep (DESIGN.md §8).

        On PostgreSQL it first takes one advisory lock per user (in a fixed order), before
        any row lock: each upkeep then reads the turns the one before it committed, and no
        two writes wait on each other's rows (upkeep updates rows other than the one written).
        Writes of different users still run in parallel. SQLite serialises writers already.
        """
        await self._ready()
        with translate_errors(operation):
            async with self._driver.transaction() as transaction:
                await self._lock_users(transaction, users)
                yield transaction

    async def _atomic(
        self,
        operation: str,
        users: Collection[str],
        body: Callable[[Transaction], Coroutine[Any, Any, _T]],
    ) -> _T:
        """Run ``body`` as the transaction of :meth:`_upkeep`, in one trip on SQLite.

        ``body`` may await only its transaction's statements (see ``SQLiteDriver.atomic``).
        """

        async def locked(transaction: Transaction) -> _T:
            await self._lock_users(transaction, users)
            return await body(transaction)

        await self._ready()
        with translate_errors(operation):
            return await self._driver.atomic(locked)

    async def _lock_users(self, transaction: Transaction, users: Collection[str]) -> None:
        """PostgreSQL: take each user's advisory lock, in a fixed order (SQLite: nothing)."""
        lock = self._sql.lock_user
        if lock is not None:
            for user_id in sorted(set(users)):
                await transaction.fetch(lock, lock.args(user_id=user_id))

    async def _write_contexts(
        self,
        transaction: Transaction,
        rows: Sequence[Any],
        contexts: list[str],
        at: int | None,
    ) -> None:
        """Store the contexts of ``rows`` (id, value, context) that changed.

        With ``at``, only the rows whose window holds position ``at`` (from
        :data:`~asyncmem.sql.search.CONTEXT_AFTER` before it to
        :data:`~asyncmem.sql.search.CONTEXT_BEFORE` after it): the others were read for their
        words only; their own windows reach past what was read.
        """
        if at is None:
            near = range(len(rows))
        else:
            near = range(max(0, at - search.CONTEXT_AFTER), at + search.CONTEXT_BEFORE + 1)
        set_context = self._sql.set_context
        changed = [
            set_context.args(id=rows[i][0], context=contexts[i])
            for i in near
            if i < len(rows) and rows[i][2] != contexts[i]
        ]
        if changed:
            await transaction.executemany(set_context, changed)

    async def _refresh(
        self, transaction: Transaction, user_id: str, session: str, around: int
    ) -> None:
        """Rewrite the contexts of the turns whose neighbours changed at row ``around``.

        A change at ``around`` (stored, updated, deleted, moved in or out) alters the context
        of the turns whose window reaches it; their own windows read up to ``CONTEXT_BEFORE +
        CONTEXT_AFTER`` turns from it on each side, so that much is read and only changed
        contexts are written.
        """
        sql = self._sql
        window = {"user_id": user_id, "session": session, "around": around}
        rows = list(
            reversed(await transaction.fetch(sql.turns_before, sql.turns_before.args(**window)))
        )
        at = len(rows)
        rows += await transaction.fetch(sql.turns_from, sql.turns_from.args(**window))
        await self._write_contexts(transaction, rows, neighbour_contexts([r[1] for r in rows]), at)

    async def _rewrite(self, transaction: Transaction, user_id: str, session: str) -> None:
        """Recompute every turn's context of one conversation (after a batch wrote to it)."""
        turns = self._sql.turns_all
        rows = await transaction.fetch(turns, turns.args(user_id=user_id, session=session))
        await self._write_contexts(
            transaction, rows, neighbour_contexts([r[1] for r in rows]), None
        )

    async def _leave(
        self, transaction: Transaction, user_id: str, row_id: int, session: str
    ) -> None:
        """A memory stored without a session left ``session``: clear it, mend the gap.

        Runs after the store's own statement committed, so it clears the row's session only
        if no other write has moved it since.
        """
        clear = self._sql.clear_session
        await transaction.fetch(clear, clear.args(id=row_id, session=session))
        await self._refresh(transaction, user_id, session, row_id)

    async def _settle(
        self, transaction: Transaction, changes: Iterable[tuple[str, int, Any, Any]]
    ) -> None:
        """After a batch: move rows whose session changed, recompute every touched session.

        ``changes`` are (user_id, row id, session the row had, session it should have).
        """
        set_session = self._sql.set_session
        touched: set[tuple[str, str]] = set()
        for user_id, row_id, old, new in changes:
            if old != new:
                await transaction.fetch(set_session, set_session.args(id=row_id, new_session=new))
            touched.update((user_id, s) for s in (old, new) if s is not None)
        for user_id, session in sorted(touched):
            await self._rewrite(transaction, user_id, session)

    async def _mend(self, operation: str, removed: Iterable[tuple[str, int, Any]]) -> None:
        """After a write outside a transaction removed memories (user_id, row id, session):
        recompute the windows around the turns among them, so no context keeps their words."""
        gaps = [(user_id, row_id, session) for user_id, row_id, session in removed if session]
        if not gaps:
            return
        async with self._upkeep(operation, [user_id for user_id, _, _ in gaps]) as transaction:
            for user_id, row_id, session in gaps:
                await self._refresh(transaction, user_id, session, row_id)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        check_id("user_id", user_id)
        check_id("key", key)
        args = self._sql.retrieve.args(user_id=user_id, key=key, now=time.time())
        rows = await self._fetch("retrieve", self._sql.retrieve, args)
        return _entry(rows[0]) if rows else None

    async def query(
        self,
        user_id: str,
        text: str,
        limit: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryEntry]:
        """Memories of ``user_id`` ranked by relevance to the question ``text``.

        The text is split into words; common function words are dropped and the rest OR-ed.
        Two stages (DESIGN.md §8): the database ranks candidates by BM25 over the words they
        share with the question, a memory's own words weighing most, its speaker and date
        words less and its neighbour turns' words least (FTS5's ``bm25()`` on SQLite, the
        same formula in SQL on PostgreSQL, both with English stemming); then
        :func:`~asyncmem.sql.search.rerank` orders them the same way on both. Text with no
        searchable words returns ``[]``.
        ``where`` keeps only memories whose metadata matches, in the same statement (see
        :mod:`asyncmem.sql.filters`).
        """
        check_id("user_id", user_id)
        check_text(text)
        check_limit(limit)
        conditions = check_where(where)
        terms = query_terms(text)
        if not terms:
            await self._ready()
            return []
        expression = (
            fts5_expression(terms) if self.dialect == "sqlite" else tsquery_expression(terms)
        )
        words = {} if self.dialect == "sqlite" else _one_word_queries(terms)
        sql, bound = self._filter("query", conditions, terms=len(words))
        args = sql.args(
            **words,
            match=expression,
            user_id=user_id,
            limit=candidate_count(limit),
            now=time.time(),
            **bound,
        )
        rows = await self._fetch("query", sql, args)
        entries = [_entry(row, float(row[7])) for row in rows]
        ranked = rerank(
            terms,
            [float(row[7]) for row in rows],
            [entry.metadata for entry in entries],
            limit,
            values=[entry.value for entry in entries],
            temporal=search.is_temporal(text),
        )
        return [dataclasses.replace(entries[i], score=score) for i, score in ranked]

    async def list_keys(
        self,
        user_id: str,
        *,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        """Keys of live memories, most recently updated first; a page of them with ``limit``."""
        check_id("user_id", user_id)
        conditions = check_where(where)
        count = check_page_limit(limit)
        skip = check_offset(offset)
        sql, bound = self._filter("list_keys", conditions)
        if count is None and self.dialect == "sqlite":
            count = -1
        args = sql.args(user_id=user_id, limit=count, offset=skip, now=time.time(), **bound)
        rows = await self._fetch("list_keys", sql, args)
        return [row[0] for row in rows]

    async def delete(self, user_id: str, key: str) -> bool:
        """Delete a memory and its versions; ``True`` if it was there and not expired."""
        check_id("user_id", user_id)
        check_id("key", key)
        args = self._sql.delete.args(user_id=user_id, key=key, now=time.time())
        rows = await self._fetch("delete", self._sql.delete, args, write=True)
        await self._mend("delete", [(user_id, row[2], row[3]) for row in rows])
        return _live_count(rows) > 0

    async def forget_user(self, user_id: str) -> int:
        """Delete every memory and version of ``user_id``; return how many live ones there were.

        On SQLite the full-text index is then optimised (rewritten in one segment), so the
        user's words are gone from its shadow tables too, not only marked deleted: this costs
        time in proportion to the whole index, not to the user's memories.
        """
        check_id("user_id", user_id)
        args = self._sql.forget_user.args(user_id=user_id, now=time.time())
        rows = await self._fetch("forget_user", self._sql.forget_user, args, write=True)
        if rows and self.dialect == "sqlite":
            await self._execute("forget_user", self._sql.fts_optimize, ())
        return _live_count(rows)

    def scan(
        self,
        user_id: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[MemoryEntry]:
        """Stream live memories (of one user, or of all with ``None``) in insertion order.

        Keyset pagination on the row id: each page is one statement after the last id seen, so
        memory use is one page and memories stored during the scan with a higher id are seen.
        """
        if user_id is not None:
            check_id("user_id", user_id)
        conditions = check_where(where)
        size = check_page_size(page_size)
        sql, bound = self._filter("scan", conditions, one_user=user_id is not None)
        return self._scan(sql, bound, user_id, size)

    async def _scan(
        self, sql: SQL, bound: dict[str, Any], user_id: str | None, size: int
    ) -> AsyncIterator[MemoryEntry]:
        after = 0
        while True:
            args = sql.args(user_id=user_id, after=after, limit=size, now=time.time(), **bound)
            rows = await self._fetch("scan", sql, args)
            for row in rows:
                yield _entry(row)
            if len(rows) < size:
                return
            after = rows[-1][7]

    async def history(self, user_id: str, key: str, limit: int = 10) -> list[MemoryEntry]:
        """The memory and its kept previous versions, newest first; ``[]`` if it is gone."""
        check_id("user_id", user_id)
        check_id("key", key)
        check_limit(limit)
        args = self._sql.history.args(user_id=user_id, key=key, limit=limit, now=time.time())
        rows = await self._fetch("history", self._sql.history, args)
        return [_entry(row) for row in rows]

    async def store_many(
        self, user_id: str, items: Iterable[Mapping[str, Any]]
    ) -> list[MemoryEntry]:
        """Store every item (``key``, ``value``, optional ``metadata`` and ``ttl``), all or none.

        Every item is checked before anything is written; then one transaction upserts them
        all in one statement that returns their timestamps (a batch larger than
        ``_BATCH_TEXT`` characters of JSON is split into statements of one transaction).
        Keys must be distinct. With conversation turns among them (``metadata.session``) the
        same transaction then recomputes the context of every conversation the batch touched.
        """
        check_id("user_id", user_id)
        checked = check_items(items)
        if not checked:
            await self._ready()
            return []
        upsert = self._sql.upsert_many
        chunks = _batch_chunks(checked)
        now = self._now()
        stored: list[Any] = []
        sessions = {item.key: session_of(item.metadata) for item in checked}
        if any(session is not None for session in sessions.values()):
            async with self._upkeep("store_many", [user_id]) as transaction:
                for chunk in chunks:
                    args = upsert.args(user_id=user_id, items=chunk, now=now)
                    stored.extend(await transaction.fetch(upsert, args))
                await self._settle(
                    transaction, [(user_id, r[4], r[5], sessions[r[0]]) for r in stored]
                )
        elif len(chunks) == 1:
            args = upsert.args(user_id=user_id, items=chunks[0], now=now)
            stored = await self._fetch("store_many", upsert, args, write=True)
        else:
            await self._ready()
            with translate_errors("store_many"):
                async with self._driver.transaction() as transaction:
                    for chunk in chunks:
                        args = upsert.args(user_id=user_id, items=chunk, now=now)
                        stored.extend(await transaction.fetch(upsert, args))
        left = [(user_id, r[4], r[5], None) for r in stored if r[5] is not None]
        if left and all(session is None for session in sessions.values()):
            async with self._upkeep("store_many", [user_id]) as transaction:
                for _, row_id, old, _ in left:
                    await self._leave(transaction, user_id, row_id, old)
        times = {row[0]: (row[1], row[2], row[3]) for row in stored}
        return [
            MemoryEntry(
                user_id,
                item.key,
                item.value,
                item.metadata,
                times[item.key][0],
                times[item.key][1],
                None,
                times[item.key][2],
            )
            for item in checked
        ]

    def _keys_arg(self, keys: list[str]) -> Any:
        return keys if self.dialect == "postgresql" else json.dumps(keys)

    async def delete_many(self, user_id: str, keys: Iterable[str]) -> int:
        """Delete the memories (and versions) under ``keys`` in one statement; count live ones."""
        check_id("user_id", user_id)
        checked = check_keys(keys)
        if not checked:
            await self._ready()
            return 0
        sql = self._sql.delete_many
        args = sql.args(user_id=user_id, keys=self._keys_arg(checked), now=time.time())
        rows = await self._fetch("delete_many", sql, args, write=True)
        await self._mend("delete_many", [(user_id, row[2], row[3]) for row in rows])
        return _live_count(rows)

    async def purge_expired(self) -> int:
        """Delete expired memories (and expired versions); return how many memories went.

        Not needed for correctness (reads already hide them); it reclaims space, and takes
        purged turns out of their neighbours' contexts.
        """
        now = time.time()
        purge = self._sql.purge_expired
        count = await self._execute("purge_expired", purge, purge.args(now=now))
        turns = self._sql.purge_expired_turns
        gone = await self._fetch("purge_expired", turns, turns.args(now=now), write=True)
        await self._mend("purge_expired", [(row[0], row[1], row[2]) for row in gone])
        count += len(gone)
        versions = self._sql.purge_expired_versions
        await self._execute("purge_expired", versions, versions.args(now=now))
        return count

    async def import_entries(self, entries: Iterable[MemoryEntry]) -> int:
        """Upsert ``entries`` with their own timestamps and expiry, all or nothing.

        For restoring an export: unlike :meth:`store`, the timestamps are taken from the
        entries, so an export imported into an empty store reproduces it exactly, and
        importing the same entries twice changes nothing. Every entry is validated before
        anything is written, and one statement writes them all, so a call either writes
        every entry or none. At most :data:`MAX_IMPORT_BATCH` distinct memories a call; a
        key given twice keeps its last entry. Returns the number of memories written.
        """
        rows: dict[tuple[str, str], tuple[Any, ...]] = {}
        for entry in entries:
            user_id = check_id("user_id", entry.user_id)
            key = check_id("key", entry.key)
            clean, metadata_text = metadata_json(entry.metadata)
            rows[(user_id, key)] = (
                user_id,
                key,
                check_value(entry.value),
                metadata_text,
                _check_timestamp("created_at", entry.created_at),
                _check_timestamp("updated_at", entry.updated_at),
                None
                if entry.expires_at is None
                else _check_timestamp("expires_at", entry.expires_at),
                session_of(clean),
                facets_of(clean, entry.value),
            )
        if len(rows) > MAX_IMPORT_BATCH:
            raise InvalidInputError(f"import at most {MAX_IMPORT_BATCH} memories a call")
        if not rows:
            await self._ready()
            return 0
        sql = _import_sql(self.dialect, len(rows))
        named = {
            f"{field}_{n}": value
            for n, row in enumerate(rows.values())
            for field, value in zip(_IMPORT_FIELDS, row, strict=True)
        }
        sessions = {(row[0], row[1]): row[7] for row in rows.values()}
        users = {row[0] for row in rows.values()}
        if any(session is not None for session in sessions.values()):
            async with self._upkeep("import_entries", users) as transaction:
                written = await transaction.fetch(sql, sql.args(**named))
                await self._settle(
                    transaction, [(u, i, old, sessions[u, k]) for u, k, i, old in written]
                )
            return len(rows)
        written = await self._fetch("import_entries", sql, sql.args(**named), write=True)
        left = [(u, i, old) for u, _, i, old in written if old is not None]
        if left:
            async with self._upkeep("import_entries", users) as transaction:
                for user_id, row_id, old in left:
                    await self._leave(transaction, user_id, row_id, old)
        return len(rows)


_IMPORT_FIELDS = (
    "user_id",
    "key",
    "value",
    "metadata_",
    "created_at",
    "updated_at",
    "expires_at",
    "session",
    "facets",
)
MAX_IMPORT_BATCH = 1000
"""Most memories one :meth:`SQLBackend.import_entries` call takes (one statement's worth)."""


def _check_timestamp(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number of unix seconds")
    return float(value)


@functools.lru_cache(maxsize=8)
def _import_sql(dialect_name: str, count: int) -> SQL:
    """One statement upserting ``count`` memories with the timestamps given, in that order.

    Like every upsert it leaves ``session`` and ``context`` of an existing row alone and
    returns the session the row had (see ``_on_conflict`` in :mod:`asyncmem.sql.statements`).
    """
    values: list[dict[str, Any]] = [
        {name: bindparam(f"{name}_{n}") for name in _IMPORT_FIELDS} for n in range(count)
    ]
    insert = (sqlite.insert if dialect_name == "sqlite" else postgresql.insert)(Memory)
    statement = insert.values(values)
    upsert = statement.on_conflict_do_update(
        index_elements=[Memory.user_id, Memory.key],
        set_={
            Memory.value: statement.excluded.value,
            Memory.metadata_: statement.excluded["metadata"],
            Memory.created_at: statement.excluded.created_at,
            Memory.updated_at: statement.excluded.updated_at,
            Memory.expires_at: statement.excluded.expires_at,
            Memory.facets: statement.excluded.facets,
        },
    ).returning(Memory.user_id, Memory.key, Memory.id, Memory.session)
    return compile_sql(upsert, _DIALECTS[dialect_name])
