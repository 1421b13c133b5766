"""The SQL the store runs, built from the ORM model and compiled once per dialect. No I/O.

Each statement is a SQLAlchemy construct over :class:`~asyncmem.sql.models.Memory` with named
bind parameters, compiled with the async driver's dialect into its SQL text and the order of
its positional parameters (``SQLCompiler.positiontup``). The store hands that text straight to
the driver connection, one round trip a call, which is what keeps it near the speed of
hand-written SQL (the SQLAlchemy execution layer alone costs more than an indexed lookup)
while the ORM model stays the schema's single source.
"""

from __future__ import annotations

import functools
import json
import typing
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Double,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    column,
    delete,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    table,
    text,
    true,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite as sqlite_aiosqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnClause, ColumnElement

from asyncmem.sql import filters, search
from asyncmem.sql.compiled import (
    COMPILED_FILE,
    IMPORT_FIELDS,
    SQL,
    Statements,
    as_json,
    compiled_for,
)
from asyncmem.sql.models import FTS_TABLE, TSVECTOR_COLUMN, Memory, MemoryVersion, Setting

__all__ = [
    "SQL",
    "Statements",
    "compile_sql",
    "filtered_statement",
    "statements_for",
]


def compile_sql(statement: ClauseElement, dialect: Dialect) -> SQL:
    compiled = typing.cast(SQLCompiler, statement.compile(dialect=dialect))
    names = tuple(compiled.positiontup or ())
    defaults = {
        name: bind.value
        for name, bind in ((compiled.bind_names[b], b) for b in compiled.binds.values())
        if not bind.required and bind.value is not None
    }
    exported = getattr(statement, "exported_columns", None)
    columns = tuple(str(c.key) for c in exported) if exported is not None else ()
    return SQL(str(compiled), names, defaults, columns)


def _entry_columns() -> tuple[Any, ...]:
    return (
        Memory.user_id,
        Memory.key,
        Memory.value,
        Memory.metadata_,
        Memory.created_at,
        Memory.updated_at,
        Memory.expires_at,
    )


def _now(dialect_name: str) -> ColumnElement[float]:
    """The time reads compare ``expires_at`` with: the server's clock on PostgreSQL (which
    also sets the timestamps there), the ``now`` parameter on SQLite."""
    if dialect_name == "postgresql":
        return cast(func.extract("epoch", func.statement_timestamp()), Double)
    return bindparam("now", type_=Double)


def _live(dialect_name: str, model: Any = Memory) -> ColumnElement[bool]:
    """The memory (or version) has not expired."""
    return or_(model.expires_at.is_(None), model.expires_at > _now(dialect_name))


def _keys_param(dialect_name: str) -> ColumnElement[bool]:
    """``key`` is one of the ``keys`` parameter: a ``text[]`` on PostgreSQL, a JSON array
    on SQLite (so the statement text does not depend on how many keys there are)."""
    if dialect_name == "postgresql":
        return Memory.key == func.any(bindparam("keys", type_=ARRAY(String())))
    listed = func.json_each(bindparam("keys", type_=String())).table_valued("value")
    return Memory.key.in_(select(listed.c.value))


def _clock(dialect_name: str) -> tuple[ColumnElement[float], ColumnElement[float], Any]:
    """(time of an insert, time of an update, the dialect's ``insert``)."""
    if dialect_name == "postgresql":
        return (
            cast(func.extract("epoch", func.statement_timestamp()), Double),
            cast(func.extract("epoch", func.clock_timestamp()), Double),
            postgresql.insert,
        )
    now = bindparam("now", type_=Double)
    return now, now, sqlite.insert


