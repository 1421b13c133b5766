"""SQLite: a memory without neighbour context gets its postings without a GROUP BY

Revision ID: 0011_plain_postings
Revises: 0010_postings_in_place
Create Date: 2026-12-03

The search triggers of 0006 (and 0009's update trigger) wrote a memory's postings as the sum,
term by term, of its ``words`` and its ``context``, grouped, because a term can be in both.
A memory outside any conversation has no context, and its ``words`` already hold each term
once (a JSON object), so the grouping only sorted: its postings now come straight from
``words`` in term order. Turns keep the grouped statement. The postings are the same rows;
the statement that writes a 400-1,500-character memory costs 55 against 68 µs (a probe of
1,200 inserts on tmpfs after 2,000 short memories, SQL alone, two runs), a short one 28
against 31 µs. Upgrade and downgrade only replace triggers and read no data. PostgreSQL's
function is left as it is (its grouping is a hash aggregate in the same statement).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011_plain_postings"
down_revision: str | Sequence[str] | None = "0010_postings_in_place"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _size(row: str) -> str:
    """A row's BM25 length: its own words and its context's terms."""
    return f"({row}.length + (SELECT count(*) FROM json_each(nullif({row}.context, ''))))"


def _owner(row: str) -> str:
    return f"(SELECT id FROM search_users WHERE user_id = {row}.user_id)"


def _add(row: str, plain_first: bool) -> str:
    """The postings of ``row`` into ``search_recent`` (0006's statement, frozen here); with
    ``plain_first``, a row without context takes the statement without grouping."""
    grouped = f"""
        INSERT INTO search_recent (owner, memory_id, term, weight, length)
        SELECT {_owner(row)}, {row}.id, term, sum(weight), {_size(row)}
        FROM (
            SELECT key AS term, value AS weight FROM json_each(nullif({row}.words, ''))
            UNION ALL SELECT key, value FROM json_each(nullif({row}.context, ''))
        )
        {"WHERE coalesce(" + row + ".context, '') <> ''" if plain_first else ""}
        GROUP BY term
        ORDER BY term;
    """
    if not plain_first:
        return grouped
    return f"""
        INSERT INTO search_recent (owner, memory_id, term, weight, length)
        SELECT {_owner(row)}, {row}.id, key, value, {row}.length
        FROM json_each(nullif({row}.words, ''))
        WHERE coalesce({row}.context, '') = ''
        ORDER BY key;
        {grouped}
    """


def _remove(row: str) -> str:
    return f"""
        DELETE FROM search_terms WHERE memory_id = {row}.id;
        DELETE FROM search_recent WHERE owner = {_owner(row)} AND memory_id = {row}.id;
    """


def _triggers(plain_first: bool) -> list[str]:
    """0009's insert and update triggers, the postings written by :func:`_add`."""
    changed = " OR ".join(f"old.{c} IS NOT new.{c}" for c in ("words", "context", "length"))
    return [
        f"""
        CREATE TRIGGER memories_search_insert AFTER INSERT ON memories BEGIN
            INSERT INTO search_users (user_id, documents, length, recent)
            VALUES (new.user_id, 1, {_size("new")}, 1)
            ON CONFLICT (user_id) DO UPDATE
            SET documents = documents + 1, length = length + excluded.length,
                recent = recent + 1;
            {_add("new", plain_first)}
        END
        """,
        f"""
        CREATE TRIGGER memories_search_update AFTER UPDATE OF words, context, length ON memories
        WHEN {changed}
        BEGIN
            {_remove("old")}
            UPDATE search_users
            SET length = length - {_size("old")} + {_size("new")}, recent = recent + 1
            WHERE user_id = new.user_id;
            {_add("new", plain_first)}
        END
        """,
    ]


def _replace(plain_first: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP TRIGGER memories_search_insert")
    op.execute("DROP TRIGGER memories_search_update")
    for statement in _triggers(plain_first):
        op.execute(statement)


def upgrade() -> None:
    _replace(plain_first=True)


def downgrade() -> None:
    _replace(plain_first=False)
