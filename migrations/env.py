"""Alembic environment for asyncmem: Alembic's async template, adapted.

Two ways in: the ``alembic`` command line (URL from ``-x url=...``, else ``ASYNCMEM_URL``,
else the embedded default file), or asyncmem itself, which hands over a connection in
``config.attributes["connection"]`` so migrations run inside an already running event loop
and inside the caller's transaction.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.engine import URL

from asyncmem.sql.engine import BEGIN_OPTION, normalize_url
from asyncmem.sql.migrate import migration_engine
from asyncmem.sql.models import Base

config = context.config
handed_connection: Connection | None = config.attributes.get("connection")

if config.config_file_name is not None and handed_connection is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def database_url() -> URL:
    given = context.get_x_argument(as_dictionary=True).get("url")
    given = given or os.environ.get("ASYNCMEM_URL") or config.get_main_option("sqlalchemy.url")
    return normalize_url(given or None)


def do_run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    url = database_url()
    async with migration_engine(url) as engine, engine.connect() as connection:
        if url.get_backend_name() == "sqlite":
            connection = await connection.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
        await connection.run_sync(do_run_migrations)


def run_migrations_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
elif handed_connection is not None:
    do_run_migrations(handed_connection)
else:
    asyncio.run(run_async_migrations())