def _on_conflict(
    statement: Any, updated_at: ColumnElement[float], *, only_plain: bool = False
) -> Any:
    """Replace value and metadata, keep ``created_at`` unless the old memory had expired.

    ``session`` and ``context`` are left alone on purpose: RETURNING then gives the session
    the row had, so the store sees a turn that moved conversation and fixes both. With
    ``only_plain`` a row that is a conversation turn is left as it is and no row is returned:
    the store then redoes the write with the upkeep that turning a turn into a plain memory
    needs, in one transaction.
    """
    expired = and_(Memory.expires_at.is_not(None), Memory.expires_at <= updated_at)
    if isinstance(statement, sqlite.Insert):
        # SQLite's time is this process's clock, read before the write lock is won: another
        # writer may commit later with an earlier reading. The last to commit must still be
        # the newest, so a key's updated_at only ever grows. (PostgreSQL reads its clock
        # after it has locked the row.)
        updated_at = func.max(updated_at, Memory.updated_at + literal_column("1e-6", Double()))
    return statement.on_conflict_do_update(
        index_elements=[Memory.user_id, Memory.key],
        set_={
            Memory.value: statement.excluded.value,
            Memory.metadata_: statement.excluded["metadata"],
            Memory.created_at: case(
                (expired, statement.excluded.created_at), else_=Memory.created_at
            ),
            Memory.updated_at: updated_at,
            Memory.expires_at: statement.excluded.expires_at,
            Memory.facets: statement.excluded.facets,
        },
        where=Memory.session.is_(None) if only_plain else None,
    )


def _upsert(dialect_name: str, *, only_plain: bool = False) -> ClauseElement:
    """Insert or replace one memory; returns its (created_at, updated_at, expires_at).

    ``expires_at`` is the write's time plus the ``ttl`` parameter (``NULL`` without one).
    Storing over an expired memory starts it afresh: a new ``created_at`` (and the history
    trigger drops the expired memory's versions).

    SQLite takes the time as the ``now`` parameter (read under the write lock). PostgreSQL
    reads the server's clock: an insert at the statement's start, an update after the row lock
    is granted, so of concurrent writers to one key the last to commit has the latest time.
    """
    inserted_at, updated_at, insert = _clock(dialect_name)
    statement = insert(Memory).values(
        user_id=bindparam("user_id"),
        key=bindparam("key"),
        value=bindparam("value"),
        metadata_=bindparam("metadata"),
        created_at=inserted_at,
        updated_at=inserted_at,
        expires_at=inserted_at + bindparam("ttl", type_=Double),
        session=bindparam("session", type_=Text),
        context=bindparam("context", type_=Text),
        facets=bindparam("facets", type_=Text),
    )
    upsert: ClauseElement = _on_conflict(statement, updated_at, only_plain=only_plain).returning(
        Memory.created_at, Memory.updated_at, Memory.expires_at, Memory.id, Memory.session
    )
    return upsert


def _upsert_batch(dialect_name: str) -> ClauseElement:
    """Insert or replace many memories of one user in one statement, like :func:`_upsert`.

    The ``items`` parameter is a JSON array of ``[key, value, metadata, ttl, session, facets]``
    arrays (``context`` starts empty: the store fills it for turns), so the
    statement text is the same for any number of items. One statement, not ``executemany``,
    because SQLite flushes the FTS5 index at the end of every statement that writes it
    (through the sync trigger): per item, that was most of a batch's cost.
    """
    inserted_at, updated_at, insert = _clock(dialect_name)
    fields: list[Any]
    if dialect_name == "postgresql":
        rows = func.jsonb_array_elements(cast(bindparam("items", type_=Text()), JSONB))
        source: Any = rows.table_valued("value").alias("item")
        item = type_coerce(source.c.value, JSONB)
        fields = [
            item.op("->>", return_type=Text)(literal_column("0")),
            item.op("->>", return_type=Text)(literal_column("1")),
            item.op("->", return_type=JSONB)(literal_column("2")),
            cast(item.op("->>", return_type=Text)(literal_column("3")), Double),
            item.op("->>", return_type=Text)(literal_column("4")),
            item.op("->>", return_type=Text)(literal_column("5")),
        ]
    else:
        source = func.json_each(bindparam("items", type_=String())).table_valued("value")
        source = source.alias("item")
        fields = [func.json_extract(source.c.value, literal_column(f"'$[{i}]'")) for i in range(6)]
    key, value, metadata, ttl, session, facets = fields
    rows_select = select(
        bindparam("user_id", type_=String()),
        key,
        value,
        metadata,
        inserted_at,
        inserted_at,
        inserted_at + ttl,
        session,
        literal(""),
        facets,
    ).where(true())
    statement = insert(Memory).from_select(
        [
            Memory.user_id,
            Memory.key,
            Memory.value,
            Memory.metadata_,
            Memory.created_at,
            Memory.updated_at,
            Memory.expires_at,
            Memory.session,
            Memory.context,
            Memory.facets,
        ],
        rows_select,
    )
    upsert: ClauseElement = _on_conflict(statement, updated_at).returning(
        Memory.key,
        Memory.created_at,
        Memory.updated_at,
        Memory.expires_at,
        Memory.id,
        Memory.session,
    )
    return upsert


