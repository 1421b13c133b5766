"""The SQL store: one class for SQLite (embedded, the default) and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar

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
    check_timestamp,
    check_ttl,
    check_value,
    check_where,
    metadata_json,
)
from asyncmem.errors import AsyncmemError, InvalidInputError
from asyncmem.sql import conversations, search
from asyncmem.sql.compiled import (
    HEAD,
    IMPORT_FIELDS,
    PLAIN_MANY_FIELDS,
    SQL,
    Statements,
    load_statements,
)
from asyncmem.sql.drivers import (
    Driver,
    Lookup,
    Pack,
    PostgresDriver,
    Row,
    SQLiteDriver,
    Transaction,
    translate_errors,
)
from asyncmem.sql.files import parse_url, prepare_sqlite_file
from asyncmem.sql.search import candidate_count, query_terms, rerank, session_of
from asyncmem.sql.terms import MERGE_AFTER, index_columns, question_terms

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["SQLBackend"]

_T = TypeVar("_T")
_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def _metadata(raw: Any) -> dict[str, Any]:
    """A row's metadata as a new dict (the empty object, a common case, without parsing)."""
    if raw == "{}":
        return {}
    loaded: dict[str, Any] = json.loads(raw) if isinstance(raw, str | bytes) else raw
    return loaded


_BATCH_TEXT = 32 * 1024 * 1024
"""Largest JSON text of the items of one ``store_many`` statement, in characters."""


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _batch_chunks(items: list[BatchItem]) -> list[str]:
    """The items as JSON arrays of ``[key, value, metadata, ttl, session, facets, words,
    length]``, split by size."""
    chunks: list[str] = []
    parts: list[str] = []
    size = 0
    for item in items:
        ttl = "null" if item.ttl is None else repr(item.ttl)
        key_and_value = _dumps([item.key, item.value])
        extra = _dumps(
            [session_of(item.metadata), *index_columns(item.key, item.value, item.metadata)]
        )
        part = f"{key_and_value[:-1]},{item.metadata_text},{ttl},{extra[1:]}"
        if parts and size + len(part) > _BATCH_TEXT:
            chunks.append("[" + ",".join(parts) + "]")
            parts, size = [], 0
        parts.append(part)
        size += len(part) + 1
    chunks.append("[" + ",".join(parts) + "]")
    return chunks


class _PlainStores:
    """PostgreSQL: how concurrent plain stores (``upsert_plain`` calls) join into one
    ``upsert_plain_many`` statement, and which returned row is whose (by user and key)."""

    def __init__(self, plain: SQL, many: SQL) -> None:
        self._many = many
        self._at = [plain.names.index(name) for name in PLAIN_MANY_FIELDS]
        self._user, self._key = plain.names.index("user_id"), plain.names.index("key")

    def args(self, calls: Sequence[Sequence[Any]]) -> Sequence[Any]:
        metadata = PLAIN_MANY_FIELDS.index("metadata")
        items = []
        for call in calls:
            fields = [call[at] for at in self._at]
            head, tail = _dumps(fields[:metadata]), _dumps(fields[metadata + 1 :])
            items.append(f"{head[:-1]},{fields[metadata]},{tail[1:]}")  # metadata: JSON text
        return self._many.args(items="[" + ",".join(items) + "]")

    def answers(self, calls: Sequence[Sequence[Any]], rows: Sequence[Any]) -> list[list[Any]]:
        written = {(row["user_id"], row["key"]): row for row in rows}
        found = (written.get((call[self._user], call[self._key])) for call in calls)
        return [[] if row is None else [row] for row in found]


def _ranking(row: Row) -> dict[str, Any]:
    """What :func:`~asyncmem.sql.search.rerank` reads of a candidate's metadata, from the
    query's own columns: the session as its JSON text (which tells sessions apart as the
    decoded values do), the speaker and the caption when they are strings."""
    ranking: dict[str, Any] = {}
    if (session := row["session"]) is not None:
        ranking["session"] = session
    if (speaker := row["speaker"]) is not None:
        ranking["speaker"] = speaker
    if (caption := row["caption"]) is not None:
        ranking["caption"] = caption
    return ranking


