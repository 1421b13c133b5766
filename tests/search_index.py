"""The search index's own consistency, read from the tables: what the triggers must keep.

Every memory's ``words`` and ``length`` are what :func:`~asyncmem.sql.terms.own_terms` gives
for it, ``search_terms`` holds exactly the postings its ``words`` and ``context`` make, and
``search_users`` exactly each user's document count and total length. The check reads rows
through any DB-API-like ``fetch`` (sqlite3 or an async driver), so both dialects share it.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from asyncmem.sql.terms import own_terms

MEMORIES = "SELECT id, user_id, key, value, facets, context, words, length FROM memories"
POSTINGS = (
    "SELECT owner, term, memory_id, weight, length FROM search_terms UNION ALL "
    "SELECT owner, term, memory_id, weight, length FROM search_recent"
)
USERS = "SELECT id, user_id, documents, length FROM search_users"


def _weights(text: str) -> dict[str, int]:
    loaded: dict[str, int] = json.loads(text) if text else {}
    return loaded


def problems(
    memories: Iterable[Sequence[Any]],
    postings: Iterable[Sequence[Any]],
    users: Iterable[Sequence[Any]],
) -> list[str]:
    """What differs from an index recomputed from the memories ([] when all is exact)."""
    found: list[str] = []
    owners = {row[1]: row[0] for row in users}
    users_seen = {row[1]: (row[2], row[3]) for row in users}
    expected_postings: set[tuple[Any, ...]] = set()
    totals: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for row_id, user_id, key, value, facets, context, words, length in memories:
        if (words, length) != own_terms(key, value, facets):
            found.append(f"memory {row_id}: words/length are not its own terms")
        size = length + len(_weights(context))
        counts[user_id] += 1
        totals[user_id] += size
        merged = Counter(_weights(words))
        merged.update(_weights(context))
        owner = owners.get(user_id)
        expected_postings |= {(owner, t, row_id, w, size) for t, w in merged.items()}
    rows = [tuple(row) for row in postings]
    actual = set(rows)
    if len(actual) != len(rows):
        found.append("a posting is in both search_terms and search_recent")
    if missing := expected_postings - actual:
        found.append(f"{len(missing)} postings missing, e.g. {sorted(missing, key=str)[:3]}")
    if extra := actual - expected_postings:
        found.append(f"{len(extra)} postings too many, e.g. {sorted(extra, key=str)[:3]}")
    expected_users = {user: (counts[user], totals[user]) for user in counts}
    if users_seen != expected_users:
        found.append(f"search_users {users_seen} != {expected_users}")
    return found


def sqlite_problems(raw: sqlite3.Connection) -> list[str]:
    """:func:`problems` of a SQLite file, read on a plain connection."""
    return problems(*(raw.execute(sql).fetchall() for sql in (MEMORIES, POSTINGS, USERS)))


async def async_problems(fetch: Callable[[str], Awaitable[list[Any]]]) -> list[str]:
    """:func:`problems` read through ``fetch(sql) -> rows`` (asyncpg, the store's driver)."""
    return problems(*[await fetch(sql) for sql in (MEMORIES, POSTINGS, USERS)])