def _query(dialect_name: str, where: filters.Shape = (), terms: int = 0) -> ClauseElement:
    """Live memories of one user matching a full-text expression (and the ``where`` filter),
    best first, with a score: the candidates of two-stage ranking (see
    :func:`~asyncmem.sql.search.rerank`).

    A memory's own words weigh most, its speaker and date words less, its neighbour turns'
    words least (the weights are constants of :mod:`asyncmem.sql.search`). SQLite scores
    with FTS5's ``bm25()``; PostgreSQL computes the same BM25 formula (see :func:`_pg_bm25`)
    over ``terms`` per-word queries, since its own ``ts_rank`` has no inverse document
    frequency.
    """
    conditions = [_live(dialect_name), *filters.clauses(where, dialect_name)]
    if dialect_name == "postgresql":
        return _pg_bm25(conditions, terms)
    fts = table(FTS_TABLE, column("rowid"))
    match: ColumnClause[Any] = literal_column(FTS_TABLE)
    score = (
        -func.bm25(match, *(literal_column(repr(float(w))) for w in search.bm25_weights()))
    ).label("score")
    return (
        select(*_entry_columns(), score)
        .select_from(fts.join(Memory, Memory.id == fts.c.rowid))
        .where(match.match(bindparam("match")), Memory.user_id == bindparam("user_id"), *conditions)
        .order_by(score.desc(), Memory.id)
        .limit(bindparam("limit"))
    )


