from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from asyncmem import MemoryBackend, SQLBackend
from tests import templates
from tests.backends import BACKEND_FACTORIES, NON_PERSISTENT, PG_ENABLED, PG_URL, SQL, pg_database

ALL_BACKENDS = sorted(BACKEND_FACTORIES)
PERSISTENT_BACKENDS = [name for name in ALL_BACKENDS if name not in NON_PERSISTENT]
SQL_BACKENDS = [name for name in ALL_BACKENDS if name in SQL]


@pytest.fixture(scope="session", autouse=True)
def _templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Migrate once per session: the backends' stores start as copies (tests/templates.py)."""
    with templates.session(tmp_path_factory.mktemp("templates"), PG_URL if PG_ENABLED else None):
        yield


@pytest.fixture(autouse=True)
def _scrub_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads the developer's configuration or touches their real memory file."""
    import os

    for name in list(os.environ):
        if name.startswith(("ASYNCMEM_", "HONCHO_")) and not name.startswith("ASYNCMEM_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))


@pytest.fixture(params=ALL_BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    """Every backend, the null one included."""
    async with BACKEND_FACTORIES[request.param](tmp_path) as opened:
        yield opened


@pytest.fixture(params=PERSISTENT_BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    """Every backend that keeps what it is given."""
    async with BACKEND_FACTORIES[request.param](tmp_path) as opened:
        yield opened


@pytest.fixture(params=SQL_BACKENDS)
async def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SQLBackend]:
    """The SQL store on every dialect the suite runs."""
    async with BACKEND_FACTORIES[request.param](tmp_path) as opened:
        assert isinstance(opened, SQLBackend)
        yield opened


@pytest.fixture(params=SQL_BACKENDS)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database: a new SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'memory.db'}"
    else:
        async with pg_database() as url:
            yield url
