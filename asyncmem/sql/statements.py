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
import operator
import typing
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Double,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
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
from sqlalchemy.sql.expression import ColumnElement

from asyncmem.sql import filters, search, terms
from asyncmem.sql.compiled import (
    COMPILED_FILE,
    IMPORT_FIELDS,
    PLAIN_MANY_FIELDS,
    SQL,
    Statements,
    as_json,
    compiled_for,
)
from asyncmem.sql.models import (
    Memory,
    MemoryVersion,
    SearchRecent,
    SearchTerm,
    SearchUser,
    Setting,
)

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


def _expired(at: ColumnElement[float], model: Any = Memory) -> ColumnElement[bool]:
    """The memory (or version) had expired by ``at`` (``IS NOT NULL`` spelled out, so the
    partial index of expiring memories serves it)."""
    return and_(model.expires_at.is_not(None), model.expires_at <= at)


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
    expired = _expired(updated_at)
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
            Memory.words: statement.excluded.words,
            Memory.length: statement.excluded.length,
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
        words=bindparam("words", type_=Text),
        length=bindparam("length", type_=Integer),
    )
    upsert: ClauseElement = _on_conflict(statement, updated_at, only_plain=only_plain).returning(
        Memory.created_at, Memory.updated_at, Memory.expires_at, Memory.id, Memory.session
    )
    return upsert


def _written_columns() -> list[Any]:
    """The columns an ``INSERT ... SELECT`` of many memories writes, in its select's order."""
    return [
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
        Memory.words,
        Memory.length,
    ]


