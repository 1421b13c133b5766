"""per-user postings: one user's query reads and scores only that user's memories

Revision ID: 0006_user_postings
Revises: 0005_cjk_words
Create Date: 2026-12-02

Until now SQLite matched a question against one FTS5 index of every user's memories and kept
the user's rows afterwards, and FTS5's ``bm25()`` took document frequencies and lengths from
the whole table: a user's ranking moved when another user wrote, and a user's query cost grew
with everyone's matching memories (PostgreSQL's GIN index over the ``tsvector`` likewise).
Both dialects now keep the same index (issue 16):

- ``memories.words``: the memory's own index terms, JSON ``{term: weight in tenths}``, and
  ``memories.length``, its own word count, written by the store (``asyncmem.sql.terms``);
  ``memories.context`` now holds its neighbours' terms in the same JSON form.
- ``search_terms`` (owner, term, memory, weight, length): one row per term of a memory, keyed
  user first; ``search_users``: each user's number, document count and total length (BM25's
  statistics). Triggers on ``memories`` keep both exact in the statement that writes a memory.
- SQLite: a write's postings go to ``search_recent``, keyed memory first, so a commit writes a
  page or two instead of one per term; every ``MERGE_AFTER`` writes of a user a trigger moves
  the user's recent postings into ``search_terms`` in one ordered pass. PostgreSQL's trigger
  writes ``search_terms`` directly (its B-tree inserts log a record, not a page).

The FTS5 table and its triggers (SQLite) and the ``tsvector`` column and its GIN index
(PostgreSQL) are dropped. The upgrade computes ``words``, ``length`` and every turn's context
for the rows already there, with the functions the store writes with, so an upgraded database
reads exactly like a new one; the downgrade restores 0005's index and contexts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from alembic import op

from asyncmem.sql.search import neighbour_words
from asyncmem.sql.terms import index_columns, neighbour_contexts

revision: str = "0006_user_postings"
down_revision: str | Sequence[str] | None = "0005_cjk_words"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


MERGE_AFTER = 64
"""SQLite: a user's :class:`~asyncmem.sql.models.SearchRecent` postings move into
``search_terms`` after this many writes of the user."""


def _sqlite_size(row: str) -> str:
    """A row's BM25 length: its own words and its context's terms."""
    return f"({row}.length + (SELECT count(*) FROM json_each(nullif({row}.context, ''))))"


def _sqlite_owner(row: str) -> str:
    return f"(SELECT id FROM search_users WHERE user_id = {row}.user_id)"


def _sqlite_add(row: str) -> str:
    """The postings of ``row`` (``new``) into ``search_recent``; the user's row exists."""
    return f"""
        INSERT INTO search_recent (owner, memory_id, term, weight, length)
        SELECT {_sqlite_owner(row)}, {row}.id, term, sum(weight), {_sqlite_size(row)}
        FROM (
            SELECT key AS term, value AS weight FROM json_each(nullif({row}.words, ''))
            UNION ALL SELECT key, value FROM json_each(nullif({row}.context, ''))
        )
        GROUP BY term
        ORDER BY term;
    """


def _sqlite_remove(row: str) -> str:
    """Delete the postings of ``row`` (``old``) from both tables, each by the memory."""
    return f"""
        DELETE FROM search_terms WHERE memory_id = {row}.id;
        DELETE FROM search_recent
        WHERE owner = {_sqlite_owner(row)} AND memory_id = {row}.id;
    """


