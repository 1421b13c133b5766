"""The two driver bridges of the SQL store: each call one round trip to the database.

:class:`SQLiteDriver` keeps one aiosqlite writer connection and a few reader connections
(WAL lets them read while the writer writes); :class:`PostgresDriver` an asyncpg pool. Both
run SQL compiled by :mod:`asyncmem.sql.statements`, and :func:`translate_errors` maps what
they raise to asyncmem's errors, once, at this boundary.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import os
import random
import sqlite3
import sys
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterator,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import aiosqlite

from asyncmem.errors import (
    AsyncmemError,
    BackendClosedError,
    BackendError,
    BackendUnavailableError,
    InvalidInputError,
    SchemaError,
)
from asyncmem.sql.compiled import SQL

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = [
    "Driver",
    "FaultHook",
    "Lookup",
    "PostgresDriver",
    "Row",
    "SQLiteDriver",
    "Transaction",
    "dollar_quoted",
    "translate_errors",
    "translated",
]

_PG_REASONS: dict[str, tuple[str, type[AsyncmemError]]] = {
    "08": ("cannot connect to the database server", BackendUnavailableError),
    "28": ("the database server refused the credentials", BackendUnavailableError),
    "3D": ("the database does not exist", BackendUnavailableError),
    "53": ("the database server is out of resources", BackendUnavailableError),
    "57014": ("the statement timed out", BackendUnavailableError),
    "57": ("the database server is shutting down or restarting", BackendUnavailableError),
    "42P01": ("the database schema is missing or outdated", SchemaError),
    "42703": ("the database schema is missing or outdated", SchemaError),
    "3F": ("the database schema is missing or outdated", SchemaError),
    "25006": ("the database is read-only", BackendError),
    "54000": ("a value is beyond a PostgreSQL size limit", InvalidInputError),
}
_SQLITE_REASONS: dict[str, tuple[str, type[AsyncmemError]]] = {
    "SQLITE_BUSY": ("timed out waiting for the database lock", BackendUnavailableError),
    "SQLITE_LOCKED": ("the database table is locked", BackendUnavailableError),
    "SQLITE_CANTOPEN": ("cannot open the database file", BackendUnavailableError),
    "SQLITE_IOERR": ("the database file cannot be read or written", BackendUnavailableError),
    "SQLITE_PROTOCOL": ("the database lock protocol failed", BackendUnavailableError),
    "SQLITE_READONLY": ("the database is read-only", BackendError),
    "SQLITE_FULL": ("the disk is full", BackendError),
    "SQLITE_CORRUPT": ("the database file is corrupt", BackendError),
    "SQLITE_NOTADB": ("the file is not a SQLite database", BackendError),
}
_SCHEMA_PROBLEM = "the database schema is missing or outdated"
_PRAGMAS = (
    "PRAGMA synchronous = NORMAL;"
    "PRAGMA foreign_keys = ON;"
    # Freed pages are zeroed, so a deleted value leaves no copy in the file (some builds
    # default to off).
    "PRAGMA secure_delete = ON;"
)
"""Every connection's settings, the writer's, the readers' and the loop's."""
_T = TypeVar("_T")
Lookup = tuple[SQL, Sequence[Any]]
"""A statement and its arguments."""
_Waiting = tuple[Sequence[Any], "asyncio.Future[list[Row]]"]
"""A call waiting in ``PostgresDriver.fetch_together``: its arguments, and its answer."""


class Pack(Protocol):
    """How ``fetch_together`` joins calls into one ``many`` statement, and answers each."""

    def args(self, calls: Sequence[Sequence[Any]]) -> Sequence[Any]:
        """The ``many`` statement's arguments for the calls' own arguments."""
        ...

    def answers(self, calls: Sequence[Sequence[Any]], rows: Sequence[Any]) -> list[list[Any]]:
        """Each call's rows, in the calls' order, from the ``many`` statement's rows."""
        ...


class _Columns:
    """The default :class:`Pack`: for each parameter an array of the calls' values; each
    row numbered by its call (column ``n``, from 1)."""

    @staticmethod
    def args(calls: Sequence[Sequence[Any]]) -> Sequence[Any]:
        return [list(values) for values in zip(*calls, strict=True)]

    @staticmethod
    def answers(calls: Sequence[Sequence[Any]], rows: Sequence[Any]) -> list[list[Any]]:
        found: list[list[Any]] = [[] for _ in calls]
        for row in rows:
            found[row["n"] - 1].append(row)
        return found


class _NoCalls(Exception):
    """A group of ``fetch_together`` calls whose every caller gave up before it ran."""


_DEADLOCK = "40P01"
"""PostgreSQL's SQLSTATE for a statement aborted to break a deadlock."""


def _sqlstate(error: BaseException | None) -> str:
    while error is not None:
        state = getattr(error, "sqlstate", None)
        if isinstance(state, str):
            return state
        error = error.__cause__
    return ""


def _classify(error: BaseException) -> tuple[str, type[AsyncmemError]] | None:
    """A message free of SQL and values, and the error class it calls for."""
    # SQLAlchemy's errors (from migrations) are checked only if SQLAlchemy is loaded at all.
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(error, sa_exc.DBAPIError) and error.orig is not None:
        return _classify(error.orig) or ("database error", BackendError)
    if isinstance(error, sqlite3.Error):
        name = getattr(error, "sqlite_errorname", "SQLITE_ERROR")
        if str(error).startswith(("no such table", "no such column")):
            return _SCHEMA_PROBLEM, SchemaError
        family = "_".join(name.split("_", 2)[:2])
        return _SQLITE_REASONS.get(family, (f"SQLite error {name}", BackendError))
    state = _sqlstate(error)
    if state:
        for prefix in (state, state[:2]):
            if prefix in _PG_REASONS:
                reason, kind = _PG_REASONS[prefix]
                return f"{reason} (SQLSTATE {state})", kind
        return f"database error (SQLSTATE {state})", BackendError
    if isinstance(error, OSError | ConnectionError | TimeoutError):
        return f"cannot reach the database ({type(error).__name__})", BackendUnavailableError
    module = type(error).__module__
    if module.startswith("asyncpg"):
        # InterfaceError and friends: the connection is closed or was lost.
        return f"the database connection failed ({type(error).__name__})", BackendUnavailableError
    if sa_exc is not None and isinstance(error, sa_exc.SQLAlchemyError):
        return f"database error ({type(error).__name__})", BackendError
    return None


def translated(operation: str, error: Exception) -> AsyncmemError | None:
    """asyncmem's error for a driver or SQLAlchemy ``error``, or ``None`` if it is not one.

    The message names the operation and the kind of failure, never SQL, values or secrets.
    """
    if isinstance(error, AsyncmemError):
        return error
    found = _classify(error)
    if found is None:
        return None
    reason, kind = found
    return kind(f"{operation} failed: {reason}")


