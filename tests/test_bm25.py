"""First-stage scoring: BM25 on both dialects (FTS5 ``bm25()``; the same formula on PostgreSQL).

Before PostgreSQL computed BM25 itself it ranked with ``ts_rank``, which has no inverse
document frequency: a memory repeating a common word beat one holding the rare word the
question is really about. These tests fail on that statement.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from asyncmem import SQLBackend
from tests.backends import BACKEND_FACTORIES, PG_ENABLED

COMMON = [f"note {i}: coffee with the team after the standup, as usual" for i in range(30)]


async def _fill(store: SQLBackend, extra: dict[str, str]) -> None:
    await store.store_many("u", [{"key": f"c{i}", "value": v} for i, v in enumerate(COMMON)])
    await store.store_many("u", [{"key": k, "value": v} for k, v in extra.items()])


async def test_a_rare_word_outweighs_a_repeated_common_one(sql_store: SQLBackend) -> None:
    await _fill(
        sql_store,
        {
            "coffee": "coffee, coffee and more coffee at the cafe",
            "zeppelin": "a zeppelin drifted over the harbour at dawn",
        },
    )
    hits = await sql_store.query("u", "coffee zeppelin", limit=3)
    assert hits[0].key == "zeppelin"


async def test_more_matching_words_beat_fewer(sql_store: SQLBackend) -> None:
    await _fill(
        sql_store,
        {
            "both": "the zeppelin landed beside the lighthouse",
            "one": "a zeppelin drifted over the harbour at dawn",
            "other": "the lighthouse keeper waved",
        },
    )
    hits = await sql_store.query("u", "zeppelin lighthouse", limit=3)
    assert hits[0].key == "both"
    assert {hit.key for hit in hits} == {"both", "one", "other"}


async def test_shorter_memory_wins_a_tie_on_words(sql_store: SQLBackend) -> None:
    await _fill(
        sql_store,
        {
            "short": "the zeppelin is red",
            "long": "the zeppelin is red and it carried forty passengers, two pilots, a cook, "
            "mail for three towns, crates of oranges and a piano across the whole sea",
        },
    )
    hits = await sql_store.query("u", "zeppelin", limit=2)
    assert [hit.key for hit in hits] == ["short", "long"]


async def test_document_frequency_is_per_user(sql_store: SQLBackend) -> None:
    """Another user's memories do not make a word common (or rare) for this one."""
    await sql_store.store_many(
        "other", [{"key": f"z{i}", "value": f"zeppelin sighting {i}"} for i in range(40)]
    )
    await _fill(
        sql_store,
        {
            "coffee": "coffee, coffee and more coffee at the cafe",
            "zeppelin": "a zeppelin drifted over the harbour at dawn",
        },
    )
    hits = await sql_store.query("u", "coffee zeppelin", limit=3)
    assert {hit.user_id for hit in hits} == {"u"}
    if sql_store.dialect == "postgresql":
        assert hits[0].key == "zeppelin"


QUESTIONS = [
    "coffee zeppelin",
    "who waved from the lighthouse?",
    "what drifted over the harbour at dawn",
    "team standup coffee",
]


@pytest.mark.skipif(not PG_ENABLED, reason="needs the PostgreSQL test server")
async def test_both_dialects_rank_alike(tmp_path: Path) -> None:
    """The same memories and questions give the same top three on SQLite and PostgreSQL."""
    extra = {
        "coffee": "coffee, coffee and more coffee at the cafe",
        "zeppelin": "a zeppelin drifted over the harbour at dawn",
        "both": "the zeppelin landed beside the lighthouse",
        "other": "the lighthouse keeper waved",
    }
    orders: dict[str, list[list[str]]] = {}
    for name in ("sqlite", "postgresql"):
        async with BACKEND_FACTORIES[name](tmp_path) as backend:
            assert isinstance(backend, SQLBackend)
            await _fill(backend, extra)
            orders[name] = [
                [hit.key for hit in await backend.query("u", question, limit=3)]
                for question in QUESTIONS
            ]
    assert orders["sqlite"] == orders["postgresql"]


async def test_expired_memories_give_up_their_places(sql_store: SQLBackend) -> None:
    """The best-scoring matches have expired: the live ones fill every place, filtered or not.

    The query ranks postings first and leaves the user's expired memories out before its
    ``LIMIT``; leaving them out after it would return fewer than ``limit``, or nothing.
    """
    expiring = [
        {"key": f"old{i}", "value": "garden garden garden", "metadata": {"tag": "y"}, "ttl": 0.3}
        for i in range(60)
    ]
    await sql_store.store_many("alice", expiring)
    await sql_store.store_many("bob", expiring)
    live = {
        f"new{i}": f"a garden path, number {i}, among the roses and the hedges" for i in range(8)
    }
    for key, value in live.items():
        await sql_store.store("alice", key, value, {"tag": "y"})
    # Stored with an expiry, then again without: it is live, and ranks first.
    await sql_store.store("alice", "kept", "garden garden garden garden", {"tag": "y"}, ttl=0.3)
    await sql_store.store("alice", "kept", "garden garden garden garden", {"tag": "y"})
    await asyncio.sleep(0.5)
    hits = await sql_store.query("alice", "garden", limit=5)
    assert len(hits) == 5
    assert hits[0].key == "kept"
    assert {hit.key for hit in hits[1:]} <= set(live)
    filtered = await sql_store.query("alice", "garden", limit=5, where={"tag": "y"})
    assert [hit.key for hit in filtered] == [hit.key for hit in hits]
    everything = await sql_store.query("alice", "garden", limit=100)
    assert {hit.key for hit in everything} == {*live, "kept"}
    assert await sql_store.query("bob", "garden") == []
