"""neighbour context: one turn after a turn, not two

Revision ID: 0004_context_after
Revises: 0003_context
Create Date: 2026-12-01

A turn's context held the words of the two turns before it and the two after it; it now holds
one turn after (``asyncmem.sql.search.CONTEXT_AFTER`` has the measurements). Every turn's
context is recomputed and only the rows whose context changes are written, which re-indexes
them (the FTS5 triggers on SQLite, the generated ``tsvector`` on PostgreSQL). The downgrade
recomputes 0003's windows. The windows are numbers here, not read from ``asyncmem.sql.search``,
so this revision keeps its meaning if the constants change again.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

import sqlalchemy as sa
from alembic import op

from asyncmem.sql.search import neighbour_words

revision: str = "0004_context_after"
down_revision: str | Sequence[str] | None = "0003_context"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild(connection: sa.Connection, before: int, after: int) -> None:
    """Recompute every turn's context with ``before`` and ``after`` neighbour turns."""
    rows = connection.execute(
        sa.text(
            "SELECT id, user_id, session, value, context FROM memories "
            "WHERE session IS NOT NULL ORDER BY user_id, session, id"
        )
    ).all()
    changed: list[dict[str, object]] = []
    for _, group in groupby(rows, key=lambda row: (row.user_id, row.session)):
        turns = list(group)
        contexts = neighbour_words([turn.value for turn in turns], before, after)
        changed += [
            {"id": turn.id, "context": context}
            for turn, context in zip(turns, contexts, strict=True)
            if turn.context != context
        ]
    if changed:
        connection.execute(
            sa.text("UPDATE memories SET context = :context WHERE id = :id"), changed
        )


def upgrade() -> None:
    _rebuild(op.get_bind(), before=2, after=1)


def downgrade() -> None:
    _rebuild(op.get_bind(), before=2, after=2)
