"""conversation context: session, neighbour context and facets in the search index

Revision ID: 0003_context
Revises: 0002_features
Create Date: 2026-12-01

Adds ``session`` (``metadata.session`` as JSON text), ``context`` (the words of neighbour turns
of the same user and session) and ``facets`` (speaker and date words) to ``memories``, fills
them for the rows already there, and puts them in the search index as fields of their own.
SQLite: the FTS5 table is rebuilt over key, value, context, facets, with new triggers.
PostgreSQL: the generated ``tsvector`` becomes weighted: key and value 'A', facets 'B',
context 'C'.

Columns are added and dropped with plain ``ALTER TABLE`` (never a batch copy of ``memories``,
which would drop its triggers). The history trigger of 0002 now fires only on updates of the
memory's own columns, so the store rewriting a neighbour's ``context`` is not a new version.

The backfill uses ``asyncmem.sql.search`` (session_of, facets_of, neighbour_words), the same
functions the store writes with, so an upgraded database reads exactly like a new one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from asyncmem.sql.search import facets_of, neighbour_words, session_of

revision: str = "0003_context"
down_revision: str | Sequence[str] | None = "0002_features"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OWN_COLUMNS = "key, value, metadata, created_at, updated_at, expires_at"
"""The columns whose update makes a new version (not session, context or facets)."""
_VERSION_COLUMNS = "user_id, key, value, metadata, created_at, updated_at, expires_at"
_KEEP = "coalesce((SELECT value FROM asyncmem_settings WHERE name = 'max_versions'), 10) - 1"


def _sqlite_history(of: str) -> str:
    """0002's SQLite history trigger, firing on updates ``of`` (0002: any column)."""
    return f"""
    CREATE TRIGGER memories_history AFTER UPDATE {of} ON memories BEGIN
        DELETE FROM memory_versions
        WHERE user_id = old.user_id AND key = old.key
          AND old.expires_at IS NOT NULL AND old.expires_at <= new.updated_at;
        INSERT INTO memory_versions ({_VERSION_COLUMNS})
        SELECT old.user_id, old.key, old.value, old.metadata, old.created_at, old.updated_at,
               old.expires_at
        WHERE old.expires_at IS NULL OR old.expires_at > new.updated_at;
        DELETE FROM memory_versions
        WHERE user_id = old.user_id AND key = old.key AND id NOT IN (
            SELECT id FROM memory_versions
            WHERE user_id = old.user_id AND key = old.key
            ORDER BY id DESC LIMIT max({_KEEP}, 0)
        );
    END
    """


def _postgresql_history(of: str) -> str:
    return f"""
    CREATE TRIGGER memories_history AFTER UPDATE {of} ON memories
    FOR EACH ROW EXECUTE FUNCTION memories_keep_version()
    """


def _sqlite_fts(columns: list[str]) -> list[str]:
    """The FTS5 table over ``columns`` of ``memories``, its sync triggers, and a rebuild."""
    names = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    old = ", ".join(f"old.{c}" for c in columns)
    return [
        f"""
        CREATE VIRTUAL TABLE memories_fts USING fts5(
            {names},
            content='memories', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        )
        """,
        f"""
        CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
            INSERT INTO memories_fts(rowid, {names}) VALUES (new.id, {new});
        END
        """,
        f"""
        CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, {names})
            VALUES ('delete', old.id, {old});
        END
        """,
        f"""
        CREATE TRIGGER memories_fts_update AFTER UPDATE OF {names} ON memories BEGIN
            INSERT INTO memories_fts(memories_fts, rowid, {names})
            VALUES ('delete', old.id, {old});
            INSERT INTO memories_fts(rowid, {names}) VALUES (new.id, {new});
        END
        """,
        "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
    ]


SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS memories_fts_insert",
    "DROP TRIGGER IF EXISTS memories_fts_delete",
    "DROP TRIGGER IF EXISTS memories_fts_update",
    "DROP TABLE IF EXISTS memories_fts",
    "DROP TRIGGER IF EXISTS memories_history",
]

