"""Conversation upkeep: keep every turn's neighbour context exact, inside the caller's write.

A memory whose metadata names a ``session`` is a turn of that conversation (same user, store
order), and its ``context`` column holds the words of the turns around it
(:func:`~asyncmem.sql.terms.neighbour_contexts`), so a short answer is found through the
question before it. Every write that adds, changes, moves or removes a turn calls one of these
functions on the transaction that does the write, so the write and its upkeep commit together
or not at all: a call that raised changed nothing, and no context keeps the words of a removed
turn.

Each function awaits only its transaction's statements (on SQLite the whole transaction runs at
once: in the writer's thread, in one trip, or on the event loop's thread when it came alone).
On PostgreSQL the users' advisory locks come first: callers that know the users pass them to
``driver.atomic(lock=sql.lock_user, lock_users=...)``, which sends ``BEGIN`` and the locks in
one round trip; :func:`lock_users` is for users found inside the transaction (``purge_expired``).

PostgreSQL's common case, a conversation's new last turn, skips the transaction:
:func:`append_turn` computes the contexts from the last turns :class:`Tails` remembers and
one statement (revision 0008's function) takes the lock, checks those are still the last
turns, and writes, all or nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any

from asyncmem.sql import search
from asyncmem.sql.compiled import SQL, Statements
from asyncmem.sql.drivers import Row, Transaction
from asyncmem.sql.terms import neighbour_contexts

__all__ = [
    "TAIL_CACHE",
    "Change",
    "Tails",
    "append_turn",
    "close_gaps",
    "leave",
    "lock_users",
    "recompute",
    "settle",
    "store_turn",
]

Change = tuple[str, int, Any, Any]
"""(user_id, row id, the session the row had, the session it should have)."""


async def lock_users(transaction: Transaction, sql: Statements, users: Collection[str]) -> None:
    """PostgreSQL: take each user's advisory lock, in a fixed order (SQLite: nothing).

    Taken before any row lock, so each upkeep reads the turns the one before it committed and
    no two writes wait on each other's rows (upkeep updates rows other than the one written).
    Writes of different users still run in parallel; SQLite serialises writers already.
    """
    lock = sql.lock_user
    if lock is not None:
        for user_id in sorted(set(users)):
            await transaction.fetch(lock, lock.args(user_id=user_id))


async def _write_contexts(
    transaction: Transaction,
    sql: Statements,
    rows: Sequence[Row],
    contexts: list[str],
    at: int | None,
) -> None:
    """Store the contexts of ``rows`` (``id``, ``value``, ``context``) that changed.

    With ``at``, only the rows whose window holds position ``at`` (from
    :data:`~asyncmem.sql.search.CONTEXT_AFTER` before it to
    :data:`~asyncmem.sql.search.CONTEXT_BEFORE` after it): the others were read for their
    words only; their own windows reach past what was read.
    """
    if at is None:
        near = range(len(rows))
    else:
        near = range(max(0, at - search.CONTEXT_AFTER), at + search.CONTEXT_BEFORE + 1)
    set_context = sql.set_context
    changed = [
        set_context.args(id=rows[i]["id"], context=contexts[i])
        for i in near
        if i < len(rows) and rows[i]["context"] != contexts[i]
    ]
    if changed:
        await transaction.executemany(set_context, changed)


async def _refresh(
    transaction: Transaction, sql: Statements, user_id: str, session: str, around: int
) -> None:
    """Rewrite the contexts of the turns whose neighbours changed at row ``around``.

    A change at ``around`` (stored, updated, deleted, moved in or out) alters the context of
    the turns whose window reaches it; their own windows read up to ``CONTEXT_BEFORE +
    CONTEXT_AFTER`` turns from it on each side, so that much is read and only changed contexts
    are written.
    """
    window = {"user_id": user_id, "session": session, "around": around}
    rows = list(
        reversed(await transaction.fetch(sql.turns_before, sql.turns_before.args(**window)))
    )
    at = len(rows)
    rows += await transaction.fetch(sql.turns_from, sql.turns_from.args(**window))
    contexts = neighbour_contexts([row["value"] for row in rows])
    await _write_contexts(transaction, sql, rows, contexts, at)


async def recompute(transaction: Transaction, sql: Statements, user_id: str, session: str) -> None:
    """Recompute every turn's context of one conversation (after a batch wrote to it)."""
    turns = sql.turns_all
    rows = await transaction.fetch(turns, turns.args(user_id=user_id, session=session))
    contexts = neighbour_contexts([row["value"] for row in rows])
    await _write_contexts(transaction, sql, rows, contexts, None)


async def store_turn(
    transaction: Transaction, sql: Statements, values: dict[str, Any], now: float
) -> Row:
    """Upsert a conversation turn and keep its neighbours' contexts exact; the upsert's row.

    The common case, a new last turn, reads the conversation's last turns once, writes the
    turn with its context and updates the previous turns whose context changed. A turn stored
    again, or moved from another conversation, has the windows around it (in the old and the
    new conversation) recomputed.
    """
    user_id, session = values["user_id"], values["session"]
    tail = list(
        reversed(
            await transaction.fetch(
                sql.turns_tail, sql.turns_tail.args(user_id=user_id, session=session)
            )
        )
    )
    # Only the last CONTEXT_AFTER turns of the tail see the new turn; the rest are read for
    # their words.
    first = max(0, len(tail) - search.CONTEXT_AFTER)
    contexts = neighbour_contexts([turn["value"] for turn in tail] + [values["value"]], first=first)
    (row,) = await transaction.fetch(
        sql.upsert, sql.upsert.args(context=contexts[-1], now=now, **values)
    )
    row_id, old = row["id"], row["session"]
    if old == session and (not tail or row_id > tail[-1]["id"]):
        await _write_contexts(transaction, sql, tail[first:], contexts, None)
        return row
    if old != session:
        await transaction.fetch(
            sql.set_session, sql.set_session.args(id=row_id, new_session=session)
        )
        if old is not None:
            await _refresh(transaction, sql, user_id, old, row_id)
    await _refresh(transaction, sql, user_id, session, row_id)
    return row


