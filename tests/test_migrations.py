"""Alembic owns the schema: upgrade, downgrade, drift, the command line and the wheel."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem import SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url

ROOT = Path(__file__).resolve().parent.parent


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        return {row[0] for row in rows}


async def _inspect(engine: AsyncEngine) -> dict[str, set[str]]:
    """Table name → column names, as the database reports them."""

    def read(connection: Connection) -> dict[str, set[str]]:
        inspector = inspect(connection)
        return {
            name: {column["name"] for column in inspector.get_columns(name)}
            for name in inspector.get_table_names()
            if not name.startswith("memories_fts_")
        }

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        await migrate.upgrade(engine)
        assert await migrate.current(engine) == (migrate.head_revision(),)
        tables = await _inspect(engine)
        assert {"memories", "alembic_version"} <= set(tables)
        assert {"search_terms", "search_users"} <= set(tables)
        assert {"words", "length"} <= tables["memories"]
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            await backend.store("alice", "pet", "a grey cat")
        await migrate.upgrade(engine)  # already at head: nothing changes
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            assert [hit.key for hit in await backend.query("alice", "cats")] == ["pet"]
        await migrate.downgrade(engine, "base")
        assert await migrate.current(engine) == ()
        assert set(await _inspect(engine)) <= {"alembic_version"}
        await migrate.upgrade(engine)
        async with SQLBackend(database_url, auto_migrate=False) as backend:
            assert await backend.list_keys("alice") == []
            await backend.store("alice", "pet", "a grey cat")
            assert [hit.key for hit in await backend.query("alice", "cat")] == ["pet"]
    finally:
        await engine.dispose()


async def test_models_and_migrations_do_not_drift(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        await migrate.upgrade(engine)

        def check(connection: Connection) -> None:
            command.check(migrate.alembic_config(connection))

        async with engine.connect() as conn:
            await conn.run_sync(check)
    finally:
        await engine.dispose()


async def test_concurrent_opens_migrate_once(database_url: str) -> None:
    backends = [SQLBackend(database_url, auto_migrate=True) for _ in range(6)]
    try:
        await asyncio.gather(*(backend.open() for backend in backends))
        await asyncio.gather(*(b.store("alice", f"k{i}", "v") for i, b in enumerate(backends)))
        assert len(await backends[0].list_keys("alice")) == len(backends)
    finally:
        await asyncio.gather(*(backend.aclose() for backend in backends))
    engine = make_engine(normalize_url(database_url))
    try:
        assert await migrate.current(engine) == (migrate.head_revision(),)
    finally:
        await engine.dispose()


def _alembic(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_alembic_command_line(database_url: str) -> None:
    engine = make_engine(normalize_url(database_url))
    try:
        upgraded = await asyncio.to_thread(_alembic, "-x", f"url={database_url}", "upgrade", "head")
        assert upgraded.returncode == 0, upgraded.stderr
        assert "memories" in await _inspect(engine)
        env = {"ASYNCMEM_URL": database_url}
        current = await asyncio.to_thread(_alembic, "current", env=env)
        assert current.returncode == 0, current.stderr
        assert migrate.head_revision() in current.stdout
        downgraded = await asyncio.to_thread(_alembic, "downgrade", "base", env=env)
        assert downgraded.returncode == 0, downgraded.stderr
        assert "memories" not in await _inspect(engine)
    finally:
        await engine.dispose()


@pytest.mark.slow
def test_installed_wheel_can_upgrade_a_database(tmp_path: Path) -> None:
    """A non-editable install carries the migrations and runs them."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("asyncmem-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "asyncmem/_migrations/env.py" in names
    assert any(n.startswith("asyncmem/_migrations/versions/0001") for n in names)
    assert "asyncmem/py.typed" in names
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    database = tmp_path / "memory.db"
    script = (
        "import asyncmem.sql.migrate as m, sys; print(m.migrations_dir());"
        "from asyncmem.cli import main; sys.exit(main(['db', 'upgrade', '--url', sys.argv[1]]))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{database}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0] == str(target / "asyncmem" / "_migrations")
    assert "memories" in _tables(database)


def test_head_names_the_newest_script() -> None:
    assert migrate.head_revision() == migrate.HEAD


def test_opening_a_store_at_head_does_not_import_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    program = (
        "import asyncio, sys\n"
        "from asyncmem import SQLBackend\n"
        "async def main():\n"
        f"    async with SQLBackend({url!r}) as backend:\n"
        "        await backend.store('u', 'k', 'v')\n"
        "asyncio.run(main())\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'alembic'))\n"
    )

    def run() -> str:
        done = subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout.strip()

    assert run() != "[]"  # creating the file migrates it, with Alembic
    assert run() == "[]"  # at head: one read of the version table, no Alembic