POSTGRESQL_DROP = [
    "DROP INDEX IF EXISTS ix_memories_search_vector",
    "ALTER TABLE memories DROP COLUMN IF EXISTS search_vector",
    "DROP TRIGGER IF EXISTS memories_history ON memories",
]

POSTGRESQL_FTS = """
    ALTER TABLE memories ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, left(key || ' ' || value, 262144)), 'A')
        || setweight(to_tsvector('english'::regconfig, left(facets, 4096)), 'B')
        || setweight(to_tsvector('english'::regconfig, left(context, 65536)), 'C')
    ) STORED
"""

POSTGRESQL_FTS_0001 = """
    ALTER TABLE memories ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (
        to_tsvector('english'::regconfig, left(key || ' ' || value, 262144))
    ) STORED
"""

POSTGRESQL_FTS_INDEX = (
    "CREATE INDEX ix_memories_search_vector ON memories USING gin (search_vector)"
)


def _backfill(connection: sa.Connection) -> None:
    """Session, facets and neighbour context for every row, as the store would write them."""
    rows = connection.execute(
        sa.text("SELECT id, user_id, value, metadata FROM memories ORDER BY user_id, id")
    ).all()
    conversations: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    updates: dict[int, dict[str, Any]] = {}
    for row in rows:
        metadata = json.loads(row.metadata) if isinstance(row.metadata, str) else row.metadata
        session = session_of(metadata or {})
        facets = facets_of(metadata or {})
        if session is None and not facets:
            continue
        updates[row.id] = {"id": row.id, "session": session, "facets": facets, "context": ""}
        if session is not None:
            conversations[row.user_id, session].append((row.id, row.value))
    for turns in conversations.values():
        # 0003's windows, as numbers: two turns before and two after (0004 changed them).
        contexts = neighbour_words([value for _, value in turns], before=2, after=2)
        for (row_id, _), context in zip(turns, contexts, strict=True):
            updates[row_id]["context"] = context
    if updates:
        connection.execute(
            sa.text(
                "UPDATE memories SET session = :session, facets = :facets, context = :context "
                "WHERE id = :id"
            ),
            list(updates.values()),
        )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_DROP, "postgresql": POSTGRESQL_DROP}.get(dialect, []):
        op.execute(statement)
    op.add_column("memories", sa.Column("session", sa.Text(), nullable=True))
    op.add_column("memories", sa.Column("context", sa.Text(), server_default="", nullable=False))
    op.add_column("memories", sa.Column("facets", sa.Text(), server_default="", nullable=False))
    op.create_index(
        op.f("ix_memories_user_id_session_id"),
        "memories",
        ["user_id", "session", "id"],
        sqlite_where=sa.text("session IS NOT NULL"),
        postgresql_where=sa.text("session IS NOT NULL"),
    )
    _backfill(op.get_bind())
    if dialect == "sqlite":
        for statement in _sqlite_fts(["key", "value", "context", "facets"]):
            op.execute(statement)
        op.execute(_sqlite_history(f"OF {_OWN_COLUMNS}"))
    elif dialect == "postgresql":
        op.execute(POSTGRESQL_FTS)
        op.execute(POSTGRESQL_FTS_INDEX)
        op.execute(_postgresql_history(f"OF {_OWN_COLUMNS}"))


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_DROP, "postgresql": POSTGRESQL_DROP}.get(dialect, []):
        op.execute(statement)
    op.drop_index(op.f("ix_memories_user_id_session_id"), table_name="memories")
    for name in ("facets", "context", "session"):
        if dialect == "sqlite":
            # Native DROP COLUMN (SQLite ≥ 3.35): a batch copy would drop the triggers.
            op.execute(f"ALTER TABLE memories DROP COLUMN {name}")
        else:
            op.drop_column("memories", name)
    if dialect == "sqlite":
        for statement in _sqlite_fts(["key", "value"]):
            op.execute(statement)
        op.execute(_sqlite_history(""))
    elif dialect == "postgresql":
        op.execute(POSTGRESQL_FTS_0001)
        op.execute(POSTGRESQL_FTS_INDEX)
        op.execute(_postgresql_history(""))
