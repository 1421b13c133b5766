"""PostgreSQL: ``atomic(lock=..., lock_users=...)`` takes the users' advisory locks in the
same round trip as ``BEGIN``, with the user ids inlined as dollar-quoted literals.

The locks must be the very locks the bound statement takes (same key), so writers through
either path serialise; ids with quotes, dollars and backslashes must be data, never SQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from asyncmem import InvalidInputError, SQLBackend
from asyncmem.sql.compiled import SQL
from asyncmem.sql.drivers import PostgresDriver, Transaction, dollar_quoted
from tests.backends import PG_ENABLED, PG_URL, pg_schema

HOSTILE = [
    "alice",
    "o'brien",
    "''; SELECT pg_sleep(10); --",
    "$",
    "$$",
    "$q0$",
    "a$q0",
    "$q0",
    "$q0$$q1$$q2$",
    "q0$",
    "back\\slash\\",
    "\\'",
    "$tag$ x $tag$",
    "é$q0$ü",
    "💥$q0",
    "$q0" * 60,
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_dollar_quoted_literal_ends_exactly_after_the_text(text: str) -> None:
    literal = dollar_quoted(text)
    delimiter = literal[: literal.index("$", 1) + 1]
    assert literal == delimiter + text + delimiter
    assert (text + delimiter).find(delimiter) == len(text)


def test_nul_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        dollar_quoted("a\x00b")


@pytest.fixture
async def store() -> AsyncIterator[SQLBackend]:
    if not PG_ENABLED:
        pytest.skip("PostgreSQL is off")
    async with (
        pg_schema() as schema,
        SQLBackend(PG_URL, schema=schema, auto_migrate=True, pool_size=4) as backend,
    ):
        yield backend


def _parts(backend: SQLBackend) -> tuple[PostgresDriver, SQL]:
    driver = backend._driver
    lock = backend._sql.lock_user
    assert isinstance(driver, PostgresDriver)
    assert lock is not None
    return driver, lock


async def _other_connection() -> Any:
    import asyncpg

    return await asyncpg.connect(PG_URL.replace("+asyncpg", ""))


@pytest.mark.postgresql
async def test_postgres_literals_read_back_as_the_text(store: SQLBackend) -> None:
    connection = await _other_connection()
    try:
        for text in HOSTILE:
            assert await connection.fetchval("SELECT " + dollar_quoted(text)) == text
            assert await connection.fetchval(
                f"SELECT hashtext({dollar_quoted(text)}::VARCHAR) = hashtext($1::VARCHAR)", text
            )
    finally:
        await connection.close()


@pytest.mark.postgresql
@pytest.mark.parametrize("user_id", HOSTILE)
async def test_the_folded_lock_is_the_bound_statements_lock(
    store: SQLBackend, user_id: str
) -> None:
    """While a folded transaction holds a user's lock, the bound lock statement of the same
    user cannot be taken elsewhere, and another user's can."""
    driver, lock = _parts(store)
    trying = lock.text.replace("pg_advisory_xact_lock", "pg_try_advisory_lock")
    other = await _other_connection()
    try:

        async def body(transaction: Transaction) -> list[bool]:
            taken = []
            for who in (user_id, user_id + "-other"):
                taken.append(await other.fetchval(trying, who))
            return taken

        assert await driver.atomic(body, lock=lock, lock_users=[user_id]) == [False, True]
        await other.execute("SELECT pg_advisory_unlock_all()")
        # Released at commit.
        assert await other.fetchval(trying, user_id) is True
    finally:
        await other.close()


async def _writer(
    driver: PostgresDriver,
    lock: SQL,
    user_id: str,
    spans: list[tuple[float, float]],
    *,
    folded: bool,
) -> None:
    async def body(transaction: Transaction) -> None:
        if not folded:
            await transaction.fetch(lock, lock.args(user_id=user_id))
        start = asyncio.get_running_loop().time()
        await asyncio.sleep(0.15)
        spans.append((start, asyncio.get_running_loop().time()))

    if folded:
        await driver.atomic(body, lock=lock, lock_users=[user_id])
    else:
        await driver.atomic(body)