def _upsert_batch(dialect_name: str) -> ClauseElement:
    """Insert or replace many memories of one user in one statement, like :func:`_upsert`.

    The ``items`` parameter is a JSON array of ``[key, value, metadata, ttl, session, facets,
    words, length]`` arrays (``context`` starts empty: the store fills it for turns), so the
    statement text is the same for any number of items: one statement, not ``executemany``,
    so a batch costs one statement's overhead.
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
            item.op("->>", return_type=Text)(literal_column("6")),
            cast(item.op("->>", return_type=Text)(literal_column("7")), Integer),
        ]
    else:
        source = func.json_each(bindparam("items", type_=String())).table_valued("value")
        source = source.alias("item")
        fields = [func.json_extract(source.c.value, literal_column(f"'$[{i}]'")) for i in range(8)]
    key, value, metadata, ttl, session, facets, words, length = fields
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
        words,
        length,
    ).where(true())
    statement = insert(Memory).from_select(
        _written_columns(),
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


def _upsert_plain_many() -> ClauseElement:
    """PostgreSQL: many callers' plain stores (``upsert_plain``, no session) of any users in
    one statement (see ``PostgresDriver.fetch_together``). ``items`` is a JSON array of
    :data:`PLAIN_MANY_FIELDS` arrays, the metadata a JSON object; rows are written in
    (user, key) order, so two such statements lock shared rows in the same order, and
    RETURNING names each row's user and key (an item that is a conversation turn returns
    none, as with ``upsert_plain``)."""
    inserted_at, updated_at, insert = _clock("postgresql")
    rows = func.jsonb_array_elements(cast(bindparam("items", type_=Text()), JSONB))
    item = type_coerce(rows.table_valued("value").alias("item").c.value, JSONB)

    def field(name: str) -> Any:
        return item.op("->>", return_type=Text)(literal_column(str(PLAIN_MANY_FIELDS.index(name))))

    metadata = item.op("->", return_type=JSONB)(
        literal_column(str(PLAIN_MANY_FIELDS.index("metadata")))
    )
    rows_select = select(
        field("user_id"),
        field("key"),
        field("value"),
        metadata,
        inserted_at,
        inserted_at,
        inserted_at + cast(field("ttl"), Double),
        null(),
        literal(""),
        field("facets"),
        field("words"),
        cast(field("length"), Integer),
    ).order_by(field("user_id"), field("key"))
    statement = insert(Memory).from_select(
        _written_columns(),
        rows_select,
    )
    upsert: ClauseElement = _on_conflict(statement, updated_at, only_plain=True).returning(
        Memory.user_id,
        Memory.key,
        Memory.created_at,
        Memory.updated_at,
        Memory.expires_at,
        Memory.id,
        Memory.session,
    )
    return upsert


def _query(dialect_name: str, where: filters.Shape = ()) -> ClauseElement:
    """Live memories of one user sharing index terms with a question (the ``terms``
    parameter) and matching the ``where`` filter, best first, with their BM25 score: the
    candidates of two-stage ranking (see :func:`~asyncmem.sql.search.rerank`).

    BM25 as FTS5's ``bm25()`` computes it, the same on both dialects, over the user's own
    postings (:class:`~asyncmem.sql.models.SearchTerm` and, on SQLite, the latest writes'
    :class:`~asyncmem.sql.models.SearchRecent`): a term's frequency is its weighted
    count in the memory (a memory's own words weigh most, its speaker and date words less,
    its neighbour turns' words least, see :mod:`asyncmem.sql.terms`), its document frequency
    the number of the user's memories holding it, and the number of documents and their
    average length are the user's (:class:`~asyncmem.sql.models.SearchUser`). Other users'
    memories change neither what is read nor the scores. ``terms`` is a JSON array on
    SQLite, a ``text[]`` on PostgreSQL.

    What it reads follows the user's matching postings: a term's document frequency is a
    count over its range of them, the scores one pass over them. Without a ``where`` filter
    only the ``limit`` best are read from ``memories``: expired memories are left out by the
    user's expiring ones (an index range, usually empty), not by reading every match's row.
    """
    postgresql = dialect_name == "postgresql"

    def number(value: float) -> ColumnElement[float]:
        return literal_column(repr(float(value)), Double())

    asked: Any
    if postgresql:
        terms_param = bindparam("terms", type_=ARRAY(Text()))
        asked = func.unnest(terms_param).table_valued("term").render_derived().alias("asked")
    else:
        listed = func.json_each(bindparam("terms", type_=String())).table_valued("value")
        asked = select(listed.c.value.label("term")).subquery("asked")
    statistics = (
        select(
            SearchUser.id.label("owner"),
            cast(SearchUser.documents, Double()).label("documents"),
            (cast(SearchUser.length, Double()) / cast(SearchUser.documents, Double())).label(
                "average"
            ),
        )
        .where(SearchUser.user_id == bindparam("user_id"))
        .cte("statistics")
    )
    stored = SearchTerm.__table__
    Match = Callable[[Any, Any], ColumnElement[bool]]
    sources: list[tuple[Any, Match]] = [
        (stored, lambda term, owner: and_(stored.c.owner == owner, stored.c.term == term))
    ]
    if not postgresql:
        # SQLite's write buffer (PostgreSQL writes no postings there), read once: it is
        # keyed memory first, so a range per term would scan all of the user's.
        recent = (
            select(
                SearchRecent.term, SearchRecent.memory_id, SearchRecent.weight, SearchRecent.length
            )
            .where(
                SearchRecent.owner == select(statistics.c.owner).scalar_subquery(),
                SearchRecent.term.in_(select(asked.c.term)),
            )
            .cte("recent")
        )
        sources.append((recent, lambda term, owner: recent.c.term == term))
    counts = [
        select(func.count()).select_from(source).where(on(asked.c.term, statistics.c.owner))
        for source, on in sources
    ]
    found = functools.reduce(operator.add, (c.scalar_subquery() for c in counts))

    def per_term(statement: Any, name: str) -> Any:
        """A CTE evaluated once per term: PostgreSQL inlines a CTE read once, and would
        count a term's postings once per posting."""
        cte = statement.cte(name)
        return cte.prefix_with("MATERIALIZED") if postgresql else cte

    counted = per_term(
        select(
            asked.c.term,
            statistics.c.owner,
            statistics.c.documents,
            statistics.c.average,
            cast(found, Double()).label("n"),
        ).select_from(asked.join(statistics, true())),
        "counted",
    )
    larger: Any = func.greatest if postgresql else func.max
    k1, b, half, one = number(search.BM25_K1), number(search.BM25_B), number(0.5), number(1)
    n = counted.c.n
    idf = larger(func.ln((counted.c.documents - n + half) / (n + half)), number(1e-6))
    frequencies = per_term(
        select(counted.c.term, counted.c.owner, idf.label("idf"), counted.c.average),
        "frequencies",
    )
    hits = union_all(
        *(
            select(
                frequencies.c.idf,
                frequencies.c.average,
                source.c.memory_id,
                source.c.weight,
                source.c.length,
            ).select_from(frequencies.join(source, on(frequencies.c.term, frequencies.c.owner)))
            for source, on in sources
        )
    ).subquery("hits")
    tf = cast(hits.c.weight, Double()) / number(terms.SCALE)
    norm = k1 * (one - b + b * cast(hits.c.length, Double()) / hits.c.average)
    score = func.sum(hits.c.idf * tf * (k1 + one) / (tf + norm)).label("score")
    # What the re-rank reads of each candidate's metadata (the full JSON is decoded only for
    # the memories returned).
    ranking = (
        Memory.session.label("session"),
        filters.text_at("speaker", dialect_name).label("speaker"),
        filters.text_at(search.CAPTION_KEY, dialect_name).label("caption"),
    )
    if where:
        scored = (
            select(hits.c.memory_id.label("id"), score)
            .group_by(hits.c.memory_id)
            .subquery("scored")
        )
        return (
            select(*_entry_columns(), scored.c.score, *ranking)
            .select_from(scored.join(Memory, Memory.id == scored.c.id))
            .where(_live(dialect_name), *filters.clauses(where, dialect_name))
            .order_by(scored.c.score.desc(), Memory.id)
            .limit(bindparam("limit"))
        )
    expired = select(Memory.id).where(
        Memory.user_id == bindparam("user_id"), _expired(_now(dialect_name))
    )
    ranked = (
        select(hits.c.memory_id.label("id"), score)
        .where(hits.c.memory_id.not_in(expired))
        .group_by(hits.c.memory_id)
        .order_by(score.desc(), hits.c.memory_id)
        .limit(bindparam("limit"))
        .subquery("ranked")
    )
    return (
        select(*_entry_columns(), ranked.c.score, *ranking)
        .select_from(ranked.join(Memory, Memory.id == ranked.c.id))
        .order_by(ranked.c.score.desc(), Memory.id)
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
    dialect_name: str, kind: str, where: filters.Shape, one_user: bool = True
) -> SQL:
    """A statement whose text depends on a ``where`` filter's shape, compiled once per shape.

    ``kind`` is ``"query"``, ``"list_keys"`` or ``"scan"``. The cache key holds operators and
    operand kinds only (see :func:`filters.shape_of`), never values, so it stays small.
    """
    dialect = _DIALECTS[dialect_name]
    if kind == "query":
        return compile_sql(_query(dialect_name, where), dialect)
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
    expired = _expired(cutoff)
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
            .where(expired, Memory.session.is_not(None))
            .order_by(Memory.user_id)
        ),
        purge_expired=sql(
            delete(Memory).where(expired, Memory.session.is_(None)).returning(Memory.id)
        ),
        purge_expired_turns=sql(
            delete(Memory)
            .where(expired, Memory.session.is_not(None))
            .returning(Memory.user_id, Memory.id, Memory.session)
        ),
        purge_expired_versions=sql(delete(MemoryVersion).where(_expired(cutoff, MemoryVersion))),
        set_setting=sql(
            setting.on_conflict_do_update(
                index_elements=[Setting.name], set_={Setting.value: setting.excluded.value}
            )
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
        append_turn=sql(_append_turn(reach)) if dialect_name == "postgresql" else None,
        retrieve_many=sql(_retrieve_many(live)) if dialect_name == "postgresql" else None,
        upsert_plain_many=sql(_upsert_plain_many()) if dialect_name == "postgresql" else None,
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
        merge_due=(
            sql(
                select(literal_column("1")).where(
                    SearchUser.user_id == bindparam("user_id"),
                    SearchUser.recent >= bindparam("most", type_=Integer),
                )
            )
            if dialect_name == "sqlite"
            else None
        ),
    )


