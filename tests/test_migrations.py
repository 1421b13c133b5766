"""Alembic owns the schema: upgrade, downgrade, drift, the command line and the wheel."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection

from asyncmem import SQLBackend
from asyncmem.sql import migrate
from asyncmem.sql.engine import make_engine, normalize_url

ROOT = Path(__file__).resolve().parent.parent


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        return {row[0] for row in rows}


async def test_upgrade_downgrade_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    engine = make_engine(normalize_url(f"sqlite:///{path}"), pooled=False)
    try:
        await migrate.upgrade(engine)
        assert await migrate.current(engine) == (migrate.head_revision(),)
        assert {"memories", "memories_fts", "alembic_version"} <= _tables(path)
        async with SQLBackend(f"sqlite:///{path}", auto_migrate=False) as backend:
            await backend.store("alice", "pet", "a grey cat")
        await migrate.upgrade(engine)  # already at head: nothing changes
        async with SQLBackend(f"sqlite:///{path}", auto_migrate=False) as backend:
            assert [hit.key for hit in await backend.query("alice", "cat")] == ["pet"]
        await migrate.downgrade(engine, "base")
        assert await migrate.current(engine) == ()
        assert _tables(path) <= {"alembic_version"}
        await migrate.upgrade(engine)
        async with SQLBackend(f"sqlite:///{path}", auto_migrate=False) as backend:
            assert await backend.list_keys("alice") == []
            await backend.store("alice", "pet", "a grey cat")
            assert [hit.key for hit in await backend.query("alice", "cat")] == ["pet"]
    finally:
        await engine.dispose()


async def test_models_and_migrations_do_not_drift(tmp_path: Path) -> None:
    engine = make_engine(normalize_url(f"sqlite:///{tmp_path / 'memory.db'}"), pooled=False)
    try:
        await migrate.upgrade(engine)

        def check(connection: Connection) -> None:
            command.check(migrate.alembic_config(connection))

        async with engine.connect() as conn:
            await conn.run_sync(check)
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


def test_alembic_command_line(tmp_path: Path) -> None:
    path = tmp_path / "cli.db"
    upgraded = _alembic("-x", f"url=sqlite:///{path}", "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    assert "memories" in _tables(path)
    current = _alembic("current", env={"ASYNCMEM_URL": f"sqlite:///{path}"})
    assert current.returncode == 0, current.stderr
    assert migrate.head_revision() in current.stdout
    downgraded = _alembic("downgrade", "base", env={"ASYNCMEM_URL": f"sqlite:///{path}"})
    assert downgraded.returncode == 0, downgraded.stderr
    assert "memories" not in _tables(path)


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