class translate_errors:
    """``with translate_errors(operation):`` raises :func:`translated` errors, chained to
    the original.

    A class, not a ``@contextmanager`` generator: it runs around every call, and entering
    and leaving a generator-based one cost ~1.5 µs of a 50 µs retrieve.
    """

    __slots__ = ("_operation",)

    def __init__(self, operation: str) -> None:
        self._operation = operation

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not isinstance(exc, Exception):
            return
        error = translated(self._operation, exc)
        if error is None or error is exc:
            return
        raise error from exc


class _HideCallArguments(logging.Filter):
    """aiosqlite logs every call it runs on its thread at DEBUG as a ``functools.partial``,
    arguments included, so an application with its root logger at DEBUG would log every
    stored value. Keep the record, name the function, drop its arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                f"{getattr(arg.func, '__qualname__', 'call')}(...)"
                if isinstance(arg, functools.partial)
                else arg
                for arg in record.args
            )
        return True


_HIDE_CALL_ARGUMENTS = _HideCallArguments()


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _locate(path: Path) -> tuple[str, tuple[int, int] | None]:
    where = os.path.abspath(path)
    return where, _file_identity(where)


class Row(Protocol):
    """A result row, read by the column names its statement declares (``SQL.columns``):
    ``sqlite3.Row`` on SQLite, ``asyncpg.Record`` on PostgreSQL."""

    def __getitem__(self, name: str, /) -> Any: ...


FaultHook = Callable[[SQL], None]
"""Called before every statement a driver runs; what it raises fails that statement.

