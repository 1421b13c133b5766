"""The PostgreSQL pool: first come, first served, and concurrent retrieves and plain stores
that share one statement while every connection is busy (issue 17), each caller still
getting its own answer or error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from asyncmem import AsyncmemError, BackendClosedError, BackendUnavailableError, SQLBackend
from asyncmem.sql.compiled import SQL
from asyncmem.sql.drivers import PostgresDriver
from tests.backends import BACKEND_FACTORIES, PG_URL, pg_schema

pytestmark = pytest.mark.skipif("postgresql" not in BACKEND_FACTORIES, reason="PostgreSQL is off")


@pytest.fixture
async def sql() -> AsyncIterator[SQLBackend]:
    async with (
        pg_schema() as schema,
        SQLBackend(PG_URL, schema=schema, auto_migrate=True, pool_size=2) as backend,
    ):
        yield backend


def _driver(sql: SQLBackend) -> PostgresDriver:
    driver = sql._driver
    assert isinstance(driver, PostgresDriver)
    return driver


def _record_statements(driver: PostgresDriver) -> list[SQL]:
    """The statements the driver's connections run from now on, in order."""
    ran: list[SQL] = []
    original = driver._on_connection

    async def spy(method: str, statement: Callable[[], tuple[SQL, Sequence[Any]]]) -> Any:
        def recorded() -> tuple[SQL, Sequence[Any]]:
            sql, args = statement()
            ran.append(sql)
            return sql, args

        return await original(method, recorded)

    driver._on_connection = spy  # type: ignore[method-assign]
    return ran


async def _hold_every_connection(driver: PostgresDriver, size: int) -> list[Any]:
    return [(await driver._acquire())[0] for _ in range(size)]


async def _until_waiting(driver: PostgresDriver, count: int) -> None:
    for _ in range(10_000):
        if len(driver._waiters) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(driver._waiters)} callers wait, not {count}")


async def test_a_lone_retrieve_runs_its_own_statement(sql: SQLBackend) -> None:
    await sql.store("alice", "a", "one")
    ran = _record_statements(_driver(sql))
    assert (await sql.retrieve("alice", "a")).value == "one"  # type: ignore[union-attr]
    assert await sql.retrieve("alice", "missing") is None
    assert ran == [sql._sql.retrieve, sql._sql.retrieve]


async def test_retrieves_waiting_for_a_connection_share_one_statement(sql: SQLBackend) -> None:
    driver = _driver(sql)
    await sql.store_many("alice", [{"key": f"k{i}", "value": f"alice {i}"} for i in range(8)])
    await sql.store_many("bob", [{"key": f"k{i}", "value": f"bob {i}"} for i in range(4)])
    await sql.store("bob", "gone", "soon", ttl=0.05)
    await asyncio.sleep(0.1)
    ran = _record_statements(driver)
    held = await _hold_every_connection(driver, 2)
    asked = [("alice", f"k{i}") for i in range(10)] + [("bob", "k1"), ("bob", "gone")]
    asked += [("carol", "k1"), ("alice", "k3")]  # a user with nothing; the same key twice
    calls = [asyncio.ensure_future(sql.retrieve(user, key)) for user, key in asked]
    await _until_waiting(driver, 1)  # one leader waits for all of them
    await asyncio.sleep(0)
    assert not any(call.done() for call in calls)
    for connection in held:
        driver._release(connection, True)
    found = await asyncio.gather(*calls)
    expected = {("alice", f"k{i}"): f"alice {i}" for i in range(8)} | {("bob", "k1"): "bob 1"}
    assert [None if entry is None else entry.value for entry in found] == [
        expected.get(pair) for pair in asked
    ]
    assert [(e.user_id, e.key) for e in found if e is not None] == [
        pair for pair in asked if pair in expected
    ]
    assert ran == [sql._sql.retrieve_many]
    # Once nobody waits, a retrieve runs alone again.
    assert await sql.retrieve("alice", "k0") is not None
    assert ran[-1] == sql._sql.retrieve


async def test_a_cancelled_retrieve_leaves_the_others_their_answers(sql: SQLBackend) -> None:
    driver = _driver(sql)
    await sql.store_many("alice", [{"key": f"k{i}", "value": f"v{i}"} for i in range(5)])
    held = await _hold_every_connection(driver, 2)
    calls = [asyncio.ensure_future(sql.retrieve("alice", f"k{i}")) for i in range(5)]
    await _until_waiting(driver, 1)
    calls[2].cancel()
    for connection in held:
        driver._release(connection, True)
    found = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(found[2], asyncio.CancelledError)
    assert [e.value for i, e in enumerate(found) if i != 2] == ["v0", "v1", "v3", "v4"]  # type: ignore[union-attr]


