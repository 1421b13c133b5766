"""What only the SQL store promises: files, persistence, schema checks, driver errors."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from asyncmem import (
    BackendError,
    BackendUnavailableError,
    InvalidInputError,
    SchemaError,
    SQLBackend,
    open_backend,
)
from asyncmem.sql.engine import default_path
from tests.backends import PG_ENABLED, PG_URL, pg_schema, sqlite_at_head


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


async def test_memories_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        stored = await backend.store("alice", "pet", "Alice has a grey cat", {"n": 1})
    async with SQLBackend(_url(path)) as backend:
        assert await backend.retrieve("alice", "pet") == stored
        assert [hit.key for hit in await backend.query("alice", "grey cat")] == ["pet"]


async def test_no_io_before_open(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "memory.db"
    backend = SQLBackend(_url(path))
    assert not path.parent.exists()
    await backend.aclose()
    assert not path.parent.exists()


async def test_default_file_is_private(tmp_path: Path) -> None:
    backend = open_backend()
    assert isinstance(backend, SQLBackend)
    assert backend.path == str(default_path())
    assert str(tmp_path) in backend.path  # the test's XDG_DATA_HOME, not the real one
    async with backend:
        await backend.store("alice", "k", "v")
    path = Path(backend.path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for sidecar in path.parent.glob("memory.db-*"):
        assert stat.S_IMODE(sidecar.stat().st_mode) & 0o077 == 0


def test_open_backend_reads_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert open_backend("null").backend_name == "null"
    monkeypatch.setenv("ASYNCMEM_URL", _url(tmp_path / "env.db"))
    chosen = open_backend()
    assert isinstance(chosen, SQLBackend)
    assert chosen.path == str(tmp_path / "env.db")
    monkeypatch.setenv("ASYNCMEM_BACKEND", "null")
    assert open_backend().backend_name == "null"
    with pytest.raises(InvalidInputError):
        open_backend("mongodb")
    with pytest.raises(InvalidInputError):
        open_backend("mysql://localhost/db")


def test_urls_are_normalised_and_passwords_hidden() -> None:
    backend = SQLBackend("postgresql://user:s3cret-pw@127.0.0.1:5432/db")
    assert backend.backend_name == "sql (postgresql)"
    assert backend.is_cloud is False
    assert "s3cret-pw" not in repr(backend)
    assert "s3cret-pw" not in backend.url
    assert backend.url.startswith("postgresql+asyncpg://")
    assert SQLBackend("postgresql://db.example.com/x").is_cloud is True
    assert SQLBackend("sqlite:///x.db").backend_name == "sql (sqlite)"


async def test_unreachable_database_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    backend = SQLBackend(_url(blocker / "memory.db"))
    assert await backend.is_available() is False
    with pytest.raises(BackendUnavailableError):
        await SQLBackend(_url(blocker / "memory.db")).store("alice", "k", "v")


async def test_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    garbage = b"this is not a database, but precious data " * 200
    path.write_bytes(garbage)
    with pytest.raises(BackendError) as raised:
        async with SQLBackend(_url(path)):
            pass
    assert "precious" not in str(raised.value)
    assert path.read_bytes() == garbage


async def test_locked_database_times_out_with_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(_url(path), busy_timeout=0.2) as backend:
        await backend.store("alice", "k", "before")
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(BackendUnavailableError) as raised:
                await backend.store("alice", "k", "secret value while locked")
            assert "secret value" not in str(raised.value)
            assert "lock" in str(raised.value)
            entry = await backend.retrieve("alice", "k")  # readers are not blocked (WAL)
            assert entry is not None
            assert entry.value == "before"
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await backend.store("alice", "k", "after")
        entry = await backend.retrieve("alice", "k")
        assert entry is not None
        assert entry.value == "after"


async def test_schema_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(_url(path)) as backend:
        await backend.store("alice", "k", "v")
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE alembic_version SET version_num = 'ffff_from_the_future'")
    for auto_migrate in (True, False):
        with pytest.raises(SchemaError, match="newer"):
            async with SQLBackend(_url(path), auto_migrate=auto_migrate):
                pass
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("ffff_from_the_future",)
        ]
        assert raw.execute("SELECT value FROM memories").fetchall() == [("v",)]


async def test_unmigrated_database_needs_auto_migrate(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with pytest.raises(SchemaError, match="db upgrade"):
        async with SQLBackend(_url(path), auto_migrate=False):
            pass
    async with SQLBackend(_url(path), auto_migrate=True) as backend:
        await backend.store("alice", "k", "v")
    async with SQLBackend(_url(path), auto_migrate=False) as backend:
        assert await backend.list_keys("alice") == ["k"]


def _writer_process(url: str, schema: str | None, worker: int, count: int) -> None:
    async def run() -> None:
        async with SQLBackend(url, schema=schema, busy_timeout=30) as backend:
            for i in range(count):
                await backend.store("shared", f"w{worker}-{i}", f"from worker {worker}")
                await backend.store("shared", "same-key", f"worker {worker} write {i}")
                await backend.query("shared", "worker")

    asyncio.run(run())


@pytest.fixture(params=["sqlite", *(["postgresql"] if PG_ENABLED else [])])
async def shared_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str | None]]:
    """A database that several processes open: (URL, PostgreSQL schema)."""
    if request.param == "sqlite":
        yield _url(tmp_path / "memory.db"), None
    else:
        async with pg_schema() as schema:
            yield PG_URL, schema


async def test_processes_share_one_store(shared_store: tuple[str, str | None]) -> None:
    url, schema = shared_store
    async with SQLBackend(url, schema=schema, auto_migrate=True) as backend:
        await backend.store("shared", "seed", "seed")
    workers, count = 4, 40
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_writer_process, args=(url, schema, w, count))
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        await asyncio.to_thread(process.join, 120)
    assert [process.exitcode for process in processes] == [0] * workers
    async with SQLBackend(url, schema=schema) as backend:
        keys = await backend.list_keys("shared")
        last = await backend.retrieve("shared", "same-key")
    expected = {f"w{w}-{i}" for w in range(workers) for i in range(count)} | {"seed", "same-key"}
    assert sorted(keys) == sorted(expected)
    assert last is not None
    assert last.value.endswith(f"write {count - 1}")


@pytest.mark.skipif(not PG_ENABLED, reason="PostgreSQL tests are switched off")
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://postgres:pw-s3cret@127.0.0.1:1/test", "cannot reach"),
        ("postgresql://postgres:pw-s3cret@127.0.0.1:5432/asyncmem_no_such_db", "does not exist"),
        ("postgresql://no_such_role:pw-s3cret@127.0.0.1:5432/test", "refused the credentials"),
    ],
)
async def test_postgresql_connection_failures_are_typed(url: str, message: str) -> None:
    backend = SQLBackend(url, timeout=5)
    assert await backend.is_available() is False
    with pytest.raises(BackendUnavailableError, match=message) as raised:
        await SQLBackend(url, timeout=5).store("alice", "k", "secret-value")
    assert "pw-s3cret" not in str(raised.value)
    assert "secret-value" not in str(raised.value)


def test_schema_option_is_validated() -> None:
    for bad in ["", "a b", 'x"; DROP SCHEMA public; --', "1abc", "x" * 64]:
        with pytest.raises(InvalidInputError):
            SQLBackend("postgresql://127.0.0.1/test", schema=bad)
    with pytest.raises(InvalidInputError):
        SQLBackend("sqlite:///memory.db", schema="main")
    assert SQLBackend("postgresql://127.0.0.1/test", schema="tenant_1").schema == "tenant_1"


@pytest.mark.skipif(not PG_ENABLED, reason="PostgreSQL tests are switched off")
async def test_postgresql_schema_is_not_created_without_auto_migrate() -> None:
    async with pg_schema() as schema:
        with pytest.raises(SchemaError, match="db upgrade"):
            async with SQLBackend(PG_URL, schema=schema):
                pass
        async with SQLBackend(PG_URL, schema=schema, auto_migrate=True) as backend:
            await backend.store("alice", "k", "v")
        async with SQLBackend(PG_URL, schema=schema) as backend:
            assert await backend.list_keys("alice") == ["k"]


def test_unknown_backend_spec_is_not_repeated() -> None:
    with pytest.raises(InvalidInputError) as raised:
        open_backend("postgresql:user:hunter2@db")
    assert "hunter2" not in str(raised.value)
    assert "sqlite:///" in str(raised.value)


async def test_the_last_write_is_the_newest_even_if_the_clock_read_earlier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that read the clock before another but won the lock after it stays newest."""
    async with SQLBackend(f"sqlite:///{tmp_path}/m.db") as backend:
        first = await backend.store("u", "k", "first")
        monkeypatch.setattr(backend, "_now", lambda: first.updated_at - 60.0)
        second = await backend.store("u", "k", "second")
        third = await backend.store_many("u", [{"key": "k", "value": "third"}])
        assert first.updated_at < second.updated_at < third[0].updated_at
        assert second.created_at == first.created_at
        current = await backend.retrieve("u", "k")
        assert current is not None
        assert (current.value, current.updated_at) == ("third", third[0].updated_at)


async def test_a_closed_store_leaves_one_whole_file(tmp_path: Path) -> None:
    # Closing every connection at once let each see another still open, so none checkpointed
    # and the memories stayed in the -wal file (9 closes in 200); copying the .db lost them.
    for attempt in range(40):
        path = tmp_path / f"memory-{attempt}.db"
        await sqlite_at_head(path)  # what is tested is the close, not a migration
        async with SQLBackend(_url(path)) as backend:
            await backend.store("bob", "pet", "a brown dog")
            assert await backend.query("bob", "dog")
        assert not Path(f"{path}-wal").exists()
        with sqlite3.connect(path) as copy:
            assert copy.execute("SELECT count(*) FROM memories").fetchone() == (1,)


async def test_stores_opening_a_new_file_together_all_open(tmp_path: Path) -> None:
    # Switching a new file to WAL fails at once (no busy wait) while another connection reads
    # it; six stores opening one new file together lost that race in 3 rounds of 40.
    for attempt in range(20):
        url = _url(tmp_path / f"new-{attempt}.db")
        backends = [SQLBackend(url) for _ in range(6)]
        try:
            await asyncio.gather(*(backend.open() for backend in backends))
        finally:
            await asyncio.gather(*(backend.aclose() for backend in backends))