For fault-injection tests: interrupting a write at each statement boundary shows that a call
that raised changed nothing. ``None`` (the default) costs one attribute check a statement.
"""


class Transaction(Protocol):
    """Statements run inside one transaction of :meth:`Driver.transaction`."""

    async def executemany(self, sql: SQL, rows: Sequence[Sequence[Any]]) -> None: ...

    async def fetch(self, sql: SQL, args: Sequence[Any]) -> list[Row]: ...


class Driver(Protocol):
    fault_hook: FaultHook | None

    async def open(self) -> None: ...

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """Run several statements as one transaction: all commit, or none does."""
        ...

    async def atomic(
        self,
        body: Callable[[Transaction], Coroutine[Any, Any, _T]],
        *,
        lock: SQL | None = None,
        lock_users: Collection[str] = (),
        chars: int | None = None,
        heavy: Lookup | None = None,
    ) -> _T:
        """Run ``body`` as one transaction, like :meth:`transaction`, and return its result.

        ``body`` may await nothing but its transaction's statements (on SQLite it runs to
        the end in the writer's thread). With ``lock`` (a statement of one ``user_id``
        parameter that takes a transaction-scoped lock, ``Statements.lock_user``), it is
        run first for each of ``lock_users``, in sorted order; on PostgreSQL in the same
        round trip as ``BEGIN``. SQLite serialises writers already and ignores both.
        ``chars``: the characters of text ``body`` writes, when it is a small transaction
        of a few rows (a conversation turn's store or delete) that SQLite may run on the
        event loop's thread when it comes alone; None, never. ``heavy`` (SQLite): a statement
        that finds a row when this write's upkeep would be heavy at the moment (a user's
        postings due to be merged), so that it runs in the writer's thread instead.
        """
        ...

    async def close(self) -> None: ...

    async def fetch(
        self,
        sql: SQL,
        args: Sequence[Any],
        *,
        write: bool = False,
        heavy: Lookup | None = None,
    ) -> list[Row]:
        """Run one statement; return its rows."""
        ...

    async def lookup(self, sql: SQL, args: Sequence[Any]) -> list[Row]:
        """Run one reading statement that finds at most one row by a unique index."""
        ...

    async def execute(self, sql: SQL, args: Sequence[Any]) -> int:
        """Run one writing statement; return how many rows it changed."""
        ...


class SQLiteDriver:
    """One writer and ``readers`` reader connections to one SQLite file.

    Calls are answered in batches (:class:`_Batcher`): the writes waiting for the writer run
    in one trip to its thread, each in a transaction of its own (:func:`_run_batch`), so a
    write holds the file's write lock for its own statements only and other processes wait
    up to ``busy_timeout`` for it; the reads waiting for a reader run in one trip too.
    Writers of this process never contend for the lock among themselves; for other
    processes' lock the writer's thread waits itself (:func:`_when_free`), not in
    SQLite's busy handler.
    :meth:`transaction` (the path when aiosqlite's private API is missing) holds the writer
    from ``BEGIN IMMEDIATE`` to ``COMMIT``, so no other write of this process lands inside it.
    A lookup by key (:meth:`lookup`) or a small write (a plain store or delete, a
    conversation turn's) that comes alone, while no batch is at work, runs on the event
    loop's own thread instead, on a connection of its own (:func:`_loop_connection`).
    """

    def __init__(self, path: Path | None, *, busy_timeout: float, readers: int) -> None:
        self._path = path
        self._busy_ms = max(0, int(busy_timeout * 1000))
        self._reader_count = max(1, readers) if path is not None else 0
        self._writer: aiosqlite.Connection | None = None
        self._readers: list[aiosqlite.Connection] = []
        self._next_reader: Iterator[aiosqlite.Connection] = iter(())
        self._file: tuple[str, tuple[int, int] | None] | None = None
        self._write_lock = asyncio.Lock()
        self._lock_wait: float | None = None
        self.fault_hook: FaultHook | None = None
        self._write_batcher: _Batcher | None = None
        self._read_batchers: list[_Batcher] = []
        self._next_batcher: Iterator[_Batcher] = iter(())
        self._loop: sqlite3.Connection | None = None
        self._loop_writes = 0
        self._arriving = 0
        self._together = False

    async def _connect(self) -> aiosqlite.Connection:
        target = ":memory:" if self._path is None else self._path
        connection = await aiosqlite.connect(target, isolation_level=None)
        connection.row_factory = sqlite3.Row
        try:
            await connection.executescript(
                f"PRAGMA busy_timeout = {self._busy_ms};PRAGMA journal_mode = WAL;{_PRAGMAS}"
            )
        except BaseException:
            await connection.close()
            raise
        return connection

    async def open(self) -> None:
        logging.getLogger("aiosqlite").addFilter(_HIDE_CALL_ARGUMENTS)
        self._writer = await self._connect()
        self._readers = [await self._connect() for _ in range(self._reader_count)]
        self._next_reader = itertools.cycle(self._readers or [self._writer])
        if self._path is not None:
            self._file = await asyncio.to_thread(_locate, self._path)
        inline = _inline_runner(self._writer)
        if inline is not None:
            await self._wait_for_locks_here(self._writer)
            self._write_batcher = _Batcher(*inline, self, transactional=True)
            self._read_batchers = []
            for reader in self._readers:
                found = _inline_runner(reader)
                if found is not None:
                    self._read_batchers.append(_Batcher(*found, self, transactional=False))
            self._next_batcher = itertools.cycle(self._read_batchers)
            if self._path is not None and self._read_batchers:
                await self._open_loop(self._read_batchers[0]._run, self._path)

    async def _open_loop(self, run: Callable[..., Awaitable[Any]], path: Path) -> None:
        """Open the loop's connection (:func:`_loop_connection`) in a reader's thread
        (``run``, from :func:`_inline_runner`); one that an opening cancelled meanwhile
        leaves unclaimed is closed when it is ready."""
        opening = asyncio.ensure_future(run(_loop_connection, path, self._busy_ms / 1000))
        try:
            self._loop = await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(_close_unclaimed)
            raise

    async def _wait_for_locks_here(self, writer: aiosqlite.Connection) -> None:
        """Turn the writer's busy handler off: it waits for the write lock in
        :func:`_when_free` instead, up to ``busy_timeout`` as before.

        SQLite's handler sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, then 100 ms at a
        time, so a writer that lost a few times slept on long after the lock was free and
        lost again to newcomers still on short sleeps: with 16 processes × 8 tasks on one
        file, the writes' wait for the lock was p50 5 ms, p90 106 ms, p99 562 ms, max 2.0 s
        (their hold of it p50 1.3 ms, p99 47 ms). Only in WAL mode, where the writer holding
        the lock needs no other: a rollback journal's commit waits for readers too, and
        there SQLite's handler stays.
        """
        rows = await writer.execute_fetchall("PRAGMA journal_mode")
        if self._path is None or [str(row[0]).lower() for row in rows] != ["wal"]:
            return
        await writer.execute("PRAGMA busy_timeout = 0")
        self._lock_wait = self._busy_ms / 1000

    def _check_file(self) -> None:
        """Refuse to go on when the file was deleted or replaced while open.

        SQLite keeps using the file it opened through its descriptors, so without this check
        writes would be acknowledged into a file that nobody can open again, and reads would
        serve memories that no longer exist. One ``stat`` per call.
        """
        if self._file is not None and _file_identity(self._file[0]) != self._file[1]:
            raise BackendUnavailableError(
                "the database file was deleted or replaced while open; open the store again"
            )

    @property
    def writer(self) -> aiosqlite.Connection:
        if self._writer is None:
            raise BackendError("the SQLite connection is not open")
        return self._writer

    async def close(self) -> None:
        """Close the readers, then the writer alone.

        The last connection to a WAL database checkpoints it into the main file and deletes
        the ``-wal`` file; connections closing at once can each see the other still open and
        leave the WAL behind (9 of 200 closes did), so the file is not whole on its own.
        """
        writer, readers, loop = self._writer, self._readers, self._loop
        self._writer, self._readers, self._loop = None, [], None
        if loop is not None:
            # First, while the others are open: the last connection to close checkpoints.
            with contextlib.suppress(Exception):
                loop.close()
        closed = BackendClosedError("the SQL store was closed before this call ran")
        for batcher in [*self._read_batchers, self._write_batcher]:
            if batcher is not None:
                batcher.fail_pending(closed)
        self._write_batcher, self._read_batchers = None, []
        await asyncio.gather(*(c.close() for c in readers), return_exceptions=True)
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.close()

    def _before(self, sql: SQL) -> None:
        self._check_file()
        if self.fault_hook is not None:
            self.fault_hook(sql)

    async def fetch(
        self,
        sql: SQL,
        args: Sequence[Any],
        *,
        write: bool = False,
        heavy: Lookup | None = None,
    ) -> list[Row]:
        if write:
            if self._write_batcher is None:
                return await self.atomic(lambda transaction: transaction.fetch(sql, args))
            statement = _Statement(sql, args)
            ran, rows = await self._write_on_loop(statement, _chars(args), heavy)
            if not ran:
                rows = await self._write_batcher.submit(statement)
            return cast(list[Row], rows)
        if self._read_batchers:
            found: list[Row] = await next(self._next_batcher).submit(_Statement(sql, args))
            return found
        self._before(sql)
        return list(await next(self._next_reader).execute_fetchall(sql.text, args))

    async def lookup(self, sql: SQL, args: Sequence[Any]) -> list[Row]:
        """Find one row by a unique index: on the event loop's own thread if the lookup came
        alone (see :meth:`_alone`), else in the readers' next batch. So does a lone lookup
        that SQLite would make wait.

        Under many tasks a batch is cheaper for the loop than a lookup of its own (one trip
        to a thread for all, the SQL off the loop), and the loop stays free to start the
        writer's next batch.
        """
        connection = self._loop
        if connection is not None and not self._batching() and await self._alone():
            ran, rows = self._on_loop(connection, _Statement(sql, args), transactional=False)
            if ran:
                return cast(list[Row], rows)
        return await self.fetch(sql, args)

    async def _write_on_loop(self, job: Job, chars: int, heavy: Lookup | None) -> tuple[bool, Any]:
        """Run a lone write (a statement in autocommit, or a small transaction) on the event
        loop's own thread if it came alone (see :meth:`_alone`): ``(True, its result)``, or
        ``(False, None)`` when it must go to the writer instead.

        It goes to the writer when its text is over :data:`_LOOP_WRITE_CHARS`, when ``heavy``
        finds a row (its triggers would do a lot at this moment), when another
        connection holds the write lock (SQLite refuses it before it changes anything,
        and the writer's thread waits for the lock), and once in
        :data:`_LOOP_WRITES_PER_CHECKPOINT`: the loop's connection never checkpoints, so
        that no ``fsync`` runs on the loop, and the writer's commit runs SQLite's automatic
        checkpoint when the WAL has grown.
        """
        connection = self._loop
        if connection is None or self._lock_wait is None or self._batching():
            return False, None
        if self._write_lock.locked() or chars > _LOOP_WRITE_CHARS:
            return False, None
        if self._loop_writes >= _LOOP_WRITES_PER_CHECKPOINT:
            self._loop_writes = 0
            return False, None
        if not await self._alone() or self._write_lock.locked():
            return False, None
        ran, result = self._on_loop(connection, job, transactional=True, heavy=heavy)
        if ran:
            self._loop_writes += 1
        return ran, result

    def _on_loop(
        self,
        connection: sqlite3.Connection,
        job: Job,
        *,
        transactional: bool,
        heavy: Lookup | None = None,
    ) -> tuple[bool, Any]:
        """Run one call on the loop's connection, as a batch of one (:func:`_run_batch`):
        ``(True, its result)``, or ``(False, None)`` when ``heavy`` finds a row or SQLite
        refuses the call with ``SQLITE_BUSY`` (before it changed anything), so that it goes
        to a thread instead. Any other error is the call's."""
        try:
            if heavy is not None and connection.execute(heavy[0].text, heavy[1]).fetchall():
                return False, None
            ((_, result),) = _run_batch(
                connection, [job], self.fault_hook, transactional, self._check_file
            )
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or connection.in_transaction:
                raise
            return False, None
        return True, result

    async def _alone(self) -> bool:
        """Let the other tasks run first, then tell whether this call came alone while no
        batch is running or waiting, and so may run on the event loop's own thread.

        Calls made at the same moment (``asyncio.gather``, many tasks) arrive during the
        yield and all go to batches, as do calls while a batch is at work.
        """
        self._arriving += 1
        try:
            await asyncio.sleep(0)
        finally:
            self._arriving -= 1
            together = self._together = self._together or self._arriving > 0
            if not self._arriving:
                self._together = False
        if self._loop is None:
            raise BackendClosedError("the SQL store was closed before this call ran")
        return not together and not self._batching()

    def _batching(self) -> bool:
        """Whether a batch of this store's calls is running or waiting for one."""
        writer = self._write_batcher
        return (writer is not None and writer.active) or any(
            batcher.active for batcher in self._read_batchers
        )

    async def execute(self, sql: SQL, args: Sequence[Any]) -> int:
        self._before(sql)
        async with self._write_lock:
            inline = _inline_runner(self.writer)
            if self._lock_wait is None or inline is None:
                cursor = await self.writer.execute(sql.text, args)
                return int(cursor.rowcount)
            run, connection = inline

            def attempt() -> int:
                return int(connection.execute(sql.text, args).rowcount)

            rowcount: int = await run(_when_free, connection, attempt, self._lock_wait)
            return rowcount

    async def checkpoint(self) -> None:
        """Copy the WAL into the database file and truncate it to nothing, if no reader is
        in the way (best effort: a busy checkpoint leaves the WAL as it was), waiting up to
        ``busy_timeout`` for writers and readers in SQLite's busy handler."""
        async with self._write_lock:
            writer = self.writer
            if self._lock_wait is None:
                await writer.execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)")
                return
            await writer.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            try:
                await writer.execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                await writer.execute("PRAGMA busy_timeout = 0")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        self._check_file()
        async with self._write_lock:
            writer = self.writer
            await writer.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteTransaction(writer, self)
            except BaseException:
                await writer.execute("ROLLBACK")
                raise
            await writer.execute("COMMIT")

    async def atomic(
        self,
        body: Callable[[Transaction], Coroutine[Any, Any, _T]],
        *,
        lock: SQL | None = None,
        lock_users: Collection[str] = (),
        chars: int | None = None,
        heavy: Lookup | None = None,
    ) -> _T:
        """Run ``body`` as one transaction in one trip to the writer's thread (``lock`` and
        ``lock_users`` are for PostgreSQL: one writer at a time is SQLite's own rule), or
        on the event loop's thread when it is small (``chars``) and came alone.

        Through :meth:`transaction` every statement is a trip of its own (queue, thread,
        wake the event loop), ``BEGIN`` and ``COMMIT`` included: for a conversation turn's
        store (begin, read the conversation's tail, upsert, update the neighbours, commit)
        that was most of the gap to a plain store. Here ``body`` runs in the writer's
        thread, its statements executed at once by :class:`_InlineTransaction`, so its
        coroutine never suspends; one that awaits anything else is rolled back and refused.
        It runs in the write batch of :class:`_Batcher` (a transaction of its own), with
        the other writes waiting at that moment.
        """
        if self._write_batcher is None:
            async with self.transaction() as transaction:
                return await body(transaction)
        if chars is not None:
            ran, result = await self._write_on_loop(body, chars, heavy)
            if ran:
                return cast(_T, result)
        done: _T = await self._write_batcher.submit(body)
        return done


def _loop_connection(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """The connection of the calls that run on the event loop's own thread: lone lookups
    (:meth:`SQLiteDriver.lookup`) and lone small writes (:meth:`SQLiteDriver._write_on_loop`).

    A lookup by a unique index reads a few cached pages in ~15 µs, and a trip to a worker
    thread costs more than that, on the event loop's thread too; a small write's statement
    costs the loop more than the trip, but the caller less. 3 × 5,000 calls in a row
    (``benchmarks/lone_calls.py``, tmpfs, 2 cores), p50 and the loop thread's CPU a call,
    here / through a thread / a hand-written aiosqlite store:

    - retrieve: 0.036 / 0.083 / 0.066 ms; 45 / 51 / 45 µs;
    - store (a sentence): 0.193 / 0.234 / 0.191 ms; 192 / 115 / 64 µs;
    - delete: 0.140 / 0.214 / 0.139 ms; 148 / 81 / 46 µs.

    A lone call has no other call of this store to hold up, and one that comes with others
    goes to a thread (:meth:`SQLiteDriver._alone`). Writes on the loop stay small: their
    text (:data:`_LOOP_WRITE_CHARS`), and their triggers' work: the write that may move a
    user's latest postings into ``search_terms`` (every
    :data:`~asyncmem.sql.terms.MERGE_AFTER` writes, up to 20 ms for writes of 4,000
    characters) is asked about first (``heavy``) and goes to the writer's thread.

    SQLite's busy handler is off once it is open: a call that would have to wait for a lock
    is handed to a thread instead, so this one never sleeps; and it never checkpoints
    (``wal_autocheckpoint = 0``), so it never waits for an ``fsync`` either (with
    ``synchronous = NORMAL`` a commit in WAL mode does not sync). A file on slow storage
    whose pages are not cached still blocks the loop for its reads.
    """
    connection = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        connection.row_factory = sqlite3.Row
        connection.executescript(f"{_PRAGMAS}PRAGMA wal_autocheckpoint = 0;")
        # The schema is read here, in the thread that opens, not by the first call (~1 ms),
        # waiting for a store that is opening the same new file.
        connection.execute("SELECT 1 FROM sqlite_master LIMIT 0").fetchall()
        connection.execute("PRAGMA busy_timeout = 0")
    except BaseException:
        connection.close()
        raise
    return connection


def _chars(args: Sequence[Any]) -> int:
    return sum(len(arg) for arg in args if isinstance(arg, str))


_LOOP_WRITE_CHARS = 16_384
"""Most characters of text a write statement's arguments may hold to run on the loop.

A store of 16,000 characters: its statement p50 0.64 ms, p99 1.1 ms on the loop; the store's
own Python (splitting and stemming the words) already took the loop 1.2 ms. At 64,000
characters the statement is 2.2 ms p50. (A probe timing the statement alone; stores of 4,000
characters, ``benchmarks/lone_calls.py --calls 1000 --chars 4000``: p50 0.667 ms here
against 0.782 ms through the writer's thread, the loop's CPU 653 against 433 µs a call.)"""

_LOOP_WRITES_PER_CHECKPOINT = 32
"""Lone writes on the loop's connection between two that go through the writer's, whose
commit runs SQLite's automatic checkpoint once the WAL holds 1,000 pages."""


def _close_unclaimed(opening: asyncio.Future[sqlite3.Connection]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


def _inline_runner(
    writer: aiosqlite.Connection,
) -> tuple[Callable[..., Awaitable[Any]], sqlite3.Connection] | None:
    """aiosqlite's way to run a function on its thread, and its sqlite3 connection, or None.

    aiosqlite has no public API for this; a release without these private names makes
    :meth:`SQLiteDriver.atomic` fall back to a trip per statement, not fail.
    """
    run = getattr(writer, "_execute", None)
    connection = getattr(writer, "_connection", None)
    if not callable(run) or not isinstance(connection, sqlite3.Connection):
        return None
    return run, connection


def _run_body(
    body: Callable[[Transaction], Coroutine[Any, Any, _T]], transaction: Transaction
) -> _T:
    """Run ``body`` to its end at once: it may await only ``transaction``'s statements, which
    execute synchronously in this thread, so its coroutine never suspends."""
    step = body(transaction)
    try:
        step.send(None)
    except StopIteration as done:
        result: _T = done.value
        return result
    step.close()
    raise RuntimeError("an inline transaction awaited something else than SQL")


class _Statement:
    """A call that is one statement: run as it is, with no coroutine around it; a write runs
    in autocommit (its own transaction, see :func:`_run_batch`)."""

    __slots__ = ("args", "sql")

    def __init__(self, sql: SQL, args: Sequence[Any]) -> None:
        self.sql = sql
        self.args = args


Job = Callable[[Transaction], Coroutine[Any, Any, Any]] | _Statement
"""One call of a batch: a transaction body, or a lone statement."""


def _run_job(job: Job, transaction: _InlineTransaction) -> Any:
    if type(job) is _Statement:
        return transaction.fetch_now(job.sql, job.args)
    assert not isinstance(job, _Statement)
    return _run_body(job, transaction)


Outcome = tuple[bool, Any]
"""A batched call's result: ``(True, value)``, or ``(False, the exception it raised)``."""


_LOCK_RETRY_FIRST = 0.0005
"""Seconds of the first sleep of a writer that found the write lock taken (doubling up to
:data:`_LOCK_RETRY_MOST`); each sleep is drawn between half of it and all of it, so
writers that lost together do not come back together."""

_LOCK_RETRY_MOST = 0.016
"""Seconds of the longest sleep between two tries for the write lock.

A refused ``BEGIN IMMEDIATE`` costs ~2.5 µs of CPU, the sleep around it more (~160 µs a 4 ms
sleep on the 2-core benchmark machine, 40-800 µs from run to run). 16 processes × 8 tasks on
one file, 60 s (``concurrency.py --parts mp``): SQLite's own handler (up to 100 ms a sleep)
gave p99 447-504 ms, store p99 ~1 s, max 1.9-3.2 s; a 4 ms cap 235-409 ms, max 0.8-1.2 s,
a process waiting 3 s behind a held lock using ~7% of a core; this cap (fewer tries,
not counted) 248 ms, store p99 377 ms, max 0.8 s, in one run. The price of noticing a free lock
sooner: the losers no longer sleep while a few processes take turns, so p50 rose from 4.5 to
8.7-9.5 ms and ops/s from 0.75× the floor's to 0.60-0.62× (no errors in any run).
"""


def _busy(error: sqlite3.Error) -> bool:
    """Whether ``error`` is SQLite refusing a lock another connection holds."""
    return getattr(error, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY


def _when_free(connection: sqlite3.Connection, attempt: Callable[[], _T], wait: float | None) -> _T:
    """``attempt()`` (``BEGIN IMMEDIATE``, or a lone statement in autocommit), tried again
    while another connection holds the write lock, until ``wait`` seconds have passed.

    SQLite refuses such an attempt with ``SQLITE_BUSY`` before it changes anything, and an
    autocommit statement that fails is rolled back whole, so trying again is safe while no
    transaction is left open; after ``wait`` the last ``SQLITE_BUSY`` is raised, as SQLite's
    busy handler would. Sleeps start at :data:`_LOCK_RETRY_FIRST` and double up to
    :data:`_LOCK_RETRY_MOST`, jittered. ``wait=None``: one attempt (SQLite's handler waits).
    """
    if wait is None:
        return attempt()
    deadline = time.monotonic() + wait
    sleep = _LOCK_RETRY_FIRST
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            left = deadline - time.monotonic()
            if not _busy(exc) or connection.in_transaction or left <= 0:
                raise
        time.sleep(min(left, random.uniform(sleep / 2, sleep)))
        sleep = min(2 * sleep, _LOCK_RETRY_MOST)


def _run_batch(
    connection: sqlite3.Connection,
    bodies: Sequence[Job],
    fault_hook: FaultHook | None,
    transactional: bool,
    check: Callable[[], None] = lambda: None,
    lock_wait: float | None = None,
) -> list[Outcome]:
    """In a connection's thread: run every body of a batch, each with its own outcome.

    Writes (``transactional``) each commit on their own: a lone statement
    (:class:`_Statement`) in autocommit, a transaction body in ``BEGIN IMMEDIATE`` …
    ``COMMIT``, rolled back whole if it raises. A write that fails reports its own error
    and the next one goes on. Reads run one after the other, outside any transaction.
    ``check`` runs first (the file's identity, see :meth:`SQLiteDriver._check_file`): here,
    once per batch, and off the event loop, where a ``stat`` that gives up the GIL to busy
    threads cost ~90 µs.

    The batch shares one trip to the thread, not one transaction. A transaction spanning
    the batch holds the file's write lock from its ``BEGIN`` to its ``COMMIT``, across every
    statement and savepoint between, each a release and a retake of the GIL, and on a busy
    machine each retake can wait for the scheduler: with 16 processes × 8 tasks on one file
    on 2 cores (``benchmarks/concurrency.py --parts mp --store-text fresh``), such a batch
    of 3 writes on average held the lock p50 17–22 ms, and calls' p99 read 331 ms; with a
    transaction per write, 135 ms. One process's 64 tasks measured the same within noise
    (ops/s 1.18× and 1.07× the floor's, stores repeating and changing text, against 0.99×
    and 1.13× with a transaction per batch; the median of three runs each). A lone
    statement is its own transaction, all or nothing, and SQLite takes the write lock when
    it starts, so it waits for the lock as ``BEGIN IMMEDIATE`` does; both wait up to
    ``lock_wait`` seconds in :func:`_when_free` (``None``: in SQLite's busy handler).
    """
    check()
    transaction = _InlineTransaction(connection, fault_hook)
    outcomes: list[Outcome] = []
    for body in bodies:
        try:
            if not transactional:
                result = _run_job(body, transaction)
            elif type(body) is _Statement:
                result = _lone(connection, body, fault_hook, lock_wait)
            else:
                result = _in_transaction(connection, body, transaction, lock_wait)
        except Exception as exc:
            if len(bodies) == 1:
                raise
            outcomes.append((False, exc))
        else:
            outcomes.append((True, result))
    return outcomes


def _lone(
    connection: sqlite3.Connection,
    statement: _Statement,
    fault_hook: FaultHook | None,
    lock_wait: float | None,
) -> list[Row]:
    """One write statement in autocommit: its own transaction; what it raises fails it.
    The fault hook runs once, outside :func:`_when_free`, which may try the statement again."""
    if connection.in_transaction:
        raise BackendError("the SQLite writer was left inside a transaction")
    if fault_hook is not None:
        fault_hook(statement.sql)

    def run() -> list[Row]:
        return connection.execute(statement.sql.text, statement.args).fetchall()

    return _when_free(connection, run, lock_wait)


def _in_transaction(
    connection: sqlite3.Connection,
    body: Job,
    transaction: _InlineTransaction,
    lock_wait: float | None,
) -> Any:
    """``body`` in ``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back whole if it raises."""
    _when_free(connection, functools.partial(connection.execute, "BEGIN IMMEDIATE"), lock_wait)
    try:
        result = _run_job(body, transaction)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return result


_BATCH_CALLS = 64
"""Most calls one batch answers, so a long queue is cut into trips of bounded length."""


class _Batcher:
    """Calls to one connection answered in batches: one trip to its thread per batch.

    While a batch runs, the calls that arrive queue; the next batch takes them all (up to
    :data:`_BATCH_CALLS`). Under many concurrent tasks that turns a thread hop per call into
    one per batch; a lone call is a batch of one. Every
    caller still gets its own result or error, and a write's caller only after its commit.
    A call cancelled before its batch starts never runs.
    """

    def __init__(
        self,
        run: Callable[..., Awaitable[Any]],
        connection: sqlite3.Connection,
        driver: SQLiteDriver,
        *,
        transactional: bool,
    ) -> None:
        self._run = run
        self._connection = connection
        self._driver = driver
        self._transactional = transactional
        self._pending: list[tuple[Job, asyncio.Future[Any]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._busy = False
        self._check = driver._check_file

    @property
    def active(self) -> bool:
        """Whether a batch is running or calls are waiting for one."""
        return self._busy or self._drainer is not None

    async def submit(self, body: Job) -> Any:
        if self._drainer is None and not self._busy:
            # Nothing running: this call is a batch of one, run here without a task or a
            # future; calls that arrive meanwhile queue and are drained after it.
            self._busy = True
            try:
                ((ok, value),) = await self._trip([body])
            finally:
                self._busy = False
                if self._pending and self._drainer is None:
                    self._drainer = asyncio.get_running_loop().create_task(self._drain())
            if ok:
                return value
            raise value
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((body, future))
        if self._drainer is None and not self._busy:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                taken = self._pending[:_BATCH_CALLS]
                del self._pending[:_BATCH_CALLS]
                jobs = [(body, future) for body, future in taken if not future.done()]
                if jobs:
                    await self._answer(jobs)
        finally:
            self._drainer = None

    async def _trip(self, bodies: list[Job]) -> list[Outcome]:
        """Run ``bodies`` as one batch in one trip to the connection's thread."""
        arguments = (self._connection, bodies, self._driver.fault_hook, self._transactional)
        if self._transactional:
            async with self._driver._write_lock:
                wait = self._driver._lock_wait
                outcomes: list[Outcome] = await self._run(_run_batch, *arguments, self._check, wait)
                return outcomes
        return cast(list[Outcome], await self._run(_run_batch, *arguments, self._check))

    async def _answer(self, jobs: list[tuple[Job, asyncio.Future[Any]]]) -> None:
        try:
            outcomes = await self._trip([body for body, _ in jobs])
        except BaseException as exc:
            for _, future in jobs:
                if future.done():
                    continue
                if isinstance(exc, Exception):
                    future.set_exception(exc)
                else:  # cancelled (or exiting): the calls are cancelled, not failed
                    future.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), (ok, value) in zip(jobs, outcomes, strict=True):
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def fail_pending(self, error: BaseException) -> None:
        """Fail the calls still queued (the connection is closing)."""
        pending, self._pending = self._pending, []
        for _, future in pending:
            if not future.done():
                future.set_exception(error)


class _InlineTransaction:
    """Statements on the connection itself, for a body already in the writer's thread."""

    def __init__(self, connection: sqlite3.Connection, fault_hook: FaultHook | None) -> None:
        self._connection = connection
        self._fault_hook = fault_hook

    async def executemany(self, sql: SQL, rows: Sequence[Sequence[Any]]) -> None:
        if self._fault_hook is not None:
            self._fault_hook(sql)
        self._connection.executemany(sql.text, rows)

    async def fetch(self, sql: SQL, args: Sequence[Any]) -> list[Row]:
        return self.fetch_now(sql, args)

    def fetch_now(self, sql: SQL, args: Sequence[Any]) -> list[Row]:
        if self._fault_hook is not None:
            self._fault_hook(sql)
        return self._connection.execute(sql.text, args).fetchall()


class _SQLiteTransaction:
    def __init__(self, connection: aiosqlite.Connection, driver: SQLiteDriver) -> None:
        self._connection = connection
        self._driver = driver

    async def executemany(self, sql: SQL, rows: Sequence[Sequence[Any]]) -> None:
        self._driver._before(sql)
        await self._connection.executemany(sql.text, rows)

    async def fetch(self, sql: SQL, args: Sequence[Any]) -> list[Row]:
        self._driver._before(sql)
        return list(await self._connection.execute_fetchall(sql.text, args))


class _PostgresTransaction:
    def __init__(self, connection: Any, fault_hook: FaultHook | None) -> None:
        self._connection = connection
        self._fault_hook = fault_hook

    async def executemany(self, sql: SQL, rows: Sequence[Sequence[Any]]) -> None:
        if self._fault_hook is not None:
            self._fault_hook(sql)
        await self._connection.executemany(sql.text, rows)

    async def fetch(self, sql: SQL, args: Sequence[Any]) -> list[Row]:
        if self._fault_hook is not None:
            self._fault_hook(sql)
        rows: list[Row] = await self._connection.fetch(sql.text, *args)
        return rows


class PostgresDriver:
    """A small pool of asyncpg connections; asyncpg prepares and caches each statement.

    Why not ``asyncpg.create_pool``: measured here, its acquire/release adds ~200 µs to every
    call (more than a whole indexed lookup), while the store needs none of what it does on
    release (the store never changes session state). This pool is a LIFO stack of slots, each
    an open connection or ``None`` (connect on demand); a connection that failed, was closed
    by the server or was interrupted by cancellation is dropped and its slot reconnects on
    next use. Callers that wait for a connection get one in the order they came, and
    retrieves that wait share one statement (:meth:`fetch_together`).

    A pooled connection found dead when a call uses it (the server restarted or ended it
    while it sat idle) is replaced once and the call runs again on a new connection, so a
    restart costs no failed call. Only a connection that had been idle in the pool is
    retried, and only when the failure is the connection itself, not anything the server
    answered.

    The connections run with ``enable_seqscan = off`` and ``plan_cache_mode =
    force_generic_plan``: every statement of the store reads a user's rows or a memory's
    postings by index, so each is planned once per connection (and again after an
    ``ANALYZE``), not at every call. Left to choose, PostgreSQL re-planned the query at every
    call (0.4 ms of a 1 ms query at 1,000 memories), and a generic plan it switched to, priced
    while the tables were small, scanned every user's postings: alice's query over her two
    memories took 37 ms instead of 1.4 (27×) once bob held 50,000 (``isolation.py --parts
    noise``, before ``ANALYZE``). With sequential scans priced out that plan reads the index
    (0.1 ms). ``force_custom_plan``, the other cure, made every store, retrieve and delete
    20-40% slower; these two settings moved no other call's p50 by more than 3%.
    """

    def __init__(self, url: URL, *, pool_size: int, timeout: float, schema: str | None) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._pool_size = max(1, pool_size)
        self._timeout = timeout
        settings = {
            "application_name": "asyncmem",
            "enable_seqscan": "off",
            "plan_cache_mode": "force_generic_plan",
        }
        if schema is not None:
            settings["search_path"] = schema
        self._settings = settings
        self._idle: list[Any] | None = None  # the pool's slots not in use, the last on top
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._open: set[Any] = set()
        self._groups: dict[str, list[_Waiting]] = {}
        self._leaders: set[asyncio.Task[None]] = set()
        self.fault_hook: FaultHook | None = None

    async def _connect(self) -> Any:
        import asyncpg

        return await asyncpg.connect(
            self._dsn,
            timeout=self._timeout,
            command_timeout=self._timeout,
            server_settings=self._settings,
        )

    async def open(self) -> None:
        idle: list[Any] = [None] * (self._pool_size - 1)
        first = await self._connect()
        self._open.add(first)
        idle.append(first)
        self._idle = idle

    async def close(self) -> None:
        connections, self._open, self._idle = self._open, set(), None
        waiters, self._waiters = self._waiters, collections.deque()
        closed = BackendClosedError("the SQL store was closed before this call ran")
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(closed)
        await asyncio.gather(*(c.close(timeout=5) for c in connections), return_exceptions=True)

    async def _acquire(self) -> tuple[Any, bool]:
        """A connection, and whether it was taken idle from the pool (not made just now).

        First come, first served: while callers wait, a released connection goes to the
        longest waiting one, never to a newcomer (``asyncio.Queue`` lets a newcomer take it,
        and a waiter that lost goes to the back of the line: a few calls waited 300 ms
        while the median took 1 ms).
        """
        if self._idle is None:
            raise BackendError("the PostgreSQL connections are not open")
        if self._idle and not self._waiters:
            connection = self._idle.pop()
        else:
            waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(self._timeout):
                    connection = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._give(waiter.result())  # handed over as this call gave up
                elif waiter in self._waiters:
                    self._waiters.remove(waiter)
                raise
        if connection is not None and not connection.is_closed():
            return connection, True
        self._open.discard(connection)
        try:
            connection = await self._connect()
        except BaseException:
            self._give(None)
            raise
        self._open.add(connection)
        return connection, False

    def _give(self, slot: Any) -> None:
        """Hand ``slot`` (a connection, or ``None``: connect on use) to the longest waiting
        caller, or keep it idle."""
        if self._idle is None:  # closed meanwhile
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                return
        self._idle.append(slot)

    def _busy(self) -> bool:
        """Whether a call now would wait for a connection."""
        return self._idle is not None and (not self._idle or bool(self._waiters))

    def _release(self, connection: Any, healthy: bool) -> None:
        if self._idle is None:  # closed meanwhile
            return
        if healthy and not connection.is_closed():
            self._give(connection)
            return
        self._open.discard(connection)
        connection.terminate()
        self._give(None)

    async def _run(self, method: str, sql: SQL, args: Sequence[Any]) -> Any:
        if self.fault_hook is not None:
            self.fault_hook(sql)
        return await self._on_connection(method, lambda: (sql, args))

    async def _on_connection(
        self, method: str, statement: Callable[[], tuple[SQL, Sequence[Any]]]
    ) -> Any:
        """Run ``statement()`` (called once a connection is ours) by ``method`` on a
        pooled connection.

        Run once more, and only once, if the connection turned out dead, or if the server
        aborted the statement to break a deadlock (SQLSTATE 40P01): one statement outside a
        transaction is rolled back whole, so nothing of the first try remains. (A group of
        plain stores locks a conversation turn's row it leaves alone, so it can deadlock
        with a turn appended next to that row; either side then simply runs again.)"""
        for attempt in (1, 2):
            connection, reused = await self._acquire()
            healthy = False
            try:
                sql, args = statement()
                result = await getattr(connection, method)(sql.text, *args)
                healthy = True
                return result
            except Exception as exc:
                # An error the server reported leaves the connection usable.
                healthy = _sqlstate(exc) != "" and not connection.is_closed()
                if attempt == 1 and reused and _connection_lost(exc, connection):
                    continue
                if attempt == 1 and _sqlstate(exc) == _DEADLOCK:
                    continue
                raise
            finally:
                self._release(connection, healthy)
        raise AssertionError("unreachable")  # pragma: no cover

    async def fetch(
        self,
        sql: SQL,
        args: Sequence[Any],
        *,
        write: bool = False,
        heavy: Lookup | None = None,
    ) -> list[Row]:
        rows: list[Row] = await self._run("fetch", sql, args)
        return rows

    async def lookup(self, sql: SQL, args: Sequence[Any]) -> list[Row]:
        return await self.fetch(sql, args)

    async def fetch_together(
        self, sql: SQL, many: SQL, args: Sequence[Any], *, pack: Pack | None = None
    ) -> list[Row]:
        """The rows of a one-statement ``sql`` for ``args``, as :meth:`fetch` gives them;
        but while every connection is busy, concurrent calls of ``sql`` wait together for
        the next free connection and run there as one ``many`` statement.

        ``pack`` joins the calls' arguments and splits the rows; by default ``many`` takes,
        for each of ``sql``'s parameters, an array of the calls' values, and numbers each
        row by its call (column ``n``, from 1). Measured on this machine
        (``benchmarks/pg_cost.py``): a retrieve costs ~150 µs of client and server CPU
        alone, ~45 µs a key four at a time and ~30 µs ten at a time, and under 64 tasks on
        10 connections the CPU is what limits throughput. A lone call, or any call while a
        connection is free, runs ``sql`` at once. Each caller gets its own rows. If the
        server refuses the shared statement, each call runs again alone, so one call's
        error is its own and, for a write, nothing the refused statement did remains; an
        error of the connection (lost, timed out) goes to every caller in it, as it would
        have to each alone.
        """
        if self.fault_hook is not None:
            self.fault_hook(sql)
        waiting = self._groups.get(many.text)
        if waiting is None:
            if not self._busy():
                rows: list[Row] = await self._on_connection("fetch", lambda: (sql, args))
                return rows
            waiting = self._groups[many.text] = []
            leader = asyncio.get_running_loop().create_task(
                self._lead(sql, many, pack or _Columns(), waiting)
            )
            self._leaders.add(leader)
            leader.add_done_callback(self._leaders.discard)
        answer: asyncio.Future[list[Row]] = asyncio.get_running_loop().create_future()
        waiting.append((args, answer))
        return await answer

    async def _lead(self, sql: SQL, many: SQL, pack: Pack, waiting: list[_Waiting]) -> None:
        """Run the calls in ``waiting`` as one statement on the next free connection, and
        answer each; calls that come after the connection is ours form the next group."""
        calls: list[_Waiting] = []

        def statement() -> tuple[SQL, Sequence[Any]]:
            if not calls:  # the first try: the group closes here
                if self._groups.get(many.text) is waiting:
                    del self._groups[many.text]
                calls.extend(call for call in waiting if not call[1].done())
                if not calls:  # every caller gave up: nothing to run (nor to write)
                    raise _NoCalls
            if len(calls) == 1:
                return sql, calls[0][0]
            return many, pack.args([args for args, _ in calls])

        try:
            rows: list[Row] = await self._on_connection("fetch", statement)
        except _NoCalls:
            return
        except BaseException as exc:
            if self._groups.get(many.text) is waiting:
                del self._groups[many.text]
            if len(calls) > 1 and isinstance(exc, Exception) and _sqlstate(exc) != "":
                await self._each_alone(sql, calls)
                return
            for _, answer in calls or waiting:
                if not answer.done():
                    if isinstance(exc, Exception):
                        answer.set_exception(exc)
                    else:
                        answer.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        found = [rows] if len(calls) == 1 else pack.answers([a for a, _ in calls], rows)
        for (_, answer), mine in zip(calls, found, strict=True):
            if not answer.done():
                answer.set_result(mine)

    async def _each_alone(self, sql: SQL, calls: list[_Waiting]) -> None:
        """Run each of ``calls`` as its own ``sql`` (the shared statement was refused)."""

        async def alone(args: Sequence[Any], answer: asyncio.Future[list[Row]]) -> None:
            try:
                rows: list[Row] = await self._on_connection("fetch", lambda: (sql, args))
            except Exception as exc:
                if not answer.done():
                    answer.set_exception(exc)
                return
            if not answer.done():
                answer.set_result(rows)

        await asyncio.gather(*(alone(args, answer) for args, answer in calls if not answer.done()))

    async def execute(self, sql: SQL, args: Sequence[Any]) -> int:
        status: str = await self._run("execute", sql, args)
        return int(status.rsplit(" ", 1)[-1])

    @asynccontextmanager
    async def transaction(
        self, *, lock: SQL | None = None, lock_users: Collection[str] = ()
    ) -> AsyncIterator[Transaction]:
        """One transaction on one connection; with ``lock``, first run for each of
        ``lock_users`` in sorted order (see :meth:`atomic`)."""
        users = sorted(set(lock_users)) if lock is not None else []
        folded = _begin_and_lock(lock, users) if lock is not None and users else None
        if folded is not None and lock is not None and self.fault_hook is not None:
            for _ in users:
                self.fault_hook(lock)
        connection = await self._begin(folded or "BEGIN")
        healthy = False
        try:
            transaction = _PostgresTransaction(connection, self.fault_hook)
            if folded is None and lock is not None:
                for user_id in users:  # a lock statement that cannot be folded: bound
                    await transaction.fetch(lock, lock.args(user_id=user_id))
            yield transaction
            await connection.execute("COMMIT")
            healthy = True
        except BaseException as exc:
            # Rolled back; the connection is reusable unless the failure was below SQL.
            if not connection.is_closed() and connection.is_in_transaction():
                with contextlib.suppress(Exception):
                    await connection.execute("ROLLBACK")
            healthy = not connection.is_closed() and not connection.is_in_transaction()
            healthy = healthy and not isinstance(exc, OSError | TimeoutError)
            healthy = healthy and isinstance(exc, Exception)
            raise
        finally:
            self._release(connection, healthy)

    async def _begin(self, begin: str) -> Any:
        """A connection in a new transaction: ``begin`` (``BEGIN``, perhaps with more
        statements after it) on a pooled one, or on a new one if the pooled one turns out
        dead (nothing has run on it yet, so this is always safe)."""
        for attempt in (1, 2):
            connection, reused = await self._acquire()
            try:
                await connection.execute(begin)
                return connection
            except BaseException as exc:
                healthy = False
                if isinstance(exc, Exception) and _sqlstate(exc) and not connection.is_closed():
                    # The server refused a statement after BEGIN (a lock it could not take
                    # in time): roll back and keep the connection.
                    if connection.is_in_transaction():
                        with contextlib.suppress(Exception):
                            await connection.execute("ROLLBACK")
                    healthy = not connection.is_closed() and not connection.is_in_transaction()
                self._release(connection, healthy)
                if attempt == 1 and reused and _connection_lost(exc, connection):
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def atomic(
        self,
        body: Callable[[Transaction], Coroutine[Any, Any, _T]],
        *,
        lock: SQL | None = None,
        lock_users: Collection[str] = (),
        chars: int | None = None,
        heavy: Lookup | None = None,
    ) -> _T:
        """Run ``body`` in one transaction; ``BEGIN`` and the ``lock`` of each of
        ``lock_users`` go to the server as one simple-protocol query (one round trip
        instead of one plus one per user), the user ids as :func:`dollar_quoted` literals.
        """
        async with self.transaction(lock=lock, lock_users=lock_users) as transaction:
            return await body(transaction)


def dollar_quoted(text: str) -> str:
    """``text`` as a PostgreSQL dollar-quoted literal, ``$qN$…$qN$``.

    Inside dollar quotes nothing is special (no escapes, quotes or backslashes), and the
    literal ends at the first occurrence of its delimiter, so a tag is chosen whose
    delimiter first occurs in ``text`` + delimiter at its very end: the literal then holds
    exactly ``text``. NUL cannot be sent in a query; asyncmem's ids never hold it.
    """
    if "\x00" in text:
        raise InvalidInputError("a NUL character cannot be part of a SQL literal")
    for n in itertools.count():
        delimiter = f"$q{n}$"
        if (text + delimiter).find(delimiter) == len(text):
            return delimiter + text + delimiter
    raise AssertionError("unreachable")  # pragma: no cover


def _begin_and_lock(lock: SQL, users: Sequence[str]) -> str | None:
    """``BEGIN`` and ``lock`` for each of ``users`` as one query string, or ``None`` when
    ``lock`` is not a statement of a lone ``user_id`` parameter (then it runs bound, a
    round trip per user, after ``BEGIN``)."""
    text = lock.text
    if lock.names != ("user_id",) or text.count("$") != 1 or "$1" not in text:
        return None
    if text[text.index("$1") + 2 : text.index("$1") + 3].isdigit():
        return None
    locks = [text.replace("$1", dollar_quoted(user_id)) for user_id in users]
    return "; ".join(["BEGIN", *locks])


def _connection_lost(error: BaseException, connection: Any) -> bool:
    """Whether ``error`` says the connection itself is gone (not an answer from the server).

    A timeout is not: the statement may be running, or done, on the server (a lock wait in
    :meth:`PostgresDriver._begin`, a write), so running it again could wait twice as long
    or write twice. (``TimeoutError`` is an ``OSError``.)
    """
    if isinstance(error, TimeoutError):
        return False
    if isinstance(error, OSError | ConnectionError):
        return True
    state = _sqlstate(error)
    if state.startswith("08") or state in {"57P01", "57P02", "57P03"}:
        return True
    return state == "" and type(error).__module__.startswith("asyncpg") and connection.is_closed()