async def test_a_shared_statement_the_server_refuses_runs_each_call_alone(
    sql: SQLBackend,
) -> None:
    driver = _driver(sql)
    await sql.store_many("alice", [{"key": f"k{i}", "value": f"v{i}"} for i in range(4)])
    one = sql._sql.retrieve
    broken = SQL("SELECT 1 / 0 AS n, $1::text[] AS a, $2::text[] AS b", one.names, {})
    ran = _record_statements(driver)
    held = await _hold_every_connection(driver, 2)
    calls = [
        asyncio.ensure_future(driver.fetch_together(one, broken, ("alice", f"k{i}")))
        for i in range(4)
    ]
    await _until_waiting(driver, 1)
    for connection in held:
        driver._release(connection, True)
    found = await asyncio.gather(*calls)
    assert [[row["value"] for row in rows] for rows in found] == [[f"v{i}"] for i in range(4)]
    assert ran == [broken, one, one, one, one]
    assert len(driver._idle or ()) == 2  # the pool is whole


async def _stores_while_busy(
    sql: SQLBackend, writes: Sequence[tuple[str, str, str]]
) -> tuple[list[Any], list[SQL]]:
    """``writes`` stored concurrently while both connections are held, then released."""
    driver = _driver(sql)
    ran = _record_statements(driver)
    held = await _hold_every_connection(driver, 2)
    calls = [
        asyncio.ensure_future(sql.store(u, k, v, {"n": i})) for i, (u, k, v) in enumerate(writes)
    ]
    await _until_waiting(driver, 1)
    for connection in held:
        driver._release(connection, True)
    return await asyncio.gather(*calls, return_exceptions=True), ran


async def test_plain_stores_waiting_for_a_connection_share_one_statement(sql: SQLBackend) -> None:
    await sql.store("bob", "b1", "bob's first value")
    writes = [(f"user{i % 3}", f"k{i}", f"value {i}") for i in range(9)]
    writes.append(("bob", "b1", "bob's second value"))
    found, ran = await _stores_while_busy(sql, writes)
    assert ran == [sql._sql.upsert_plain_many]
    for i, ((user, key, value), entry) in enumerate(zip(writes, found, strict=True)):
        stored = await sql.retrieve(user, key)
        assert stored == entry
        assert (entry.user_id, entry.key, entry.value, entry.metadata) == (
            user,
            key,
            value,
            {"n": i},
        )
    history = [v.value for v in await sql.history("bob", "b1")]
    assert history == ["bob's second value", "bob's first value"]
    assert [hit.key for hit in await sql.query("bob", "second")] == ["b1"]
    assert await sql.query("bob", "first") == []


async def test_two_stores_of_one_key_in_a_group_both_happen(sql: SQLBackend) -> None:
    found, ran = await _stores_while_busy(
        sql,
        [("alice", "k", "first write"), ("alice", "other", "x"), ("alice", "k", "second write")],
    )
    # One statement cannot write a row twice: the server refuses it, and each runs alone.
    assert ran[0] == sql._sql.upsert_plain_many
    assert ran[1:] == [sql._sql.upsert_plain] * 3
    assert not any(isinstance(entry, BaseException) for entry in found)
    last = await sql.retrieve("alice", "k")
    versions = [v.value for v in await sql.history("alice", "k")]
    assert last is not None
    assert versions[0] == last.value  # the newest first, then the one it replaced
    assert sorted(versions) == ["first write", "second write"]


async def test_a_store_over_a_turn_in_a_group_takes_the_turns_upkeep(sql: SQLBackend) -> None:
    for i in range(3):
        await sql.store("alice", f"t{i}", f"turn {i} word{i}", {"session": "s"})
    found, _ = await _stores_while_busy(
        sql, [("alice", "t1", "now a plain fact"), ("alice", "fact", "a fact")]
    )
    assert [entry.value for entry in found] == ["now a plain fact", "a fact"]
    plain = await sql.retrieve("alice", "t1")
    assert plain is not None
    assert plain.metadata == {"n": 0}
    # t1 left the conversation: its neighbours no longer lend or borrow its words.
    assert [hit.key for hit in await sql.query("alice", "word1")] == []
    assert [hit.key for hit in await sql.query("alice", "plain")] == ["t1"]