SQLITE_TRIGGERS = [
    f"""
    CREATE TRIGGER memories_search_insert AFTER INSERT ON memories BEGIN
        INSERT INTO search_users (user_id, documents, length, recent)
        VALUES (new.user_id, 1, {_sqlite_size("new")}, 1)
        ON CONFLICT (user_id) DO UPDATE
        SET documents = documents + 1, length = length + excluded.length, recent = recent + 1;
        {_sqlite_add("new")}
    END
    """,
    f"""
    CREATE TRIGGER memories_search_delete AFTER DELETE ON memories BEGIN
        {_sqlite_remove("old")}
        UPDATE search_users
        SET documents = documents - 1, length = length - {_sqlite_size("old")}
        WHERE user_id = old.user_id;
        DELETE FROM search_users WHERE user_id = old.user_id AND documents <= 0;
    END
    """,
    f"""
    CREATE TRIGGER memories_search_update AFTER UPDATE OF words, context, length ON memories
    BEGIN
        {_sqlite_remove("old")}
        UPDATE search_users
        SET length = length - {_sqlite_size("old")} + {_sqlite_size("new")}, recent = recent + 1
        WHERE user_id = new.user_id;
        {_sqlite_add("new")}
    END
    """,
    f"""
    CREATE TRIGGER search_users_merge AFTER UPDATE OF recent ON search_users
    WHEN new.recent >= {MERGE_AFTER} BEGIN
        INSERT INTO search_terms (owner, term, memory_id, weight, length)
        SELECT owner, term, memory_id, weight, length FROM search_recent
        WHERE owner = new.id ORDER BY term, memory_id;
        DELETE FROM search_recent WHERE owner = new.id;
        UPDATE search_users SET recent = 0 WHERE id = new.id;
    END
    """,
]

SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS search_users_merge",
    "DROP TRIGGER IF EXISTS memories_search_insert",
    "DROP TRIGGER IF EXISTS memories_search_delete",
    "DROP TRIGGER IF EXISTS memories_search_update",
]


def _pg_object(field: str) -> str:
    return f"coalesce(nullif({field}, ''), '{{}}')::jsonb"


POSTGRESQL_FUNCTION = f"""
    CREATE FUNCTION asyncmem_search_terms() RETURNS trigger LANGUAGE plpgsql AS $body$
    DECLARE
        owner_id bigint;
        remaining bigint;
        old_size bigint := 0;
        new_size bigint := 0;
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            old_size := OLD.length;
            IF OLD.context <> '' THEN
                old_size := old_size + (SELECT count(*) FROM jsonb_object_keys(OLD.context::jsonb));
            END IF;
            SELECT id INTO owner_id FROM search_users WHERE user_id = OLD.user_id;
            -- By the memory's own index: a generic plan for "owner and term in the old
            -- terms" read every posting of the user (0.8 ms a delete at 5,000 memories).
            DELETE FROM search_terms WHERE memory_id = OLD.id;
        END IF;
        IF TG_OP = 'DELETE' THEN
            UPDATE search_users
            SET documents = documents - 1, length = length - old_size WHERE id = owner_id
            RETURNING documents INTO remaining;
            IF remaining <= 0 THEN
                DELETE FROM search_users WHERE id = owner_id;
            END IF;
            RETURN NULL;
        END IF;
        new_size := NEW.length;
        IF NEW.context <> '' THEN
            new_size := new_size + (SELECT count(*) FROM jsonb_object_keys(NEW.context::jsonb));
        END IF;
        WITH person AS (
            INSERT INTO search_users AS u (user_id, documents, length)
            VALUES (NEW.user_id, CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE 0 END, new_size - old_size)
            ON CONFLICT (user_id) DO UPDATE
            SET documents = u.documents + excluded.documents, length = u.length + excluded.length
            RETURNING id
        )
        INSERT INTO search_terms (owner, term, memory_id, weight, length)
        SELECT person.id, entries.term, NEW.id, sum(entries.weight), new_size
        FROM person CROSS JOIN (
            SELECT key AS term, value::integer AS weight
            FROM jsonb_each_text({_pg_object("NEW.words")})
            UNION ALL SELECT key, value::integer
            FROM jsonb_each_text({_pg_object("NEW.context")})
        ) AS entries
        GROUP BY person.id, entries.term;
        RETURN NULL;
    END
    $body$
"""

POSTGRESQL_TRIGGER = """
    CREATE TRIGGER memories_search
    AFTER INSERT OR DELETE OR UPDATE OF words, context, length ON memories
    FOR EACH ROW EXECUTE FUNCTION asyncmem_search_terms()
"""

POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS memories_search ON memories",
    "DROP FUNCTION IF EXISTS asyncmem_search_terms()",
]

