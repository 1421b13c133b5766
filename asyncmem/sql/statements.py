"""The SQL the store runs, built from the ORM model and compiled once per dialect. No I/O.

Each statement is a SQLAlchemy construct over :class:`~asyncmem.sql.models.Memory` with named
bind parameters, compiled with the async driver's dialect into its SQL text and the order of
its positional parameters (``SQLCompiler.positiontup``). The store hands that text straight to
the driver connection, one round trip a call, which is what keeps it near the speed of
hand-written SQL (DESIGN.md §6) while the ORM model stays the schema's single source.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Double,
    bindparam,
    cast,
    column,
    delete,
    func,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite as sqlite_aiosqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnClause, ColumnElement

from asyncmem.sql.models import FTS_TABLE, TSVECTOR_COLUMN, Memory

__all__ = ["ENTRY_COLUMNS", "SQL", "Statements", "compile_sql", "statements_for"]

ENTRY_COLUMNS = ("user_id", "key", "value", "metadata", "created_at", "updated_at")
"""The columns every entry-returning statement selects, in this order."""


@dataclass(frozen=True, slots=True)
class SQL:
    """A compiled statement: its text and how to order named values into driver arguments."""

    text: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]

    def args(self, **values: Any) -> tuple[Any, ...]:
        return tuple(values[name] if name in values else self.defaults[name] for name in self.names)


def compile_sql(statement: ClauseElement, dialect: Dialect) -> SQL:
    compiled = typing.cast(SQLCompiler, statement.compile(dialect=dialect))
    names = tuple(compiled.positiontup or ())
    defaults = {
        name: bind.value
        for name, bind in ((compiled.bind_names[b], b) for b in compiled.binds.values())
        if not bind.required and bind.value is not None
    }
    return SQL(str(compiled), names, defaults)


@dataclass(frozen=True, slots=True)
class Statements:
    upsert: SQL
    retrieve: SQL
    query: SQL
    list_keys: SQL
    delete: SQL
    forget_user: SQL
    ping: SQL


def _entry_columns() -> tuple[Any, ...]:
    return (
        Memory.user_id,
        Memory.key,
        Memory.value,
        Memory.metadata_,
        Memory.created_at,
        Memory.updated_at,
    )


def _upsert(dialect_name: str) -> ClauseElement:
    """Insert or replace one memory; returns its (created_at, updated_at).

    SQLite takes the time as the ``now`` parameter (read under the write lock). PostgreSQL
    reads the server's clock: an insert at the statement's start, an update after the row lock
    is granted, so of concurrent writers to one key the last to commit has the latest time.
    """
    inserted_at: ColumnElement[float]
    updated_at: ColumnElement[float]
    insert: Any
    if dialect_name == "postgresql":
        insert = postgresql.insert
        inserted_at = cast(func.extract("epoch", func.statement_timestamp()), Double)
        updated_at = cast(func.extract("epoch", func.clock_timestamp()), Double)
    else:
        insert = sqlite.insert
        inserted_at = updated_at = bindparam("now", type_=Double)
    statement = insert(Memory).values(
        user_id=bindparam("user_id"),
        key=bindparam("key"),
        value=bindparam("value"),
        metadata_=bindparam("metadata"),
        created_at=inserted_at,
        updated_at=inserted_at,
    )
    upsert: ClauseElement = statement.on_conflict_do_update(
        index_elements=[Memory.user_id, Memory.key],
        set_={
            Memory.value: statement.excluded.value,
            Memory.metadata_: statement.excluded["metadata"],
            Memory.updated_at: updated_at,
        },
    ).returning(Memory.created_at, Memory.updated_at)
    return upsert


def _query(dialect_name: str) -> ClauseElement:
    """Memories of one user matching a full-text expression, best first, with a score."""
    if dialect_name == "postgresql":
        vector: ColumnClause[Any] = literal_column(f"{Memory.__tablename__}.{TSVECTOR_COLUMN}")
        # A FROM item, so the query text is parsed once per statement, not once per row.
        tsquery = func.to_tsquery(
            literal_column("'english'::regconfig"), bindparam("match")
        ).column_valued("tsquery")
        score = func.ts_rank_cd(vector, tsquery).label("score")
        return (
            select(*_entry_columns(), score)
            .where(vector.bool_op("@@")(tsquery), Memory.user_id == bindparam("user_id"))
            .order_by(score.desc(), Memory.id)
            .limit(bindparam("limit"))
        )
    fts = table(FTS_TABLE, column("rowid"))
    match: ColumnClause[Any] = literal_column(FTS_TABLE)
    score = (-func.bm25(match)).label("score")
    return (
        select(*_entry_columns(), score)
        .select_from(fts.join(Memory, Memory.id == fts.c.rowid))
        .where(match.match(bindparam("match")), Memory.user_id == bindparam("user_id"))
        .order_by(score.desc(), Memory.id)
        .limit(bindparam("limit"))
    )


_DIALECTS: dict[str, Dialect] = {
    "sqlite": sqlite_aiosqlite.dialect(),
    "postgresql": pg_asyncpg.dialect(),  # type: ignore[no-untyped-call]
}


@functools.cache
def statements_for(dialect_name: str) -> Statements:
    """Every statement of the store, compiled for ``dialect_name`` (cached)."""
    dialect = _DIALECTS[dialect_name]
    user = Memory.user_id == bindparam("user_id")
    one = (user, Memory.key == bindparam("key"))

    def sql(statement: ClauseElement) -> SQL:
        return compile_sql(statement, dialect)

    return Statements(
        upsert=sql(_upsert(dialect_name)),
        retrieve=sql(select(*_entry_columns()).where(*one)),
        query=sql(_query(dialect_name)),
        list_keys=sql(
            select(Memory.key).where(user).order_by(Memory.updated_at.desc(), Memory.id.desc())
        ),
        delete=sql(delete(Memory).where(*one)),
        forget_user=sql(delete(Memory).where(user)),
        ping=sql(text("SELECT 1")),
    )