async def test_one_store_the_server_refuses_fails_that_caller_only(sql: SQLBackend) -> None:
    driver = _driver(sql)
    await driver.fetch(
        SQL(
            """CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.key = 'poison' THEN RAISE EXCEPTION 'refused'; END IF;
                RETURN NEW;
            END $$""",
            (),
            {},
        ),
        (),
    )
    await driver.fetch(
        SQL(
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON memories "
            "FOR EACH ROW EXECUTE FUNCTION refuse_poison()",
            (),
            {},
        ),
        (),
    )
    writes = [("alice", "a", "one"), ("bob", "poison", "bad"), ("carol", "c", "three")]
    found, ran = await _stores_while_busy(sql, writes)
    assert ran[0] == sql._sql.upsert_plain_many
    assert isinstance(found[1], AsyncmemError)
    assert "refused" not in str(found[1])  # no server text in asyncmem's errors
    assert [found[0].value, found[2].value] == ["one", "three"]
    assert await sql.retrieve("bob", "poison") is None
    assert await sql.list_keys("bob") == []
    assert [await sql.list_keys(user) for user in ("alice", "carol")] == [["a"], ["c"]]


async def test_a_released_connection_goes_to_the_longest_waiting_caller(
    sql: SQLBackend,
) -> None:
    driver = _driver(sql)
    held = await _hold_every_connection(driver, 2)
    served: list[str] = []

    async def take(name: str) -> None:
        connection, _ = await driver._acquire()
        served.append(name)
        driver._release(connection, True)

    first = asyncio.ensure_future(take("first"))
    await _until_waiting(driver, 1)
    second = asyncio.ensure_future(take("second"))
    await _until_waiting(driver, 2)
    driver._release(held[0], True)
    await take("newcomer")  # asks in the very step the connection comes back
    await asyncio.gather(first, second)
    assert served == ["first", "second", "newcomer"]
    driver._release(held[1], True)
    assert len(driver._idle or ()) == 2
    assert not driver._waiters


async def test_a_caller_that_gives_up_waiting_takes_no_connection_with_it(
    sql: SQLBackend,
) -> None:
    driver = _driver(sql)
    held = await _hold_every_connection(driver, 2)
    driver._timeout = 0.05
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError):
        await sql.retrieve("alice", "k")
    assert time.monotonic() - started < 5
    assert not driver._waiters
    assert not driver._groups
    for connection in held:
        driver._release(connection, True)
    assert len(driver._idle or ()) == 2
    assert await sql.retrieve("alice", "k") is None


async def test_closing_answers_every_waiting_caller(sql: SQLBackend) -> None:
    driver = _driver(sql)
    await _hold_every_connection(driver, 2)
    calls = [asyncio.ensure_future(sql.retrieve("alice", f"k{i}")) for i in range(3)]
    calls.append(asyncio.ensure_future(sql.list_keys("alice")))
    await _until_waiting(driver, 2)
    await driver.close()
    found = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(error, BackendClosedError) for error in found), found


async def test_a_statement_aborted_to_break_a_deadlock_runs_once_more(sql: SQLBackend) -> None:
    driver = _driver(sql)
    # Aborted as a deadlock while the sequence is below ``n`` (nextval is not rolled back),
    # after a write that the abort rolls back.
    await driver.fetch(SQL("CREATE SEQUENCE tries", (), {}), ())
    await driver.fetch(
        SQL(
            """CREATE FUNCTION deadlocked(n bigint, k text) RETURNS bigint LANGUAGE plpgsql AS $$
            DECLARE try bigint := nextval('tries');
            BEGIN
                INSERT INTO asyncmem_settings (name, value) VALUES (k || try, 1);
                IF try < n THEN
                    RAISE EXCEPTION 'deadlock' USING ERRCODE = 'deadlock_detected';
                END IF;
                RETURN try;
            END $$""",
            (),
            {},
        ),
        (),
    )
    once = SQL("SELECT deadlocked($1, $2) AS try", ("n", "k"), {})
    assert [row["try"] for row in await driver.fetch(once, (2, "a"))] == [2]
    settings = SQL("SELECT name FROM asyncmem_settings WHERE name LIKE $1", ("like",), {})
    assert [row["name"] for row in await driver.fetch(settings, ("a%",))] == ["a2"]
    with pytest.raises(Exception, match="deadlock") as raised:
        await driver.fetch(once, (10, "b"))  # a second deadlock in a row is the caller's
    assert getattr(raised.value, "sqlstate", "") == "40P01"
    assert await driver.fetch(settings, ("b%",)) == []
    assert len(driver._idle or ()) == 2


async def test_a_group_whose_callers_all_gave_up_writes_nothing(sql: SQLBackend) -> None:
    driver = _driver(sql)
    ran = _record_statements(driver)
    held = await _hold_every_connection(driver, 2)
    calls = [asyncio.ensure_future(sql.store("alice", f"k{i}", "never")) for i in range(3)]
    await _until_waiting(driver, 1)
    for call in calls:
        call.cancel()
    for connection in held:
        driver._release(connection, True)
    found = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(error, asyncio.CancelledError) for error in found)
    while driver._leaders:
        await asyncio.gather(*driver._leaders)
    assert ran == []
    assert len(driver._idle or ()) == 2
    assert await sql.list_keys("alice") == []
