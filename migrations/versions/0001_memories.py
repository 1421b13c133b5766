"""memories table with its full-text index

Revision ID: 0001
Revises:
Create Date: 2026-12-01

SQLite: an FTS5 table (porter stemming over unicode61 words) over key and value, with the
memories table as its external content, kept in sync by triggers.
PostgreSQL: a generated ``tsvector`` column (English stemming) with a GIN index.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_FTS = [
    """
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        key, value,
        content='memories', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts(rowid, key, value) VALUES (new.id, new.key, new.value);
    END
    """,
    """
    CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, key, value)
        VALUES ('delete', old.id, old.key, old.value);
    END
    """,
    """
    CREATE TRIGGER memories_fts_update AFTER UPDATE OF key, value ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, key, value)
        VALUES ('delete', old.id, old.key, old.value);
        INSERT INTO memories_fts(rowid, key, value) VALUES (new.id, new.key, new.value);
    END
    """,
]

POSTGRESQL_FTS = [
    """
    ALTER TABLE memories ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (
        to_tsvector('english'::regconfig, left(key || ' ' || value, 262144))
    ) STORED
    """,
    "CREATE INDEX ix_memories_search_vector ON memories USING gin (search_vector)",
]


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("user_id", sa.String(length=256), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memories")),
        sa.UniqueConstraint("user_id", "key", name=op.f("uq_memories_user_id_key")),
    )
    op.create_index(op.f("ix_memories_user_id_updated_at"), "memories", ["user_id", "updated_at"])
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_FTS, "postgresql": POSTGRESQL_FTS}.get(dialect, []):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS memories_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS memories_fts")
    op.drop_index(op.f("ix_memories_user_id_updated_at"), table_name="memories")
    op.drop_table("memories")