def _pg_bm25(conditions: list[ColumnElement[bool]], terms: int) -> ClauseElement:
    """BM25 on PostgreSQL, as FTS5's ``bm25()`` computes it, over one user's matching memories.

    For question word *i* (bind parameter ``term<i>``, a one-word ``to_tsquery`` text),
    ``ts_rank_cd`` of the word alone, with the field weights and no normalisation, is exactly
    the weighted count of its occurrences (each adds its field's weight): FTS5's phrase
    frequency. It is computed for the :data:`~asyncmem.sql.search.BM25_POOL` matching rows
    that ``ts_rank`` puts first; document frequencies and the average length come from that
    pool (window aggregates, frequencies scaled up to all matching rows), the number of
    documents from the user's memories (FTS5's statistics cover the whole table: with one
    user they agree); a row's length is its text's size in bytes (FTS5 counts tokens; the
    ratio to the average cancels the unit).
    ``ts_rank`` alone has no inverse document frequency, which cost PostgreSQL 0.09 frac@10
    on RealMem turns against SQLite (benchmarks/README.md).

    Cost: each row's vector is detoasted once (a lateral copy, or each of the ``terms``
    calls would fetch it again) and only the narrow scores go through the window; entries
    are joined back for the top ``limit``.
    """
    config: ColumnElement[Any] = literal_column("'english'::regconfig")
    vector: ColumnClause[Any] = literal_column(f"{Memory.__tablename__}.{TSVECTOR_COLUMN}")
    weights: ColumnElement[Any] = literal_column(search.ts_rank_weights())

    def number(value: float) -> ColumnElement[float]:
        return literal_column(repr(float(value)), Double())

    zero, integer_zero = number(0), literal_column("0", Integer())
    # FROM items, so each query text is parsed once per statement, not once per row.
    match = func.to_tsquery(config, bindparam("match")).column_valued("question")
    words = [
        func.to_tsquery(config, bindparam(f"term{i}")).column_valued(f"word{i}")
        for i in range(terms)
    ]
    loaded = (
        select(vector.op("||")(literal_column("''::tsvector")).label("vector"))
        .offset(literal_column("0"))
        .lateral("loaded")
    )
    size = (
        func.octet_length(Memory.key)
        + func.octet_length(Memory.value)
        + func.coalesce(func.octet_length(Memory.context), integer_zero)
        + func.coalesce(func.octet_length(Memory.facets), integer_zero)
    )
    counts = [
        case(
            (
                loaded.c.vector.bool_op("@@")(word),
                cast(func.ts_rank_cd(weights, loaded.c.vector, word, integer_zero), Double()),
            ),
            else_=zero,
        ).label(f"tf{i}")
        for i, word in enumerate(words)
    ]
    rough = func.ts_rank(weights, vector, match, literal_column("1", Integer()))
    pool = (
        select(Memory.id, func.count().over().label("matched"))
        .where(vector.bool_op("@@")(match), Memory.user_id == bindparam("user_id"), *conditions)
        .order_by(rough.desc(), Memory.id)
        .limit(literal_column(str(int(search.BM25_POOL)), Integer()))
        .subquery("pool")
    )
    hits = (
        select(pool.c.id, pool.c.matched, cast(size, Double()).label("size"), *counts)
        .select_from(pool.join(Memory, Memory.id == pool.c.id).join(loaded, true()))
        .subquery("hits")
    )
    documents = (
        select(func.count())
        .select_from(Memory)
        .where(Memory.user_id == bindparam("user_id"))
        .scalar_subquery()
    )
    # Document frequencies in the pool, scaled up to all the matching memories.
    scale = cast(hits.c.matched, Double()) / cast(func.count().over(), Double())
    stats = select(
        hits,
        cast(documents, Double()).label("documents"),
        cast(func.avg(hits.c.size).over(), Double()).label("average"),
        *(
            (cast(func.count().filter(hits.c[f"tf{i}"] > zero).over(), Double()) * scale).label(
                f"df{i}"
            )
            for i in range(terms)
        ),
    ).subquery("stats")
    k1, b, half, one = number(search.BM25_K1), number(search.BM25_B), number(0.5), number(1)
    norm = k1 * (one - b + b * stats.c.size / func.nullif(stats.c.average, zero, type_=Double()))
    score: ColumnElement[float] = zero
    for i in range(terms):
        df, tf = stats.c[f"df{i}"], stats.c[f"tf{i}"]
        idf = func.greatest(func.ln((stats.c.documents - df + half) / (df + half)), number(1e-6))
        score = score + case((tf > zero, idf * tf * (k1 + one) / (tf + norm)), else_=zero)
    labelled = score.label("score")
    top = (
        select(stats.c.id, labelled)
        .order_by(labelled.desc(), stats.c.id)
        .limit(bindparam("limit"))
        .subquery("top")
    )
    return (
        select(*_entry_columns(), top.c.score)
        .select_from(top.join(Memory, Memory.id == top.c.id))
        .order_by(top.c.score.desc(), top.c.id)
    )


def _list_keys(dialect_name: str, where: filters.Shape = ()) -> ClauseElement:
    """Keys of one user's live memories (matching ``where``), most recently updated first."""
    return (
        select(Memory.key)
        .where(
            Memory.user_id == bindparam("user_id"),
            _live(dialect_name),
            *filters.clauses(where, dialect_name),
        )
        .order_by(Memory.updated_at.desc(), Memory.id.desc())
        .limit(bindparam("limit"))
        .offset(bindparam("offset"))
    )


def _scan(dialect_name: str, where: filters.Shape, one_user: bool) -> ClauseElement:
    """One page of live memories after the ``after`` id, in id order (keyset pagination)."""
    conditions = [
        Memory.id > bindparam("after", type_=BigInteger),
        _live(dialect_name),
        *filters.clauses(where, dialect_name),
    ]
    if one_user:
        conditions.append(Memory.user_id == bindparam("user_id"))
    return (
        select(*_entry_columns(), Memory.id)
        .where(*conditions)
        .order_by(Memory.id)
        .limit(bindparam("limit"))
    )


