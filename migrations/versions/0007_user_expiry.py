"""an index of each user's expiring memories, so a query skips expired ones by index

Revision ID: 0007_user_expiry
Revises: 0006_user_postings
Create Date: 2026-12-02

A query joined every memory matching the question to ``memories`` only to see whether it had
expired: at 10,000 memories of one user, most of a common question's time. It now ranks the
user's postings first and leaves out the user's expired memories, read from this partial
index on ``(user_id, expires_at)``, a range that is usually empty; only the best rows are read
from ``memories``. The index holds only memories with an expiry, so a plain store does not
write it. Creating it reads the table once; dropping it is instant.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_user_expiry"
down_revision: str | Sequence[str] | None = "0006_user_postings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EXPIRING = sa.text("expires_at IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        op.f("ix_memories_user_id_expires_at"),
        "memories",
        ["user_id", "expires_at"],
        sqlite_where=_EXPIRING,
        postgresql_where=_EXPIRING,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_memories_user_id_expires_at"), table_name="memories")