# 0005's full-text index, which the upgrade drops and the downgrade restores.
_FTS_COLUMNS = "key, value, context, facets"
SQLITE_FTS = [
    f"""
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        {_FTS_COLUMNS},
        content='memories', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts(rowid, key, value, context, facets)
        VALUES (new.id, new.key, new.value, new.context, new.facets);
    END
    """,
    """
    CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, key, value, context, facets)
        VALUES ('delete', old.id, old.key, old.value, old.context, old.facets);
    END
    """,
    f"""
    CREATE TRIGGER memories_fts_update AFTER UPDATE OF {_FTS_COLUMNS} ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, key, value, context, facets)
        VALUES ('delete', old.id, old.key, old.value, old.context, old.facets);
        INSERT INTO memories_fts(rowid, key, value, context, facets)
        VALUES (new.id, new.key, new.value, new.context, new.facets);
    END
    """,
]
SQLITE_FTS_DROP = [
    "DROP TRIGGER IF EXISTS memories_fts_insert",
    "DROP TRIGGER IF EXISTS memories_fts_delete",
    "DROP TRIGGER IF EXISTS memories_fts_update",
    "DROP TABLE IF EXISTS memories_fts",
]
POSTGRESQL_FTS = [
    """
    ALTER TABLE memories ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, left(key || ' ' || value, 262144)), 'A')
        || setweight(to_tsvector('english'::regconfig, left(facets, 4096)), 'B')
        || setweight(to_tsvector('english'::regconfig, left(context, 65536)), 'C')
    ) STORED
    """,
    "CREATE INDEX ix_memories_search_vector ON memories USING gin (search_vector)",
]
POSTGRESQL_FTS_DROP = [
    "DROP INDEX IF EXISTS ix_memories_search_vector",
    "ALTER TABLE memories DROP COLUMN IF EXISTS search_vector",
]

_BATCH = 5000
"""Rows read and rewritten at a time by the backfill."""


def _rewrite(connection: sa.Connection, *, terms: bool) -> None:
    """Every row's ``facets``, ``words``, ``length`` and context, as the store writes them
    (``terms``; the facets now hold a ``caption``'s words too), or 0005's word contexts (the
    downgrade, which keeps the facets: 0005's index reads them as they are)."""
    columns = "id, user_id, key, value, metadata, session, context"
    rows = connection.execute(
        sa.text(f"SELECT {columns} FROM memories ORDER BY user_id, session, id")
    ).all()
    updates: list[dict[str, Any]] = []
    for (_, session), group in groupby(rows, key=lambda row: (row.user_id, row.session)):
        turns = list(group)
        if session is None:
            contexts = [""] * len(turns)
        elif terms:
            contexts = neighbour_contexts([turn.value for turn in turns])
        else:
            contexts = neighbour_words([turn.value for turn in turns])
        for turn, context in zip(turns, contexts, strict=True):
            update: dict[str, Any] = {"id": turn.id, "context": context}
            if terms:
                metadata = turn.metadata
                if isinstance(metadata, str):
                    metadata = json.loads(metadata)
                update["facets"], update["words"], update["length"] = index_columns(
                    turn.key, turn.value, metadata if isinstance(metadata, dict) else {}
                )
            updates.append(update)
    assignments = "context = :context" + (
        ", facets = :facets, words = :words, length = :length" if terms else ""
    )
    statement = sa.text(f"UPDATE memories SET {assignments} WHERE id = :id")
    for start in range(0, len(updates), _BATCH):
        connection.execute(statement, updates[start : start + _BATCH])