def _retrieve_many(live: ColumnElement[bool]) -> ClauseElement:
    """PostgreSQL: ``retrieve`` for many calls at once (see ``PostgresDriver.fetch_together``):
    the calls' user ids and keys as two arrays, each row numbered by its call (``n``, from 1)."""
    asked = (
        func.unnest(bindparam("user_id", type_=ARRAY(Text)), bindparam("key", type_=ARRAY(Text)))
        .table_valued("user_id", "key", with_ordinality="n")
        .render_derived(name="asked")
    )
    found = and_(Memory.user_id == asked.c.user_id, Memory.key == asked.c.key)
    return select(asked.c.n, *_entry_columns()).join_from(asked, Memory, found).where(live)


def _append_turn(reach: int) -> ClauseElement:
    """PostgreSQL: a conversation's new last turn in one statement (revision 0008's function).

    ``tail_ids`` and ``tail_heads`` name the conversation's last ``reach`` turns, newest first,
    as the caller computed the contexts from (each value's first
    :data:`~asyncmem.sql.search.CONTEXT_CHARS` characters); ``neighbour_ids`` and
    ``neighbour_contexts`` are the contexts of earlier turns the new turn changes. No row:
    the last turns are others, nothing was written. ``appended`` false: the key is stored
    already, nothing was written. Otherwise the upsert's columns for the new row.
    """
    arguments = ", ".join(
        [
            "CAST(:user_id AS TEXT)",
            "CAST(:key AS TEXT)",
            "CAST(:value AS TEXT)",
            "CAST(:metadata AS JSONB)",
            "CAST(:ttl AS DOUBLE PRECISION)",
            "CAST(:session AS TEXT)",
            "CAST(:context AS TEXT)",
            "CAST(:facets AS TEXT)",
            "CAST(:words AS TEXT)",
            "CAST(:length AS INTEGER)",
            f"{reach}",
            f"{search.CONTEXT_CHARS}",
            "CAST(:tail_ids AS BIGINT[])",
            "CAST(:tail_heads AS TEXT[])",
            "CAST(:neighbour_ids AS BIGINT[])",
            "CAST(:neighbour_contexts AS TEXT[])",
        ]
    )
    return text(
        "SELECT turn.r_created_at AS created_at, turn.r_updated_at AS updated_at, "
        "turn.r_expires_at AS expires_at, turn.r_id AS id, turn.r_session AS session, "
        f"turn.r_appended AS appended FROM asyncmem_append_turn({arguments}) AS turn"
    ).columns(
        created_at=Double,
        updated_at=Double,
        expires_at=Double,
        id=BigInteger,
        session=Text,
        appended=Boolean,
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
            Memory.words: statement.excluded.words,
            Memory.length: statement.excluded.length,
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