async def leave(
    transaction: Transaction, sql: Statements, user_id: str, row_id: int, session: str
) -> None:
    """A memory written without a session was a turn of ``session``: clear it, mend the gap."""
    clear = sql.clear_session
    await transaction.fetch(clear, clear.args(id=row_id, session=session))
    await _refresh(transaction, sql, user_id, session, row_id)


async def settle(transaction: Transaction, sql: Statements, changes: Iterable[Change]) -> None:
    """After a batch: move rows whose session changed, recompute every touched conversation."""
    set_session = sql.set_session
    touched: set[tuple[str, str]] = set()
    for user_id, row_id, old, new in changes:
        if old != new:
            await transaction.fetch(set_session, set_session.args(id=row_id, new_session=new))
        touched.update((user_id, s) for s in (old, new) if s is not None)
    for user_id, session in sorted(touched):
        await recompute(transaction, sql, user_id, session)


async def close_gaps(
    transaction: Transaction, sql: Statements, removed: Iterable[tuple[str, int, Any]]
) -> None:
    """After removing memories (user_id, row id, session) in this transaction: recompute the
    windows around the turns among them, so no context keeps their words."""
    for user_id, row_id, session in removed:
        if session is not None:
            await _refresh(transaction, sql, user_id, session, row_id)


TAIL_CACHE = 1024
"""How many conversations' last turns :class:`Tails` keeps (at most three value heads each)."""

Tail = tuple[tuple[int, str], ...]
"""A conversation's last turns, oldest first: (row id, the value's first
:data:`~asyncmem.sql.search.CONTEXT_CHARS` characters, all a context reads of it)."""


class Tails:
    """The last turns of recent conversations, as this store last wrote or read them.

    A guess and nothing more: :func:`append_turn` sends it with the write, and the database
    checks it under the user's lock, so a guess gone stale (another process wrote to the
    conversation) costs a read and a retry, never a wrong context.
    """

    def __init__(self, size: int = TAIL_CACHE) -> None:
        self._size = size
        self._tails: OrderedDict[tuple[str, str], Tail] = OrderedDict()

    def get(self, user_id: str, session: str) -> Tail:
        tail = self._tails.get((user_id, session))
        if tail is None:
            return ()  # a new conversation, most likely
        self._tails.move_to_end((user_id, session))
        return tail

    def put(self, user_id: str, session: str, tail: Tail) -> None:
        self._tails[(user_id, session)] = tail
        self._tails.move_to_end((user_id, session))
        if len(self._tails) > self._size:
            self._tails.popitem(last=False)


Fetch = Callable[[SQL, Sequence[Any]], Awaitable[list[Row]]]
"""One statement on its own (autocommit), its rows."""


def _heads(rows: Iterable[Row]) -> Tail:
    return tuple((row["id"], row["value"][: search.CONTEXT_CHARS]) for row in rows)


async def append_turn(
    fetch: Fetch, sql: Statements, tails: Tails, values: dict[str, Any]
) -> Row | None:
    """PostgreSQL: store a conversation's new last turn in one statement; its row, or None
    when it is not a new last turn (the caller then runs :func:`store_turn` in a transaction).

    The contexts are computed from the conversation's last turns as ``tails`` remembers them;
    ``sql.append_turn`` (revision 0008's function) writes the turn and its neighbours'
    contexts only if those are still the last turns. If they are not, they are read (one
    statement, outside any transaction: the function checks them again) and the write tried
    once more. Five round trips (``BEGIN`` and the lock, the tail, the upsert, the
    neighbours, ``COMMIT``) become one.
    """
    append = sql.append_turn
    if append is None:
        return None
    user_id, session = values["user_id"], values["session"]
    tail = tails.get(user_id, session)
    for _ in range(2):
        first = max(0, len(tail) - search.CONTEXT_AFTER)
        contexts = neighbour_contexts([head for _, head in tail] + [values["value"]], first=first)
        newest_first = tail[::-1]
        rows = await fetch(
            append,
            append.args(
                **values,
                context=contexts[-1],
                tail_ids=[row_id for row_id, _ in newest_first],
                tail_heads=[head for _, head in newest_first],
                neighbour_ids=[row_id for row_id, _ in tail[first:]],
                neighbour_contexts=contexts[:-1],
            ),
        )
        if rows:
            row = rows[0]
            if not row["appended"]:
                return None  # the key is stored already: stored again, or moved
            reach = search.CONTEXT_BEFORE + search.CONTEXT_AFTER
            head = values["value"][: search.CONTEXT_CHARS]
            tails.put(user_id, session, (*tail, (row["id"], head))[-reach:])
            return row
        last = sql.turns_tail
        found = _heads(reversed(await fetch(last, last.args(user_id=user_id, session=session))))
        if found == tail:
            # The function and Python read these turns differently (a database whose
            # encoding is not UTF-8 cuts values by bytes): the long way, every time.
            return None
        tail = found
        tails.put(user_id, session, tail)
    return None  # another writer keeps adding turns: take the lock the long way
