"""Alembic, driven from inside the running event loop.

The store calls :func:`ensure_schema` when it opens: it compares the database's revision with
the newest one shipped and upgrades, or raises :class:`~asyncmem.errors.SchemaError`. The CLI's
``asyncmem db`` commands and ``migrations/env.py`` get their engine from
:func:`migration_engine` and use :func:`upgrade`, :func:`downgrade`, :func:`current` and
:func:`check`.
"""

from __future__ import annotations

import asyncio
import functools
import io
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, inspect, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from asyncmem.errors import SchemaError
from asyncmem.sql.compiled import HEAD
from asyncmem.sql.engine import BEGIN_OPTION, make_engine, prepare_sqlite_file, sqlite_path

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD",
    "alembic_config",
    "check",
    "current",
    "downgrade",
    "ensure_schema",
    "head_revision",
    "migration_engine",
    "migrations_dir",
    "upgrade",
]

_PG_LOCK_KEY = 0x6173796E636D656D  # "asyncmem": serialises concurrent migrations on PostgreSQL


def migrations_dir() -> Path:
    """Where the migration scripts are: inside the installed wheel, or the source checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise SchemaError("asyncmem's migration scripts are missing from this installation")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for the shipped migrations, optionally bound to ``connection``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def _shipped() -> tuple[str, frozenset[str]]:
    """The newest shipped revision and all shipped revisions (read from disk once)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    if head is None:  # pragma: no cover - the package always ships revisions
        raise SchemaError("asyncmem ships no migrations")
    return head, frozenset(rev.revision for rev in script.walk_revisions())


def head_revision() -> str:
    """The newest revision among the shipped migration scripts."""
    return _shipped()[0]


@asynccontextmanager
async def migration_engine(
    url: URL,
    *,
    create: bool = True,
    operation: str = "migrate",
    busy_timeout: float = 5.0,
    server_timeout: float = 30.0,
    schema: str | None = None,
    allow_shared_file: bool = False,
) -> AsyncIterator[AsyncEngine]:
    """An engine for work on the schema of ``url``, disposed when the block ends.

    A SQLite file is made ready first: its directory (0700) and the file (0600) are created
    if missing and it is put in WAL mode, as the store does. With ``create=False`` a missing
    file is a :class:`SchemaError` instead, so that only asking about a database never
    creates one. Driver errors inside the block (a file that is not a database, a server
    that cannot be reached) come out as asyncmem's typed errors naming ``operation``.
    ``busy_timeout`` (SQLite) and ``server_timeout`` (PostgreSQL: connecting) are seconds,
    as for :func:`~asyncmem.sql.engine.make_engine`; a statement has no time limit, since a
    revision may rebuild the search index of every memory (revision 0006);
    ``allow_shared_file`` as for :func:`~asyncmem.sql.engine.prepare_sqlite_file`.
    """
    from asyncmem.sql.drivers import translate_errors

    with translate_errors(operation):
        path = sqlite_path(url)
        if path is not None:
            if not create and not path.exists():
                raise SchemaError(
                    f"there is no database at {path}; `asyncmem db upgrade` makes one"
                )
            await asyncio.to_thread(
                prepare_sqlite_file, path, busy_timeout, allow_shared_file=allow_shared_file
            )
            url = url.set(database=str(path))  # "~" expanded, as the store opens it
        engine = make_engine(
            url,
            busy_timeout=busy_timeout,
            timeout=server_timeout,
            schema=schema,
            statement_timeout=None,
        )
        try:
            yield engine
        finally:
            await engine.dispose()


def _current(connection: Connection) -> tuple[str, ...]:
    """The revisions in Alembic's version table (read with plain SQL: no Alembic import)."""
    if not inspect(connection).has_table("alembic_version"):
        return ()
    rows = connection.execute(text("SELECT version_num FROM alembic_version"))
    return tuple(sorted(row[0] for row in rows))