def _history(dialect_name: str) -> ClauseElement:
    """A live memory and its kept versions, newest first."""
    one = (Memory.user_id == bindparam("user_id"), Memory.key == bindparam("key"))
    current = select(*_entry_columns(), literal(2**62, BigInteger).label("seq")).where(
        *one, _live(dialect_name)
    )
    versions = select(
        MemoryVersion.user_id,
        MemoryVersion.key,
        MemoryVersion.value,
        MemoryVersion.metadata_,
        MemoryVersion.created_at,
        MemoryVersion.updated_at,
        MemoryVersion.expires_at,
        MemoryVersion.id.label("seq"),
    ).where(
        MemoryVersion.user_id == bindparam("user_id"),
        MemoryVersion.key == bindparam("key"),
        _live(dialect_name, MemoryVersion),
        current.exists(),
    )
    both = union_all(current, versions).subquery()
    return (
        select(*(c for c in both.c if c.name != "seq"))
        .order_by(both.c.seq.desc())
        .limit(bindparam("limit"))
    )


_PG_CONVERSATION_LOCK = 0x616D6378
"""PostgreSQL: the advisory lock class ("amcx") of one user's conversation upkeep."""

_DIALECTS: dict[str, Dialect] = {
    "sqlite": sqlite_aiosqlite.dialect(),
    "postgresql": pg_asyncpg.dialect(),  # type: ignore[no-untyped-call]
}


@functools.lru_cache(maxsize=1024)
def filtered_statement(
    dialect_name: str, kind: str, where: filters.Shape, one_user: bool = True, terms: int = 0
) -> SQL:
    """A statement whose text depends on a ``where`` filter's shape, compiled once per shape.

    ``kind`` is ``"query"``, ``"list_keys"`` or ``"scan"``. The cache key holds operators and
    operand kinds only (see :func:`filters.shape_of`), never values, so it stays small; a
    PostgreSQL query's text also depends on how many words the question has (``terms``, at
    most :data:`~asyncmem.sql.search.MAX_TERMS`).
    """
    dialect = _DIALECTS[dialect_name]
    if kind == "query":
        return compile_sql(_query(dialect_name, where, terms), dialect)
    if kind == "list_keys":
        return compile_sql(_list_keys(dialect_name, where), dialect)
    return compile_sql(_scan(dialect_name, where, one_user), dialect)


