"""CJK text: its characters and character pairs join a memory's facets

Revision ID: 0005_cjk_words
Revises: 0004_context_after
Create Date: 2026-12-01

Chinese and Japanese are written without spaces, and both full-text indexes (FTS5's
``unicode61``, PostgreSQL's parser) keep a run of such text as one word, so no word inside an
unspaced sentence could be found. The store now adds every CJK character and every pair of
neighbouring ones to the memory's ``facets`` field (``asyncmem.sql.search.cjk_words``), and a
question's CJK text is searched by its pairs. This revision recomputes ``facets`` for the
memories whose value has CJK text (the index follows: FTS5 triggers, the generated
``tsvector``); the downgrade takes the pairs out again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from asyncmem.sql.search import cjk_words, facets_of

revision: str = "0005_cjk_words"
down_revision: str | Sequence[str] | None = "0004_context_after"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rewrite(connection: sa.Connection, *, with_cjk: bool) -> None:
    rows = connection.execute(sa.text("SELECT id, value, metadata, facets FROM memories"))
    changed: list[dict[str, object]] = []
    for row in rows:
        if not cjk_words(row.value):
            continue
        metadata = json.loads(row.metadata) if isinstance(row.metadata, str) else row.metadata
        facets = facets_of(metadata or {}, row.value if with_cjk else "")
        if facets != row.facets:
            changed.append({"id": row.id, "facets": facets})
    if changed:
        connection.execute(sa.text("UPDATE memories SET facets = :facets WHERE id = :id"), changed)


def upgrade() -> None:
    _rewrite(op.get_bind(), with_cjk=True)


def downgrade() -> None:
    _rewrite(op.get_bind(), with_cjk=False)
