"""PostgreSQL: an update of a memory's terms rewrites only the postings that changed

Revision ID: 0010_postings_in_place
Revises: 0009_unchanged_terms
Create Date: 2026-12-03

When a conversation turn is appended, ``asyncmem_append_turn`` (0008) writes the previous
turn's ``context``, and the search trigger of 0006 then deleted every posting of that turn and
inserted them all back, though most of its terms stay. The update path of
``asyncmem_search_terms()`` now computes the memory's new (term, weight) set and, in one
statement, deletes the postings of the terms that are gone, updates weight and length only
where they differ, and inserts the postings of the new terms. A posting's weight and length
are in no index, so with ``search_terms`` at ``fillfactor = 80`` (room on each page, for the
pages written from now on) the updates stay on their page (HOT) and write no index entry.
400 appended turns (``benchmarks/concurrency.py``'s conversations): 6,908 posting updates,
all HOT, and no deletes, where 0009 deleted 6,908 postings and inserted them back; 8.7 KB of
WAL a turn instead of 13.1 KB, and a store of new text over a stored memory writes 1,980 B
instead of 3,780 (``benchmarks/pg_cost.py``). The server's CPU time is about the same (within
the noise of two shared cores): a row updated costs about what a row deleted and inserted
back costs here. ``search_users`` is written as before.
Inserts, deletes and an update that moves a memory to another user take 0006's path. The
postings are the rows 0006's function writes: upgrade and downgrade replace the function and
set or reset the table's fill factor, and read no data. SQLite has no such function (its
postings go to ``search_recent``, a page or two a write): nothing changes there.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010_postings_in_place"
down_revision: str | Sequence[str] | None = "0009_unchanged_terms"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILLFACTOR = 80
"""``search_terms``'s fill factor: room on each page for a HOT update of its postings."""

_WORDS = "coalesce(nullif(NEW.words, ''), '{}')::jsonb"
_CONTEXT = "coalesce(nullif(NEW.context, ''), '{}')::jsonb"

# 0006's function (frozen here, as a revision must be), which the downgrade restores.
FUNCTION_0006 = f"""
    CREATE OR REPLACE FUNCTION asyncmem_search_terms() RETURNS trigger LANGUAGE plpgsql AS $body$
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
            FROM jsonb_each_text({_WORDS})
            UNION ALL SELECT key, value::integer
            FROM jsonb_each_text({_CONTEXT})
        ) AS entries
        GROUP BY person.id, entries.term;
        RETURN NULL;
    END
    $body$
"""

FUNCTION = f"""
    CREATE OR REPLACE FUNCTION asyncmem_search_terms() RETURNS trigger LANGUAGE plpgsql AS $body$
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
        END IF;
        IF TG_OP <> 'DELETE' THEN
            new_size := NEW.length;
            IF NEW.context <> '' THEN
                new_size := new_size + (SELECT count(*) FROM jsonb_object_keys(NEW.context::jsonb));
            END IF;
        END IF;
        IF TG_OP = 'UPDATE' AND OLD.user_id = NEW.user_id THEN
            UPDATE search_users SET length = length + (new_size - old_size)
            WHERE user_id = NEW.user_id RETURNING id INTO owner_id;
        END IF;
        IF owner_id IS NOT NULL THEN
            -- In place: the postings of terms gone, changed and new. One snapshot for the
            -- three, so the insert's "not stored" reads the postings as they were.
            WITH entries AS (
                SELECT terms.term, sum(terms.weight) AS weight
                FROM (
                    SELECT key AS term, value::integer AS weight FROM jsonb_each_text({_WORDS})
                    UNION ALL SELECT key, value::integer FROM jsonb_each_text({_CONTEXT})
                ) AS terms
                GROUP BY terms.term
            ), gone AS (
                DELETE FROM search_terms AS t
                WHERE t.memory_id = NEW.id
                AND NOT EXISTS (SELECT FROM entries AS e WHERE e.term = t.term)
            ), changed AS (
                UPDATE search_terms AS t SET weight = e.weight, length = new_size
                FROM entries AS e
                WHERE t.memory_id = NEW.id AND t.term = e.term
                AND (t.weight <> e.weight OR t.length <> new_size)
            )
            INSERT INTO search_terms (owner, term, memory_id, weight, length)
            SELECT owner_id, e.term, NEW.id, e.weight, new_size
            FROM entries AS e
            WHERE NOT EXISTS (
                SELECT FROM search_terms AS t WHERE t.memory_id = NEW.id AND t.term = e.term
            );
            RETURN NULL;
        END IF;
        IF TG_OP <> 'INSERT' THEN
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
            FROM jsonb_each_text({_WORDS})
            UNION ALL SELECT key, value::integer
            FROM jsonb_each_text({_CONTEXT})
        ) AS entries
        GROUP BY person.id, entries.term;
        RETURN NULL;
    END
    $body$
"""


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(FUNCTION)
        op.execute(f"ALTER TABLE search_terms SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("ALTER TABLE search_terms RESET (fillfactor)")
        op.execute(FUNCTION_0006)