def _check_and_upgrade(connection: Connection, auto_migrate: bool) -> None:
    head, known = _shipped()
    revisions = _current(connection)
    if revisions == (head,):
        return
    unknown = [rev for rev in revisions if rev not in known]
    if unknown:
        raise SchemaError(
            f"the database's schema revision {unknown[0]} is newer than this asyncmem "
            f"(newest known: {head}); upgrade asyncmem, never downgrade the database with it"
        )
    if not auto_migrate:
        at = revisions[0] if revisions else "no schema"
        raise SchemaError(
            f"the database is at {at} and this asyncmem needs {head}: run "
            "`asyncmem db upgrade` (or `alembic upgrade head`), or open with auto_migrate=True"
        )
    from alembic import command

    command.upgrade(alembic_config(connection), "head")


async def _in_migration_transaction(
    engine: AsyncEngine, fn: Any, *args: Any, create_schema: str | None = None
) -> Any:
    """Run ``fn(sync_connection, *args)`` holding the database's migration lock.

    SQLite: the write lock (``BEGIN IMMEDIATE``). PostgreSQL: a transaction-scoped advisory
    lock, so processes opening the same database at once migrate it exactly once.
    """
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn = await conn.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
        async with conn.begin():
            if engine.dialect.name == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY}
                )
                if create_schema is not None:
                    quoted = engine.dialect.identifier_preparer.quote_identifier(create_schema)
                    await conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {quoted}"))
            return await conn.run_sync(fn, *args)


async def ensure_schema(
    engine: AsyncEngine, *, auto_migrate: bool, schema: str | None = None
) -> None:
    """Bring the schema to head, or raise :class:`SchemaError` if that is not allowed.

    A database already at head costs one read and takes no lock. Otherwise the check is
    repeated under the migration lock before anything changes. With ``auto_migrate`` and a
    PostgreSQL ``schema``, the schema is created if missing.
    """
    if await current(engine) == (HEAD,):
        return
    await _in_migration_transaction(
        engine,
        _check_and_upgrade,
        auto_migrate,
        create_schema=schema if auto_migrate else None,
    )


@contextmanager
def _command_errors() -> Iterator[None]:
    """Alembic's refusals (an unknown revision, say) as :class:`SchemaError`."""
    from alembic.util.exc import CommandError

    try:
        yield
    except CommandError as exc:
        raise SchemaError(str(exc)) from exc


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the schema to ``revision`` under the migration lock."""

    def run(connection: Connection) -> None:
        from alembic import command

        with _command_errors():
            command.upgrade(alembic_config(connection), revision)

    await _in_migration_transaction(engine, run)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Downgrade the schema to ``revision`` (``"base"``: nothing left) under the migration lock."""

    def run(connection: Connection) -> None:
        from alembic import command

        with _command_errors():
            command.downgrade(alembic_config(connection), revision)

    await _in_migration_transaction(engine, run)


async def current(engine: AsyncEngine) -> tuple[str, ...]:
    """The database's revisions (empty for a database alembic has never touched)."""
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn = await conn.execution_options(**{BEGIN_OPTION: None})
        revisions: tuple[str, ...] = await conn.run_sync(_current)
        return revisions


async def check(engine: AsyncEngine) -> None:
    """Raise :class:`SchemaError` when the database is not at head or differs from the models.

    Alembic's ``check`` command: autogenerate against the database and fail on any difference.
    A database behind head (or with no schema at all) is reported first, with the command
    that brings it up to date.
    """
    revisions = await current(engine)
    head = head_revision()
    if revisions != (head,):
        at = f"is at {', '.join(revisions)}" if revisions else "has no schema yet"
        raise SchemaError(
            f"the database is not up to date: it {at} and this asyncmem needs {head}; "
            "run `asyncmem db upgrade`"
        )

    def run(connection: Connection) -> None:
        from alembic import command
        from alembic.util.exc import AutogenerateDiffsDetected, CommandError

        config = alembic_config(connection)
        config.stdout = io.StringIO()
        try:
            command.check(config)
        except AutogenerateDiffsDetected as exc:
            raise SchemaError(f"the schema differs from asyncmem's models: {exc}") from exc
        except CommandError as exc:
            raise SchemaError(str(exc)) from exc

    async with engine.connect() as conn:
        await conn.run_sync(run)
