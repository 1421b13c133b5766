"""a write that leaves a memory's index terms as they were leaves its postings alone

Revision ID: 0009_unchanged_terms
Revises: 0008_append_turn
Create Date: 2026-12-02

The search triggers of 0006 rewrote a memory's postings on every update that set ``words``,
``context`` or ``length``, and the store's upsert sets all three: storing a value again, or
a conversation's upkeep writing a neighbour's context that came out the same, deleted every
posting of the memory and inserted the same rows back. On SQLite the deletes are scattered
over the user's ``search_terms`` pages (the update cost ~190 µs of SQL against ~50 µs without
the trigger); on PostgreSQL each store of an unchanged value cost the server ~315 µs of CPU
and 2.7 KB of WAL for nothing (``benchmarks/pg_cost.py``). The update triggers now fire only
when one of the three columns changes, so the postings and ``search_users`` stay exact (the
same rows would have been written) and such a write costs what the row's own update costs.
No row changes: upgrade and downgrade only replace triggers.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009_unchanged_terms"
down_revision: str | Sequence[str] | None = "0008_append_turn"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _changed(differs: str) -> str:
    """Whether an update changed ``words``, ``context`` or ``length``; ``differs`` is the
    dialect's null-safe "not equal" (SQLite ``IS NOT``, PostgreSQL ``IS DISTINCT FROM``)."""
    return " OR ".join(f"old.{c} {differs} new.{c}" for c in ("words", "context", "length"))


def _sqlite_update(when: str) -> str:
    """0006's ``memories_search_update`` (frozen here, as a revision must be), ``when``."""
    size_old = "(old.length + (SELECT count(*) FROM json_each(nullif(old.context, ''))))"
    size_new = "(new.length + (SELECT count(*) FROM json_each(nullif(new.context, ''))))"
    owner = "(SELECT id FROM search_users WHERE user_id = new.user_id)"
    return f"""
    CREATE TRIGGER memories_search_update AFTER UPDATE OF words, context, length ON memories
    {when}
    BEGIN
        DELETE FROM search_terms WHERE memory_id = old.id;
        DELETE FROM search_recent
        WHERE owner = (SELECT id FROM search_users WHERE user_id = old.user_id)
        AND memory_id = old.id;
        UPDATE search_users
        SET length = length - {size_old} + {size_new}, recent = recent + 1
        WHERE user_id = new.user_id;
        INSERT INTO search_recent (owner, memory_id, term, weight, length)
        SELECT {owner}, new.id, term, sum(weight), {size_new}
        FROM (
            SELECT key AS term, value AS weight FROM json_each(nullif(new.words, ''))
            UNION ALL SELECT key, value FROM json_each(nullif(new.context, ''))
        )
        GROUP BY term
        ORDER BY term;
    END
    """


def _postgresql(changed_only: bool) -> list[str]:
    """PostgreSQL's trigger of 0006, or the same function on inserts and deletes and, with
    ``changed_only``, on updates that change the terms."""
    if not changed_only:
        return [
            """
            CREATE TRIGGER memories_search
            AFTER INSERT OR DELETE OR UPDATE OF words, context, length ON memories
            FOR EACH ROW EXECUTE FUNCTION asyncmem_search_terms()
            """
        ]
    return [
        """
        CREATE TRIGGER memories_search AFTER INSERT OR DELETE ON memories
        FOR EACH ROW EXECUTE FUNCTION asyncmem_search_terms()
        """,
        f"""
        CREATE TRIGGER memories_search_update AFTER UPDATE OF words, context, length
        ON memories FOR EACH ROW WHEN ({_changed("IS DISTINCT FROM")})
        EXECUTE FUNCTION asyncmem_search_terms()
        """,
    ]


def _replace(changed_only: bool) -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER memories_search_update")
        op.execute(_sqlite_update(f"WHEN {_changed('IS NOT')}" if changed_only else ""))
        return
    op.execute("DROP TRIGGER IF EXISTS memories_search_update ON memories")
    op.execute("DROP TRIGGER memories_search ON memories")
    for statement in _postgresql(changed_only):
        op.execute(statement)


def upgrade() -> None:
    _replace(changed_only=True)


def downgrade() -> None:
    _replace(changed_only=False)
