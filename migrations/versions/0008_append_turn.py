"""PostgreSQL: a conversation's new last turn in one statement, ``asyncmem_append_turn``

Revision ID: 0008_append_turn
Revises: 0007_user_expiry
Create Date: 2026-12-02

Storing a turn kept its neighbours' contexts exact in a transaction of five round trips:
``BEGIN`` with the user's advisory lock, read the conversation's last turns, upsert the turn,
update the previous turn's context, ``COMMIT``. That made it 2.7-3.6 times a plain store (issue
17). The store now computes the contexts from the last turns it remembers, and this function
writes them in one statement:

1. take the user's lock (the one every conversation write takes);
2. check that the conversation's last ``p_reach`` turns are still the ones the caller named,
   by id and by the first ``p_head_chars`` characters of their values (all a context reads);
3. insert the turn, and update the contexts of the neighbours the caller names.

If the last turns are not the ones named, nothing is written and no row comes back: the store
reads them and tries again. If the key is already stored (a turn stored again or moved), only
``appended = false`` comes back and the store takes its transaction. The insert writes what
the store's upsert writes for a new row, with the server's clock, as the upsert does. Each
statement in a plpgsql function gets a new snapshot, so the check sees every turn committed
before the lock was granted. SQLite runs a turn's transaction in one trip to its writer
already, so it has no function.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008_append_turn"
down_revision: str | Sequence[str] | None = "0007_user_expiry"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CONVERSATION_LOCK = 0x616D6378
"""The advisory lock class of a user's conversation upkeep (``asyncmem.sql.statements``)."""

FUNCTION = f"""
    CREATE FUNCTION asyncmem_append_turn(
        p_user_id text, p_key text, p_value text, p_metadata jsonb, p_ttl double precision,
        p_session text, p_context text, p_facets text, p_words text, p_length integer,
        p_reach integer, p_head_chars integer, p_tail_ids bigint[], p_tail_heads text[],
        p_neighbour_ids bigint[], p_neighbour_contexts text[]
    ) RETURNS TABLE (
        r_created_at double precision, r_updated_at double precision,
        r_expires_at double precision, r_id bigint, r_session text, r_appended boolean
    ) LANGUAGE plpgsql AS $body$
    DECLARE
        found_ids bigint[];
        found_heads text[];
        at double precision := extract(epoch FROM statement_timestamp())::double precision;
        written memories%ROWTYPE;
    BEGIN
        PERFORM pg_advisory_xact_lock({_CONVERSATION_LOCK}, hashtext(p_user_id));
        SELECT coalesce(array_agg(last.id ORDER BY last.id DESC), '{{}}'),
               coalesce(array_agg(left(last.value, p_head_chars) ORDER BY last.id DESC), '{{}}')
        INTO found_ids, found_heads
        FROM (
            SELECT m.id, m.value FROM memories AS m
            WHERE m.user_id = p_user_id AND m.session = p_session
            ORDER BY m.id DESC LIMIT p_reach
        ) AS last;
        IF found_ids IS DISTINCT FROM p_tail_ids OR found_heads IS DISTINCT FROM p_tail_heads
        THEN
            RETURN;
        END IF;
        INSERT INTO memories AS m (
            user_id, key, value, metadata, created_at, updated_at, expires_at,
            session, context, facets, words, length
        ) VALUES (
            p_user_id, p_key, p_value, p_metadata, at, at, at + p_ttl,
            p_session, p_context, p_facets, p_words, p_length
        )
        ON CONFLICT (user_id, key) DO NOTHING
        RETURNING m.* INTO written;
        IF written.id IS NULL THEN
            RETURN QUERY SELECT NULL::double precision, NULL::double precision,
                NULL::double precision, NULL::bigint, NULL::text, false;
            RETURN;
        END IF;
        -- One by one, by primary key: a join with unnest() was planned as a scan of the
        -- table (0.7 ms a call at 4,000 memories).
        FOR i IN 1 .. coalesce(cardinality(p_neighbour_ids), 0) LOOP
            UPDATE memories SET context = p_neighbour_contexts[i]
            WHERE id = p_neighbour_ids[i] AND context IS DISTINCT FROM p_neighbour_contexts[i];
        END LOOP;
        RETURN QUERY SELECT written.created_at, written.updated_at, written.expires_at,
            written.id, written.session, true;
    END
    $body$
"""

DROP = (
    "DROP FUNCTION IF EXISTS asyncmem_append_turn(text, text, text, jsonb, double precision, "
    "text, text, text, text, integer, integer, integer, bigint[], text[], bigint[], text[])"
)


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(DROP)