def _live_count(rows: Sequence[Row]) -> int:
    """How many deleted rows (``expires_at``, ``now``, ...) had not expired."""
    return sum(1 for row in rows if row["expires_at"] is None or row["expires_at"] > row["now"])


def _entry(
    row: Row, score: float | None = None, metadata: dict[str, Any] | None = None
) -> MemoryEntry:
    return MemoryEntry(
        row["user_id"],
        row["key"],
        row["value"],
        _metadata(row["metadata"]) if metadata is None else metadata,
        row["created_at"],
        row["updated_at"],
        score,
        row["expires_at"],
    )


class SQLBackend(BackendBase):
    """Memories in a SQL database: SQLite by default, PostgreSQL on request.

    ``url`` is a SQLAlchemy URL (``sqlite:///path/memory.db``, ``postgresql://host/db``; the
    async driver is chosen for you); ``None`` is the embedded file in the user data directory.
    ``auto_migrate`` upgrades an older schema on open (default: on for SQLite, off for
    PostgreSQL, where an operator runs ``asyncmem db upgrade``). A schema newer than this code
    always raises :class:`~asyncmem.errors.SchemaError`.

    SQLite: WAL with ``synchronous=NORMAL``. A returned write survives a crash of the process;
    a power loss may lose the last moments of writes but never corrupts the file. Every write
    is one short transaction together with the upkeep of its conversation's neighbour contexts
    (:mod:`asyncmem.sql.conversations`): a call that raised changed nothing. Concurrent calls
    are answered in batches, one trip to the writer's thread per batch and a transaction per
    write; writers in other processes wait up to ``busy_timeout`` seconds. ``readers`` connections
    serve reads next to the writer. A :meth:`retrieve`, :meth:`store` or :meth:`delete` that
    comes alone while no batch is at work runs on the event loop's own thread, which saves it
    the trip to a thread: a lookup by key costs the loop less there than the trip would, and
    a small write its statement (0.1-0.2 ms; large writes, and those whose upkeep would be
    heavy, still go to the writer's thread). Calls that come together go to the threads in
    batches.

    ``max_versions`` is how many versions of a memory :meth:`history` keeps, the current one
    included (default 10). It is kept in the database, because the triggers that keep the
    history read it: giving it sets it for every store on that database; ``None`` leaves it.

    SQLite: the directories the store creates are 0700 and the file 0600; an existing file
    that another user owns, or that others may write to, raises
    :class:`~asyncmem.errors.BackendUnavailableError` unless ``allow_shared_file``.

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
        allow_shared_file: bool = False,
    ) -> None:
        super().__init__()
        if max_versions is not None and (
            isinstance(max_versions, bool)
            or not isinstance(max_versions, int)
            or not 1 <= max_versions <= MAX_LIMIT
        ):
            raise InvalidInputError(f"max_versions must be an int from 1 to {MAX_LIMIT}")
        self.max_versions = max_versions
        self._url = parse_url(url)
        self.dialect = self._url.dialect
        if self.dialect == "sqlite" and self._url.path is None:
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
        self.is_cloud = not self._url.local
        self.auto_migrate = self.dialect == "sqlite" if auto_migrate is None else auto_migrate
        busy_timeout = check_seconds("busy_timeout", busy_timeout)
        timeout = check_seconds("timeout", timeout, low=0.001)
        self._busy_timeout = busy_timeout
        self._timeout = timeout
        self._allow_shared_file = allow_shared_file
        self._sql: Statements = load_statements(self.dialect)
        self._driver: Driver
        if self.dialect == "sqlite":
            self._driver = SQLiteDriver(self._url.path, busy_timeout=busy_timeout, readers=readers)
        else:
            self._driver = PostgresDriver(
                self._url.sqlalchemy(), pool_size=pool_size, timeout=timeout, schema=schema
            )
        self._last_time = 0.0
        self._tails = conversations.Tails()
        self._plain_stores: _PlainStores | None = None

    @property
    def url(self) -> str:
        """The database URL with any password masked."""
        return self._url.shown

    @property
    def path(self) -> str | None:
        """The SQLite database file, or ``None`` for a server."""
        found = self._url.path
        return None if found is None else str(found)

    def __repr__(self) -> str:
        return f"SQLBackend({self.url!r})"

    async def _open(self) -> None:
        """Open the connections; check the schema's revision, migrating if need be.

        A SQLite file already at the head revision opens with the driver alone: its revision
        is read with the store's own connections, and neither SQLAlchemy's engine nor Alembic
        is imported. Anything else (a new file, an older or newer schema, PostgreSQL) goes
        through :func:`~asyncmem.sql.migrate.ensure_schema`.
        """
        try:
            await self._connect()
        except BaseException:
            await self._driver.close()  # nothing half open is left behind
            raise

    async def _connect(self) -> None:
        path = self._url.path
        if path is not None:
            with translate_errors("open"):
                await asyncio.to_thread(
                    prepare_sqlite_file,
                    path,
                    self._busy_timeout,
                    allow_shared_file=self._allow_shared_file,
                )
                await self._driver.open()
            if not await self._at_head():
                await self._driver.close()
                await self._migrate()
                with translate_errors("open"):
                    await self._driver.open()
        else:
            await self._migrate()
            with translate_errors("open"):
                await self._driver.open()
        with translate_errors("open"):
            if self.max_versions is not None:
                setting = self._sql.set_setting
                await self._driver.execute(
                    setting, setting.args(name="max_versions", value=self.max_versions)
                )

    async def _at_head(self) -> bool:
        """Whether the database's schema is at this code's head revision (read directly)."""
        try:
            rows = await self._driver.fetch(self._sql.revision, ())
        except Exception:
            return False
        return [row["version_num"] for row in rows] == [HEAD]

    async def _migrate(self) -> None:
        from asyncmem.sql import migrate

        async with migrate.migration_engine(
            self._url.sqlalchemy(),
            operation="open",
            busy_timeout=self._busy_timeout,
            server_timeout=self._timeout,
            schema=self.schema,
            allow_shared_file=self._allow_shared_file,
        ) as engine:
            await migrate.ensure_schema(engine, auto_migrate=self.auto_migrate, schema=self.schema)

    async def _close(self) -> None:
        await self._driver.close()

    async def _run(self, operation: str, work: Callable[[Driver], Awaitable[_T]]) -> _T:
        """Run ``work`` on the driver for ``operation``: open first if need be, and translate
        what the driver raises into asyncmem's errors."""
        await self._ready()
        with translate_errors(operation):
            return await work(self._driver)

    async def _fetch(
        self,
        operation: str,
        sql: SQL,
        args: Sequence[Any],
        *,
        write: bool = False,
        heavy: Lookup | None = None,
    ) -> list[Row]:
        """Run one statement for ``operation``; return its rows (``heavy``: see
        ``Driver.atomic``)."""
        return await self._run(
            operation, lambda driver: driver.fetch(sql, args, write=write, heavy=heavy)
        )

    async def _fetch_together(
        self, operation: str, sql: SQL, many: SQL, args: Sequence[Any], pack: Pack | None = None
    ) -> list[Row]:
        """PostgreSQL (the only dialect with ``many`` statements): ``sql`` for ``operation``,
        sharing ``many`` with concurrent calls while the pool is busy."""

        async def work(driver: Driver) -> list[Row]:
            assert isinstance(driver, PostgresDriver)
            return await driver.fetch_together(sql, many, args, pack=pack)

        return await self._run(operation, work)

    async def _atomic(
        self,
        operation: str,
        users: Collection[str],
        body: Callable[[Transaction], Coroutine[Any, Any, _T]],
        *,
        chars: int | None = None,
        heavy: Lookup | None = None,
    ) -> _T:
        """Run ``body`` as one write transaction that first takes the ``users``' locks
        (PostgreSQL: in the same round trip as ``BEGIN``); on SQLite in one trip to the writer,
        or on the event loop's thread for a small one (``chars`` and ``heavy``, see
        ``Driver.atomic``).

        ``body`` may await only its transaction's statements (see ``SQLiteDriver.atomic``).
        Either everything it wrote commits, or nothing does.
        """
        lock = self._sql.lock_user
        return await self._run(
            operation,
            lambda driver: driver.atomic(
                body, lock=lock, lock_users=users, chars=chars, heavy=heavy
            ),
        )

    def _merge_due(self, user_id: str) -> Lookup | None:
        """SQLite: finds a row when a write of ``user_id`` now could bring its recent
        postings to :data:`~asyncmem.sql.terms.MERGE_AFTER` (the write and up to
        ``CONTEXT_BEFORE + CONTEXT_AFTER`` neighbours each count one), so that the merge
        runs in the writer's thread, never on the event loop's."""
        due = self._sql.merge_due
        if due is None:
            return None
        most = MERGE_AFTER - 1 - search.CONTEXT_BEFORE - search.CONTEXT_AFTER
        return due, due.args(user_id=user_id, most=most)

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
        self, kind: str, where: tuple[Condition, ...], *, one_user: bool = True
    ) -> tuple[SQL, dict[str, Any]]:
        """The statement for a ``where`` filter's shape (compiled once) and its bound values."""
        if not where and one_user and kind != "scan":
            return getattr(self._sql, kind), {}
        from asyncmem.sql import filters
        from asyncmem.sql.statements import filtered_statement

        sql = filtered_statement(self.dialect, kind, filters.shape_of(where), one_user)
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
        facets, words, length = index_columns(key, value, clean)
        values = {
            "user_id": user_id,
            "key": key,
            "value": value,
            "metadata": metadata_text,
            "ttl": seconds,
            "session": session,
            "facets": facets,
            "words": words,
            "length": length,
        }
        now = self._now()
        row = None
        if session is None:
            # One statement for the common case; a memory that was a conversation turn is
            # left alone by it and rewritten below, with the upkeep, in one transaction.
            plain, many = self._sql.upsert_plain, self._sql.upsert_plain_many
            args = plain.args(context="", now=now, **values)
            if many is None:
                heavy = self._merge_due(user_id)
                rows = await self._fetch("store", plain, args, write=True, heavy=heavy)
            else:  # PostgreSQL: concurrent plain stores share a statement when the pool is busy
                pack = self._plain_stores
                if pack is None:
                    pack = self._plain_stores = _PlainStores(plain, many)
                rows = await self._fetch_together("store", plain, many, args, pack)
            row = rows[0] if rows else None
        elif self._sql.append_turn is not None:
            # PostgreSQL: a conversation's new last turn, the common case, in one statement.
            row = await conversations.append_turn(
                lambda sql, args: self._fetch("store", sql, args, write=True),
                self._sql,
                self._tails,
                values,
            )
        if row is None:
            row = await self._atomic(
                "store",
                [user_id],
                lambda transaction: self._store(transaction, values, now),
                chars=sum(len(text) for text in values.values() if isinstance(text, str)),
                heavy=self._merge_due(user_id),
            )
        return MemoryEntry(
            user_id,
            key,
            value,
            clean,
            row["created_at"],
            row["updated_at"],
            None,
            row["expires_at"],
        )

    async def _store(self, transaction: Transaction, values: dict[str, Any], now: float) -> Row:
        """The transaction of a ``store`` that a conversation's upkeep goes with."""
        if values["session"] is not None:
            return await conversations.store_turn(transaction, self._sql, values, now)
        upsert = self._sql.upsert
        (row,) = await transaction.fetch(upsert, upsert.args(context="", now=now, **values))
        if row["session"] is not None:
            await conversations.leave(
                transaction, self._sql, values["user_id"], row["id"], row["session"]
            )
        return row

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        check_id("user_id", user_id)
        check_id("key", key)
        sql, many = self._sql.retrieve, self._sql.retrieve_many
        args = sql.args(user_id=user_id, key=key, now=time.time())
        if many is None:
            rows = await self._run("retrieve", lambda driver: driver.lookup(sql, args))
        else:  # PostgreSQL: concurrent retrieves share a statement when the pool is busy
            rows = await self._fetch_together("retrieve", sql, many, args)
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

        The text is split into words; common function words are dropped and the rest
        stemmed and OR-ed. Two stages: the database ranks candidates by BM25 over the terms
        they share with the question, a memory's own words weighing most, its speaker and
        date words less and its neighbour turns' words least, computed from this user's
        memories only (the same SQL on both dialects, see :mod:`asyncmem.sql.terms`); then
        :func:`~asyncmem.sql.search.rerank` orders them. Other users' memories change
        neither the result nor its cost. Text with no searchable words returns ``[]``.
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
        asked = question_terms(terms)
        sql, bound = self._filter("query", conditions)
        args = sql.args(
            terms=_dumps(asked) if self.dialect == "sqlite" else asked,
            user_id=user_id,
            limit=candidate_count(limit),
            now=time.time(),
            **bound,
        )
        rows = await self._fetch("query", sql, args)
        ranked = rerank(
            terms,
            [float(row["score"]) for row in rows],
            [_ranking(row) for row in rows],
            limit,
            values=[row["value"] for row in rows],
            temporal=search.is_temporal(text),
        )
        # Entries (and their metadata decoded) only for what is returned: the other
        # candidates were read for re-ranking.
        return [_entry(rows[i], score) for i, score in ranked]

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
        return [row["key"] for row in rows]

    async def delete(self, user_id: str, key: str) -> bool:
        """Delete a memory and its versions; ``True`` if it was there and not expired.

        A conversation turn goes together with the upkeep of its neighbours' contexts, in one
        transaction: once this returns, no query finds the memory through any of them.
        """
        check_id("user_id", user_id)
        check_id("key", key)
        sql = self._sql
        now = time.time()
        plain = sql.delete_plain
        rows = await self._fetch(
            "delete", plain, plain.args(user_id=user_id, key=key, now=now), write=True
        )
        if not rows:
            args = sql.delete.args(user_id=user_id, key=key, now=now)
            rows = await self._atomic(
                "delete",
                [user_id],
                lambda transaction: self._remove(transaction, user_id, sql.delete, args),
                chars=0,
                heavy=self._merge_due(user_id),
            )
        return _live_count(rows) > 0

    async def _remove(
        self, transaction: Transaction, user_id: str, statement: SQL, args: Sequence[Any]
    ) -> list[Row]:
        """Run a ``statement`` deleting memories of ``user_id`` that returns their ``id``,
        ``session`` and expiry, and mend the conversations it cut."""
        rows = await transaction.fetch(statement, args)
        await conversations.close_gaps(
            transaction, self._sql, [(user_id, row["id"], row["session"]) for row in rows]
        )
        return rows

    async def forget_user(self, user_id: str) -> int:
        """Delete every memory and version of ``user_id``; return how many live ones there were.

        One transaction; the triggers delete the user's postings with the memories, and
        SQLite overwrites deleted content (``secure_delete``). On SQLite the WAL is then
        checkpointed and truncated, so no copy of the user's memories is left in the
        ``-wal`` file either.
        """
        check_id("user_id", user_id)
        sql = self._sql
        args = sql.forget_user.args(user_id=user_id, now=time.time())

        async def forget(transaction: Transaction) -> list[Row]:
            return await transaction.fetch(sql.forget_user, args)

        rows = await self._atomic("forget_user", [user_id], forget)
        driver = self._driver
        if isinstance(driver, SQLiteDriver):
            await self._run("forget_user", lambda _: driver.checkpoint())
        return _live_count(rows)

    async def compact(self) -> None:
        """Leave no trace of deleted memories in the database's files (SQLite).

        A delete already overwrites the memory and its postings in the database file
        (``secure_delete``); this checkpoints and truncates the WAL, which still holds the
        pages as they were before. On PostgreSQL it does nothing (``VACUUM`` is the
        operator's).
        """
        driver = self._driver
        if not isinstance(driver, SQLiteDriver):
            await self._ready()
            return
        await self._run("compact", lambda _: driver.checkpoint())

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
            after = rows[-1]["id"]

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
        sql = self._sql
        chunks = _batch_chunks(checked)
        now = self._now()
        sessions = {item.key: session_of(item.metadata) for item in checked}

        async def write(transaction: Transaction) -> list[Row]:
            stored: list[Row] = []
            for chunk in chunks:
                args = sql.upsert_many.args(user_id=user_id, items=chunk, now=now)
                stored.extend(await transaction.fetch(sql.upsert_many, args))
            changes = [(user_id, r["id"], r["session"], sessions[r["key"]]) for r in stored]
            await conversations.settle(transaction, sql, changes)
            return stored

        stored = await self._atomic("store_many", [user_id], write)
        times = {row["key"]: row for row in stored}
        return [
            MemoryEntry(
                user_id,
                item.key,
                item.value,
                item.metadata,
                times[item.key]["created_at"],
                times[item.key]["updated_at"],
                None,
                times[item.key]["expires_at"],
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
        rows = await self._atomic(
            "delete_many",
            [user_id],
            lambda transaction: self._remove(transaction, user_id, sql, args),
        )
        return _live_count(rows)

    async def purge_expired(self) -> int:
        """Delete expired memories (and expired versions); return how many memories went.

        Not needed for correctness (reads already hide them); it reclaims space, and takes
        purged turns out of their neighbours' contexts, in the same transaction.
        """
        sql = self._sql

        async def purge(transaction: Transaction) -> int:
            (clock,) = await transaction.fetch(sql.clock, sql.clock.args(now=time.time()))
            cutoff = clock["now"]
            users = await transaction.fetch(
                sql.expired_turn_users, sql.expired_turn_users.args(cutoff=cutoff)
            )
            await conversations.lock_users(transaction, sql, [row["user_id"] for row in users])
            plain = await transaction.fetch(
                sql.purge_expired, sql.purge_expired.args(cutoff=cutoff)
            )
            turns = await transaction.fetch(
                sql.purge_expired_turns, sql.purge_expired_turns.args(cutoff=cutoff)
            )
            await conversations.close_gaps(
                transaction, sql, [(row["user_id"], row["id"], row["session"]) for row in turns]
            )
            versions = sql.purge_expired_versions
            await transaction.fetch(versions, versions.args(cutoff=cutoff))
            return len(plain) + len(turns)

        return await self._atomic("purge_expired", (), purge)

    async def import_entries(self, entries: Iterable[MemoryEntry]) -> int:
        """Upsert ``entries`` with their own timestamps and expiry, all or nothing.

        For restoring an export: unlike :meth:`store`, the timestamps are taken from the
        entries, so an export imported into an empty store reproduces it exactly, and
        importing the same entries twice changes nothing. Every entry is validated before
        anything is written, and one statement writes them all, so a call either writes
        every entry or none. At most :data:`MAX_IMPORT_BATCH` distinct memories a call; a
        key given twice keeps its last entry. Returns the number of memories written.
        """
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for entry in entries:
            user_id = check_id("user_id", entry.user_id)
            key = check_id("key", entry.key)
            clean, metadata_text = metadata_json(entry.metadata)
            fields = (
                user_id,
                key,
                check_value(entry.value),
                metadata_text,
                check_timestamp("created_at", entry.created_at),
                check_timestamp("updated_at", entry.updated_at),
                None
                if entry.expires_at is None
                else check_timestamp("expires_at", entry.expires_at),
                session_of(clean),
                *index_columns(key, entry.value, clean),
            )
            rows[(user_id, key)] = dict(zip(IMPORT_FIELDS, fields, strict=True))
        if len(rows) > MAX_IMPORT_BATCH:
            raise InvalidInputError(f"import at most {MAX_IMPORT_BATCH} memories a call")
        if not rows:
            await self._ready()
            return 0
        from asyncmem.sql.statements import import_statement

        sql = import_statement(self.dialect, len(rows))
        named = {
            f"{field}_{n}": value
            for n, row in enumerate(rows.values())
            for field, value in row.items()
        }
        sessions = {user_and_key: row["session"] for user_and_key, row in rows.items()}

        async def write(transaction: Transaction) -> None:
            written = await transaction.fetch(sql, sql.args(**named))
            changes = [
                (r["user_id"], r["id"], r["session"], sessions[r["user_id"], r["key"]])
                for r in written
            ]
            await conversations.settle(transaction, self._sql, changes)

        await self._atomic("import_entries", {user_id for user_id, _ in rows}, write)
        return len(rows)


MAX_IMPORT_BATCH = 1000
"""Most memories one :meth:`SQLBackend.import_entries` call takes (one statement's worth)."""