def _fill(dialect: str) -> list[str]:
    """Index every memory in bulk: each user's statistics, then the postings of ``words``
    and of ``context`` in key order (a term in both adds up), from one size per memory."""

    def each(field: str) -> str:
        if dialect == "sqlite":
            return f"json_each(nullif(m.{field}, ''))"
        return f"jsonb_each_text({_pg_object(f'm.{field}')})"

    if dialect == "sqlite":
        size = _sqlite_size("m")
        weight = "e.value"
        conflict = "WHERE true ON CONFLICT DO UPDATE"
    else:
        size = f"m.length + (SELECT count(*) FROM jsonb_object_keys({_pg_object('m.context')}))"
        weight = "e.value::integer"
        conflict = "ON CONFLICT (owner, term, memory_id) DO UPDATE"
    postings = [
        f"""
        INSERT INTO search_terms (owner, term, memory_id, weight, length)
        SELECT s.owner, e.key, m.id, {weight}, s.size
        FROM memories m JOIN asyncmem_sizes s ON s.id = m.id
        CROSS JOIN {each(field)} AS e
        {"" if field == "words" else conflict}
        {"" if field == "words" else "SET weight = search_terms.weight + excluded.weight"}
        """
        for field in ("words", "context")
    ]
    return [
        f"""
        CREATE TEMPORARY TABLE asyncmem_sizes AS
        SELECT m.id AS id, m.user_id AS user_id, 0 AS owner, {size} AS size
        FROM memories m
        """,
        """
        INSERT INTO search_users (user_id, documents, length)
        SELECT user_id, count(*), sum(size) FROM asyncmem_sizes GROUP BY user_id
        """,
        """
        UPDATE asyncmem_sizes SET owner = (
            SELECT u.id FROM search_users u WHERE u.user_id = asyncmem_sizes.user_id
        )
        """,
        "CREATE UNIQUE INDEX asyncmem_sizes_id ON asyncmem_sizes (id)",
        *postings,
        "DROP TABLE asyncmem_sizes",
    ]


def upgrade() -> None:
    connection = op.get_bind()
    dialect = connection.dialect.name
    for statement in SQLITE_FTS_DROP if dialect == "sqlite" else POSTGRESQL_FTS_DROP:
        op.execute(statement)
    op.add_column("memories", sa.Column("words", sa.Text(), server_default="", nullable=False))
    op.add_column("memories", sa.Column("length", sa.Integer(), server_default="0", nullable=False))
    identifier = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "search_users",
        sa.Column("id", identifier, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("documents", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("recent", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_search_users")),
        sa.UniqueConstraint("user_id", name=op.f("uq_search_users_user_id")),
    )
    op.create_table(
        "search_recent",
        sa.Column("owner", identifier, nullable=False),
        sa.Column("memory_id", identifier, nullable=False),
        sa.Column("term", sa.Text(), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("owner", "memory_id", "term", name=op.f("pk_search_recent")),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "search_terms",
        sa.Column("owner", identifier, nullable=False),
        sa.Column("term", sa.Text(), nullable=False),
        sa.Column("memory_id", identifier, nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("owner", "term", "memory_id", name=op.f("pk_search_terms")),
        sqlite_with_rowid=False,
    )
    _rewrite(connection, terms=True)
    for statement in _fill(dialect):
        op.execute(statement)
    # After the fill: one ordered build instead of an insert per posting.
    op.create_index(op.f("ix_search_terms_memory_id"), "search_terms", ["memory_id"])
    if dialect == "sqlite":
        for statement in SQLITE_TRIGGERS:
            op.execute(statement)
    else:
        for statement in [POSTGRESQL_FUNCTION, POSTGRESQL_TRIGGER]:
            op.execute(statement)


def downgrade() -> None:
    connection = op.get_bind()
    dialect = connection.dialect.name
    for statement in SQLITE_DROP if dialect == "sqlite" else POSTGRESQL_DROP:
        op.execute(statement)
    op.drop_table("search_terms")
    op.drop_table("search_recent")
    op.drop_table("search_users")
    _rewrite(connection, terms=False)
    for name in ("length", "words"):
        if dialect == "sqlite":
            # Native DROP COLUMN (SQLite ≥ 3.35): a batch copy would drop the triggers.
            op.execute(f"ALTER TABLE memories DROP COLUMN {name}")
        else:
            op.drop_column("memories", name)
    for statement in SQLITE_FTS if dialect == "sqlite" else POSTGRESQL_FTS:
        op.execute(statement)
    if dialect == "sqlite":
        op.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
