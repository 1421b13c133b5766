"""expiry, version history and store settings

Revision ID: 0002_features
Revises: 0001
Create Date: 2026-12-01

``memories.expires_at`` (indexed, for ``purge_expired``); ``memory_versions`` with the
previous values of memories; ``asyncmem_settings`` with ``max_versions``. Triggers keep the
history, so ``store`` and ``delete`` stay one statement: storing over a live memory copies the
old row into ``memory_versions`` and prunes that key's versions to ``max_versions - 1``;
storing over an expired one drops its versions instead; deleting a memory deletes its versions.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002_features"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = "user_id, key, value, metadata, created_at, updated_at, expires_at"
_KEEP = "coalesce((SELECT value FROM asyncmem_settings WHERE name = 'max_versions'), 10) - 1"

SQLITE_TRIGGERS = [
    f"""
    CREATE TRIGGER memories_history AFTER UPDATE ON memories BEGIN
        DELETE FROM memory_versions
        WHERE user_id = old.user_id AND key = old.key
          AND old.expires_at IS NOT NULL AND old.expires_at <= new.updated_at;
        INSERT INTO memory_versions ({_COLUMNS})
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
    """,
    """
    CREATE TRIGGER memories_history_delete AFTER DELETE ON memories BEGIN
        DELETE FROM memory_versions WHERE user_id = old.user_id AND key = old.key;
    END
    """,
]

POSTGRESQL_TRIGGERS = [
    f"""
    CREATE FUNCTION memories_keep_version() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF OLD.expires_at IS NOT NULL AND OLD.expires_at <= NEW.updated_at THEN
            DELETE FROM memory_versions WHERE user_id = OLD.user_id AND key = OLD.key;
            RETURN NULL;
        END IF;
        INSERT INTO memory_versions ({_COLUMNS})
        VALUES (OLD.user_id, OLD.key, OLD.value, OLD.metadata, OLD.created_at, OLD.updated_at,
                OLD.expires_at);
        DELETE FROM memory_versions
        WHERE user_id = OLD.user_id AND key = OLD.key AND id NOT IN (
            SELECT id FROM memory_versions
            WHERE user_id = OLD.user_id AND key = OLD.key
            ORDER BY id DESC LIMIT greatest({_KEEP}, 0)
        );
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE FUNCTION memories_drop_versions() RETURNS trigger
    LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        DELETE FROM memory_versions WHERE user_id = OLD.user_id AND key = OLD.key;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER memories_history AFTER UPDATE ON memories
    FOR EACH ROW EXECUTE FUNCTION memories_keep_version()
    """,
    """
    CREATE TRIGGER memories_history_delete AFTER DELETE ON memories
    FOR EACH ROW EXECUTE FUNCTION memories_drop_versions()
    """,
]


def upgrade() -> None:
    op.add_column("memories", sa.Column("expires_at", sa.Double(), nullable=True))
    op.create_index(op.f("ix_memories_expires_at"), "memories", ["expires_at"])
    op.create_table(
        "memory_versions",
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
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_versions")),
    )
    op.create_index(
        op.f("ix_memory_versions_user_id_key_id"), "memory_versions", ["user_id", "key", "id"]
    )
    op.create_table(
        "asyncmem_settings",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_asyncmem_settings")),
    )
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_TRIGGERS, "postgresql": POSTGRESQL_TRIGGERS}.get(
        dialect, []
    ):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for trigger in ("memories_history", "memories_history_delete"):
        op.execute(
            f"DROP TRIGGER IF EXISTS {trigger}"
            + (" ON memories" if dialect == "postgresql" else "")
        )
    if dialect == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS memories_keep_version()")
        op.execute("DROP FUNCTION IF EXISTS memories_drop_versions()")
    op.drop_table("asyncmem_settings")
    op.drop_index(op.f("ix_memory_versions_user_id_key_id"), table_name="memory_versions")
    op.drop_table("memory_versions")
    op.drop_index(op.f("ix_memories_expires_at"), table_name="memories")
    if dialect == "sqlite":
        # Native DROP COLUMN (SQLite ≥ 3.35): a batch copy would drop the FTS triggers.
        op.execute("ALTER TABLE memories DROP COLUMN expires_at")
    else:
        op.drop_column("memories", "expires_at")
