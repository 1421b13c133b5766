"""SQL-store specifics of filters, expiry, history and batches: nothing of a forgotten user
anywhere in the database, ``max_versions``, batches as one transaction, and the upgrade to
revision 0002 on real data."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import JSON, column, table, text
from sqlalchemy.dialects.postgresql import JSONB

from asyncmem import InvalidInputError, MemoryEntry, SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url
from tests.backends import PG_URL

SECRET_WORDS = ("qqzebra", "qqvalue", "qqsecond", "qqkey", "qqmeta", "forgotten-user")


async def _fill_secret_user(store: SQLBackend) -> None:
    for i in range(30):
        await store.store("bob", f"b{i}", f"bob plays the piano, piece {i}", {"n": i})
    await store.store("forgotten-user", "qqkey", "qqzebra qqvalue", {"qqmeta": "qqzebra"})
    await store.store("forgotten-user", "qqkey", "qqzebra qqsecond", {"qqmeta": 1})
    await store.store_many(
        "forgotten-user",
        [{"key": f"qqkey{i}", "value": f"qqzebra {i}", "ttl": 3600} for i in range(3)],
    )


def _sqlite_cells(path: Path) -> tuple[set[str], list[tuple[str, bytes]]]:
    """Every table, and every cell of every table (FTS shadow tables included) as bytes."""
    cells: list[tuple[str, bytes]] = []
    with sqlite3.connect(path) as raw:
        tables = [
            row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        for table in tables:
            for row in raw.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    data = cell if isinstance(cell, bytes) else str(cell).encode()
                    cells.append((table, data))
    return set(tables), cells


async def _postgres_rows(schema: str) -> list[tuple[str, str]]:
    import asyncpg

    connection = await asyncpg.connect(PG_URL.replace("+asyncpg", ""), timeout=10)
    try:
        tables = await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
        rows: list[tuple[str, str]] = []
        for (table,) in tables:
            found = await connection.fetch(f'SELECT t::text FROM "{schema}"."{table}" AS t')
            rows.extend((table, row[0]) for row in found)
        return rows
    finally:
        await connection.close()


async def test_forget_user_leaves_nothing_in_any_table(sql_store: SQLBackend) -> None:
    await _fill_secret_user(sql_store)
    assert await sql_store.forget_user("forgotten-user") == 4
    if sql_store.path is not None:
        tables, cells = _sqlite_cells(Path(sql_store.path))
        assert {"memories", "memory_versions", "search_terms", "search_users"} <= tables
        leaks = [(t, c) for t, c in cells for w in SECRET_WORDS if w.encode() in c]
    else:
        assert sql_store.schema is not None
        rows = await _postgres_rows(sql_store.schema)
        leaks = [(t, r) for t, r in rows for w in SECRET_WORDS if w in r]
        assert any(table == "memories" for table, _ in rows)
    assert leaks == []
    assert len(await sql_store.list_keys("bob")) == 30
    assert [hit.key for hit in await sql_store.query("bob", "piano piece 7")][:1] == ["b7"]


async def test_max_versions_is_a_store_option(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    async with SQLBackend(url, max_versions=3) as backend:
        for i in range(6):
            await backend.store("alice", "pet", f"v{i}")
        assert [e.value for e in await backend.history("alice", "pet")] == ["v5", "v4", "v3"]
    async with SQLBackend(url) as backend:  # None keeps what the database has
        await backend.store("alice", "pet", "v6")
        assert len(await backend.history("alice", "pet")) == 3
    async with SQLBackend(url, max_versions=1) as backend:
        await backend.store("alice", "pet", "v7")
        assert [e.value for e in await backend.history("alice", "pet")] == ["v7"]


@pytest.mark.parametrize("bad", [0, -1, 1001, True, 2.0, "3"])
def test_max_versions_is_checked(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="max_versions"):
        SQLBackend("sqlite:///x.db", max_versions=bad)


async def test_store_many_is_one_transaction_next_to_single_writes(
    sql_store: SQLBackend,
) -> None:
    """Single stores racing a batch neither land inside it nor are lost by it."""
    batch = [{"key": f"batch{i}", "value": f"v{i}"} for i in range(300)]
    singles = [sql_store.store("alice", f"single{i}", "v") for i in range(50)]
    results = await asyncio.gather(sql_store.store_many("alice", batch), *singles)
    assert len(results[0]) == 300
    assert len(await sql_store.list_keys("alice")) == 350


@pytest.mark.parametrize("chunk_text", [None, 60], ids=["one statement", "chunked"])
async def test_a_failing_batch_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_text: int | None
) -> None:
    """A database error in the middle of a batch rolls every item back, also when the batch
    is split into several statements of one transaction."""
    if chunk_text is not None:
        monkeypatch.setattr("asyncmem.sql.store._BATCH_TEXT", chunk_text)
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await backend.store("alice", "k0", "before")
        with sqlite3.connect(path) as raw:
            raw.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON memories WHEN new.key = 'k5' "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        items = [{"key": f"k{i}", "value": "after"} for i in range(10)]
        with pytest.raises(Exception, match="store_many failed") as raised:
            await backend.store_many("alice", items)
        assert "after" not in str(raised.value)
        assert await backend.list_keys("alice") == ["k0"]
        entry = await backend.retrieve("alice", "k0")
        assert entry is not None
        assert entry.value == "before"
        await backend.store("alice", "k1", "the writer still works")
        assert sorted(await backend.list_keys("alice")) == ["k0", "k1"]
        stored = await backend.store_many("alice", [i for i in items if i["key"] != "k5"])
        assert [e.key for e in stored] == [f"k{i}" for i in range(10) if i != 5]
        assert len(await backend.list_keys("alice")) == 9


# -- migration 0001 → 0002 on real data --------------------------------------------------


ROWS_0001 = [
    ("alice", "pet", "a grey cat called Miso", {"kind": "fact", "n": 1}),
    ("alice", "job", "night shifts as a nurse", {"kind": "fact", "n": 2}),
    ("bob", "car", "an old blue Volvo", {}),
]


async def test_upgrade_from_0001_keeps_data_and_downgrades(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        await migrate.upgrade(engine, "0001")
        memories_0001 = table(
            "memories",
            *(column(name) for name in ("user_id", "key", "value", "created_at", "updated_at")),
            column("metadata", JSON().with_variant(JSONB(), "postgresql")),
        )
        async with engine.begin() as conn:
            for i, (user, key, value, metadata) in enumerate(ROWS_0001):
                await conn.execute(
                    memories_0001.insert().values(
                        user_id=user,
                        key=key,
                        value=value,
                        metadata=metadata,
                        created_at=100.0 + i,
                        updated_at=100.0 + i,
                    )
                )
        await migrate.upgrade(engine)  # through 0002_features to the head the store needs
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            pet = await backend.retrieve("alice", "pet")
            assert pet is not None
            assert (pet.value, dict(pet.metadata), pet.created_at) == (
                "a grey cat called Miso",
                {"kind": "fact", "n": 1},
                100.0,
            )
            assert pet.expires_at is None
            assert [h.key for h in await backend.query("alice", "cat", where={"n": 1})] == ["pet"]
            assert await backend.list_keys("alice", where={"kind": "fact"}) == ["job", "pet"]
            await backend.store("alice", "pet", "a black cat", ttl=3600)
            assert [e.value for e in await backend.history("alice", "pet")] == [
                "a black cat",
                "a grey cat called Miso",
            ]
        await migrate.downgrade(engine, "0001")
        assert await migrate.current(engine) == ("0001",)
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT key, value FROM memories ORDER BY key"))).all()
            assert [tuple(r) for r in rows] == [
                ("car", "an old blue Volvo"),
                ("job", "night shifts as a nurse"),
                ("pet", "a black cat"),
            ]
            if engine.dialect.name == "sqlite":
                found = (
                    await conn.execute(
                        text("SELECT rowid FROM memories_fts WHERE memories_fts MATCH 'volvo'")
                    )
                ).all()
                assert len(found) == 1  # the 0001 search triggers survived the downgrade
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()


def test_db_purge_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from asyncmem.cli import main

    url = f"sqlite:///{tmp_path / 'memory.db'}"

    async def fill() -> float:
        async with SQLBackend(url) as backend:
            await backend.store("alice", "kept", "v")
            short = await backend.store("alice", "short", "v", ttl=0.2)
            assert short.expires_at is not None
            return short.expires_at

    expires_at = asyncio.run(fill())
    while time.time() <= expires_at:
        time.sleep(0.05)
    assert main(["db", "purge", "--url", url]) == 0
    assert "purged 1 expired memory from" in capsys.readouterr().out
    with sqlite3.connect(tmp_path / "memory.db") as raw:
        assert [row[0] for row in raw.execute("SELECT key FROM memories")] == ["kept"]


@pytest.mark.parametrize("setting", ["busy_timeout", "timeout"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 10**400, "5", True])
def test_bad_timeouts_are_invalid_input(setting: str, value: Any) -> None:
    with pytest.raises(InvalidInputError, match=setting):
        SQLBackend("sqlite:///unused.db", **{setting: value})


async def test_imported_timestamps_beyond_float_range_are_invalid_input(
    sql_store: SQLBackend,
) -> None:
    await sql_store.store("alice", "kept", "kept value")
    entry = MemoryEntry("alice", "kept", "replaced", {}, 10**400, 1.0)
    with pytest.raises(InvalidInputError, match="created_at"):
        await sql_store.import_entries([entry])
    kept = await sql_store.retrieve("alice", "kept")
    assert kept is not None
    assert kept.value == "kept value"
