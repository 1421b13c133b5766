"""Revision 0008 (PostgreSQL's one-statement turn): it adds a function and touches no row; a
database written before it keeps every memory, and its conversations go on exactly."""

from __future__ import annotations

import re

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem import SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.compiled import SQL
from asyncmem.sql.engine import make_engine, normalize_url
from asyncmem.sql.statements import _PG_CONVERSATION_LOCK
from tests.test_context import _check_contexts, _rows

FUNCTION = "SELECT count(*) FROM pg_proc WHERE proname = 'asyncmem_append_turn'"


async def _functions(engine: AsyncEngine) -> int:
    if engine.dialect.name != "postgresql":
        return 0
    async with engine.connect() as connection:
        return int((await connection.execute(text(FUNCTION))).scalar_one())


async def test_0008_up_and_down_keeps_every_row(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        async with SQLBackend(database_url, auto_migrate=True) as backend:
            for i in range(6):
                await backend.store("alice", f"t{i}", f"turn {i} word{i}", {"session": "s"})
            await backend.store("alice", "fact", "a plain fact")
            written = await _rows(backend)
        await migrate.downgrade(engine, "0007_user_expiry")
        assert await _functions(engine) == 0
        await migrate.upgrade(engine)
        assert await _functions(engine) == (engine.dialect.name == "postgresql")
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            assert await _rows(backend) == written
            await backend.store("alice", "t6", "turn 6 word6", {"session": "s"})
            await _check_contexts(backend)
            assert (await backend.query("alice", "word6"))[0].key == "t6"
    finally:
        await engine.dispose()


async def test_the_one_statement_turn_takes_the_lock_the_transaction_path_takes(
    database_url: str,
) -> None:
    """The function (frozen in the revision) and ``Statements.lock_user`` must lock the same
    (class, user) pair, or a turn appended in one statement and one stored in a transaction
    could interleave in one conversation."""
    async with SQLBackend(database_url, auto_migrate=True) as backend:
        lock = backend._sql.lock_user
        if lock is None:  # SQLite serialises writers; there is no function
            assert backend._sql.append_turn is None
            return
        rows = await backend._driver.fetch(
            SQL("SELECT prosrc FROM pg_proc WHERE proname = 'asyncmem_append_turn'", (), {}), ()
        )
    (source,) = [row["prosrc"] for row in rows]
    taken = re.findall(r"pg_advisory_xact_lock\((\d+), hashtext\(p_user_id\)\)", source)
    assert taken == [str(_PG_CONVERSATION_LOCK)]
    assert f"pg_advisory_xact_lock({_PG_CONVERSATION_LOCK}, hashtext(" in lock.text