def _overlap(spans: list[tuple[float, float]]) -> bool:
    first, second = sorted(spans)
    return second[0] < first[1]


@pytest.mark.postgresql
@pytest.mark.parametrize("user_id", ["alice", "x'$q0$\\$$"])
@pytest.mark.parametrize("folded", [(True, True), (True, False)], ids=["both", "mixed"])
async def test_two_writers_of_one_user_are_serialised(
    store: SQLBackend, user_id: str, folded: tuple[bool, bool]
) -> None:
    """Two folded writers, or a folded one and one that locks with the bound statement."""
    driver, lock = _parts(store)
    spans: list[tuple[float, float]] = []
    await asyncio.gather(*(_writer(driver, lock, user_id, spans, folded=f) for f in folded))
    assert len(spans) == 2
    assert not _overlap(spans)


@pytest.mark.postgresql
async def test_writers_of_different_users_run_together(store: SQLBackend) -> None:
    driver, lock = _parts(store)
    spans: list[tuple[float, float]] = []
    await asyncio.gather(
        *(_writer(driver, lock, user, spans, folded=True) for user in ("alice", "bob"))
    )
    assert _overlap(spans)


@pytest.mark.postgresql
async def test_several_users_are_locked_and_a_failed_body_rolls_back(store: SQLBackend) -> None:
    driver, lock = _parts(store)
    users = ["b$q0$", "a'", "c\\"]
    other = await _other_connection()
    trying = lock.text.replace("pg_advisory_xact_lock", "pg_try_advisory_xact_lock")
    try:

        async def body(transaction: Transaction) -> None:
            async with other.transaction():
                for user in users:
                    assert await other.fetchval(trying, user) is False
            raise RuntimeError("body failed")

        with pytest.raises(RuntimeError):
            await driver.atomic(body, lock=lock, lock_users=users)
        async with other.transaction():
            for user in users:
                assert await other.fetchval(trying, user) is True
    finally:
        await other.close()
    await store.store("a'", "k", "v")  # the pool is still healthy
    assert (await store.retrieve("a'", "k")) is not None


@pytest.mark.postgresql
async def test_a_lock_statement_that_cannot_be_folded_runs_bound(store: SQLBackend) -> None:
    driver, lock = _parts(store)
    unfoldable = SQL(
        "SELECT pg_advisory_xact_lock(1634558840, hashtext($1::VARCHAR || $2::VARCHAR))",
        ("user_id", "suffix"),
        {"suffix": ""},
    )
    spans: list[tuple[float, float]] = []

    async def one() -> None:
        async def body(transaction: Transaction) -> None:
            start = asyncio.get_running_loop().time()
            await asyncio.sleep(0.15)
            spans.append((start, asyncio.get_running_loop().time()))

        await driver.atomic(body, lock=unfoldable, lock_users=["alice"])

    await asyncio.gather(one(), _writer(driver, lock, "alice", spans, folded=True))
    assert not _overlap(spans)


@pytest.mark.postgresql
async def test_a_lock_the_server_refuses_rolls_back_and_keeps_the_connection() -> None:
    if not PG_ENABLED:
        pytest.skip("PostgreSQL is off")
    failing = SQL("SELECT pg_advisory_xact_lock(1 / 0, hashtext($1::VARCHAR))", ("user_id",), {})
    pid = SQL("SELECT pg_backend_pid() AS pid", (), {})
    async with (
        pg_schema() as schema,
        SQLBackend(PG_URL, schema=schema, auto_migrate=True, pool_size=1) as backend,
    ):
        driver, _ = _parts(backend)
        (before,) = await driver.fetch(pid, ())

        async def body(transaction: Transaction) -> None:
            raise AssertionError("the body must not run")

        with pytest.raises(Exception, match="division by zero"):
            await driver.atomic(body, lock=failing, lock_users=["o'brien$q0$"])
        (after,) = await driver.fetch(pid, ())
        assert after["pid"] == before["pid"]
        await backend.store("o'brien$q0$", "k", "v")