@functools.cache
def statements_for(dialect_name: str) -> Statements:
    """Every fixed statement of the store, compiled for ``dialect_name`` (cached)."""
    dialect = _DIALECTS[dialect_name]
    user = Memory.user_id == bindparam("user_id")
    one = (user, Memory.key == bindparam("key"))
    live = _live(dialect_name)
    now = _now(dialect_name)
    # Deletes return (expires_at, now) and the caller compares them: SQLite 3.40 evaluates
    # an ``expires_at IS NULL`` in RETURNING wrongly on this table (plain columns are right).
    expiry = (Memory.expires_at, now.label("now"))
    removed = (*expiry, Memory.id, Memory.session)
    # Purging compares with one cutoff read at its start, so every statement of the purge
    # removes the same memories.
    cutoff = bindparam("cutoff", type_=Double)
    expired = (Memory.expires_at.is_not(None), Memory.expires_at <= cutoff)
    turn = (Memory.id, Memory.value, Memory.context)
    same = (user, Memory.session == bindparam("session", type_=Text))
    by_id = Memory.id == bindparam("id", type_=BigInteger)
    reach = search.CONTEXT_BEFORE + search.CONTEXT_AFTER

    def sql(statement: ClauseElement) -> SQL:
        return compile_sql(statement, dialect)

    insert: Any = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    setting = insert(Setting).values(name=bindparam("name"), value=bindparam("value"))
    return Statements(
        upsert=sql(_upsert(dialect_name)),
        upsert_plain=sql(_upsert(dialect_name, only_plain=True)),
        upsert_many=sql(_upsert_batch(dialect_name)),
        retrieve=sql(select(*_entry_columns()).where(*one, live)),
        query=filtered_statement(dialect_name, "query", ()),
        list_keys=filtered_statement(dialect_name, "list_keys", ()),
        delete=sql(delete(Memory).where(*one).returning(*removed)),
        delete_plain=sql(delete(Memory).where(*one, Memory.session.is_(None)).returning(*removed)),
        delete_many=sql(delete(Memory).where(user, _keys_param(dialect_name)).returning(*removed)),
        forget_user=sql(delete(Memory).where(user).returning(*expiry)),
        history=sql(_history(dialect_name)),
        clock=sql(select(now.label("now"))),
        expired_turn_users=sql(
            select(Memory.user_id)
            .distinct()
            .where(*expired, Memory.session.is_not(None))
            .order_by(Memory.user_id)
        ),
        purge_expired=sql(
            delete(Memory).where(*expired, Memory.session.is_(None)).returning(Memory.id)
        ),
        purge_expired_turns=sql(
            delete(Memory)
            .where(*expired, Memory.session.is_not(None))
            .returning(Memory.user_id, Memory.id, Memory.session)
        ),
        purge_expired_versions=sql(
            delete(MemoryVersion).where(
                MemoryVersion.expires_at.is_not(None), MemoryVersion.expires_at <= cutoff
            )
        ),
        set_setting=sql(
            setting.on_conflict_do_update(
                index_elements=[Setting.name], set_={Setting.value: setting.excluded.value}
            )
        ),
        fts_optimize=sql(
            text(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')")
            if dialect_name == "sqlite"
            else text("SELECT 1")
        ),
        ping=sql(text("SELECT 1")),
        revision=sql(text("SELECT version_num FROM alembic_version")),
        turns_tail=sql(select(*turn).where(*same).order_by(Memory.id.desc()).limit(reach)),
        turns_before=sql(
            select(*turn)
            .where(*same, Memory.id < bindparam("around", type_=BigInteger))
            .order_by(Memory.id.desc())
            .limit(reach)
        ),
        turns_from=sql(
            select(*turn)
            .where(*same, Memory.id >= bindparam("around", type_=BigInteger))
            .order_by(Memory.id)
            .limit(reach + 1)
        ),
        turns_all=sql(select(*turn).where(*same).order_by(Memory.id)),
        set_context=sql(
            update(Memory).where(by_id).values(context=bindparam("context", type_=Text))
        ),
        set_session=sql(
            update(Memory)
            .where(by_id)
            .values(session=bindparam("new_session", type_=Text), context="")
        ),
        clear_session=sql(
            update(Memory)
            .where(by_id, Memory.session == bindparam("session", type_=Text))
            .values(session=null(), context="")
        ),
        lock_user=(
            sql(
                select(
                    func.pg_advisory_xact_lock(
                        literal_column(str(_PG_CONVERSATION_LOCK)),
                        func.hashtext(bindparam("user_id", type_=Text)),
                    )
                )
            )
            if dialect_name == "postgresql"
            else None
        ),
    )


@functools.lru_cache(maxsize=8)
def import_statement(dialect_name: str, count: int) -> SQL:
    """One statement upserting ``count`` memories with the timestamps given, in that order.

    Like every upsert it leaves ``session`` and ``context`` of an existing row alone and
    returns the session the row had (see ``_on_conflict`` in :mod:`asyncmem.sql.statements`).
    """
    values: list[dict[str, Any]] = [
        {name: bindparam(f"{name}_{n}") for name in IMPORT_FIELDS} for n in range(count)
    ]
    insert = (sqlite.insert if dialect_name == "sqlite" else postgresql.insert)(Memory)
    statement = insert.values(values)
    upsert = statement.on_conflict_do_update(
        index_elements=[Memory.user_id, Memory.key],
        set_={
            Memory.value: statement.excluded.value,
            Memory.metadata_: statement.excluded["metadata"],
            Memory.created_at: statement.excluded.created_at,
            Memory.updated_at: statement.excluded.updated_at,
            Memory.expires_at: statement.excluded.expires_at,
            Memory.facets: statement.excluded.facets,
        },
    ).returning(Memory.user_id, Memory.key, Memory.id, Memory.session)
    return compile_sql(upsert, _DIALECTS[dialect_name])


def write_compiled() -> None:
    """Write :data:`~asyncmem.sql.compiled.COMPILED_FILE` from a fresh compilation."""
    data: dict[str, Any] = {name: as_json(statements_for(name)) for name in sorted(_DIALECTS)}
    data["compiled_for"] = compiled_for()
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    COMPILED_FILE.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write_compiled()
