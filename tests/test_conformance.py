"""The ``MemoryBackend`` contract (isolation, upsert, ranking, typed errors, limits,
lifecycle), run against every backend that stores (``store`` fixture) and, for input checks
and lifecycle, every backend (``backend`` fixture)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncmem import (
    MAX_ID_LENGTH,
    MAX_LIMIT,
    MAX_VALUE_BYTES,
    BackendClosedError,
    InvalidInputError,
    MemoryBackend,
    MemoryEntry,
)

FACTS = {
    "pet": "Alice has a grey cat called Miso who sleeps on the piano.",
    "job": "Alice works night shifts as a nurse at St. Mary's hospital.",
    "food": "Alice loves spicy Thai curries but cannot stand olives.",
    "trip": "Alice is planning a hiking trip to the Dolomites next July.",
    "sister": "Her sister Jenny lives in Toronto and teaches piano to children.",
    "car": "She drives an old blue Volvo estate that keeps breaking down.",
}
QUESTIONS = {
    "What is the name of her cat?": "pet",
    "Which hospital does she work at?": "job",
    "Where does her sister live?": "sister",
    "When is the hiking trip in the Dolomites?": "trip",
    "What kind of car does she drive?": "car",
    "Does she like olives?": "food",
}
HOSTILE_TEXTS = [
    "",
    "   ",
    "the of and to",
    '"',
    "'",
    '""""',
    "AND OR NOT",
    "cat AND",
    "NEAR(cat piano)",
    "cat*",
    "*",
    "^cat",
    "key:cat",
    "value : cat",
    "(cat",
    "cat)",
    "{cat piano}",
    "'; DROP TABLE memories; --",
    '" OR 1=1 --',
    "%",
    "_",
    "%cat%",
    "cat_",
    "\\",
    "\x00cat",
    "\ud800 cat",
    "🐈 cat 🎹",
    "cat " * 3000,
    "x" * 10_000,
]


async def _fill(store: MemoryBackend, user: str = "alice") -> None:
    for key, value in FACTS.items():
        await store.store(user, key, value)


async def _snapshot(store: MemoryBackend, *users: str) -> dict[str, list[MemoryEntry | None]]:
    snapshot: dict[str, list[MemoryEntry | None]] = {}
    for user in users:
        keys = await store.list_keys(user)
        snapshot[user] = [await store.retrieve(user, key) for key in sorted(keys)]
    return snapshot


# --- storing and reading back ----------------------------------------------------------------


async def test_store_returns_what_retrieve_reads(store: MemoryBackend) -> None:
    stored = await store.store("alice", "pet", FACTS["pet"], {"source": "chat", "n": 1})
    assert stored.user_id == "alice"
    assert stored.key == "pet"
    assert stored.value == FACTS["pet"]
    assert dict(stored.metadata) == {"source": "chat", "n": 1}
    assert stored.created_at == stored.updated_at > 0
    assert stored.score is None
    assert await store.retrieve("alice", "pet") == stored


async def test_missing_memory_is_none(store: MemoryBackend) -> None:
    assert await store.retrieve("alice", "nothing") is None
    await store.store("alice", "pet", "cat")
    assert await store.retrieve("alice", "nothing") is None
    assert await store.retrieve("bob", "pet") is None


async def test_metadata_round_trips_as_json(store: MemoryBackend) -> None:
    metadata: dict[str, Any] = {
        "nested": {"list": [1, 2.5, "three", None, True, {"deep": []}]},
        "unicode": "Grüße 🐈 مرحبا",
        "empty": {},
        "zero": 0,
        "negative": -1.25,
        "big": 2**53,
    }
    await store.store("alice", "k", "v", metadata)
    entry = await store.retrieve("alice", "k")
    assert entry is not None
    assert dict(entry.metadata) == metadata
    assert (await store.store("alice", "plain", "v")).metadata == {}
    plain = await store.retrieve("alice", "plain")
    assert plain is not None
    assert dict(plain.metadata) == {}


async def test_metadata_is_copied_not_referenced(store: MemoryBackend) -> None:
    metadata: dict[str, Any] = {"tags": ["a"]}
    await store.store("alice", "k", "v", metadata)
    metadata["tags"].append("b")
    entry = await store.retrieve("alice", "k")
    assert entry is not None
    assert dict(entry.metadata) == {"tags": ["a"]}


async def test_unicode_ids_and_values(store: MemoryBackend) -> None:
    cases = {
        "emoji 🐈‍⬛": "value with emoji 🎹 and ZWJ 👩‍👩‍👧",
        "עברית": "שלום עולם — right to left",
        "e\u0301": "combining acute, decomposed",
        "é": "precomposed, a different key",
        " spaced key ": "  leading and trailing spaces kept  ",
        "k" * MAX_ID_LENGTH: "longest key",
    }
    for key, value in cases.items():
        await store.store("ユーザー", key, value)
    for key, value in cases.items():
        entry = await store.retrieve("ユーザー", key)
        assert entry is not None
        assert entry.value == value
    assert sorted(await store.list_keys("ユーザー")) == sorted(cases)


async def test_largest_value_is_accepted(store: MemoryBackend) -> None:
    value = "a" * (MAX_VALUE_BYTES - 2) + "é"
    await store.store("alice", "big", value)
    entry = await store.retrieve("alice", "big")
    assert entry is not None
    assert entry.value == value


# --- upsert ----------------------------------------------------------------------------------


async def test_upsert_replaces_value_keeps_created_at(store: MemoryBackend) -> None:
    first = await store.store("alice", "pet", "a cat", {"v": 1})
    await asyncio.sleep(0.002)
    second = await store.store("alice", "pet", "two cats", {"w": 2})
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    entry = await store.retrieve("alice", "pet")
    assert entry == second
    assert entry.value == "two cats"
    assert dict(entry.metadata) == {"w": 2}
    assert await store.list_keys("alice") == ["pet"]


async def test_upsert_updates_the_search_index(store: MemoryBackend) -> None:
    await store.store("alice", "pet", "Alice has a grey cat")
    await store.store("alice", "pet", "Alice has a brown dog")
    assert await store.query("alice", "cat") == []
    hits = await store.query("alice", "dog")
    assert [hit.key for hit in hits] == ["pet"]
    assert hits[0].value == "Alice has a brown dog"


# --- query -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("question", "expected"), list(QUESTIONS.items()))
async def test_query_ranks_the_answer_first(
    store: MemoryBackend, question: str, expected: str
) -> None:
    await _fill(store)
    hits = await store.query("alice", question)
    assert hits, question
    assert hits[0].key == expected
    assert all(hit.score is not None for hit in hits)
    scores = [hit.score for hit in hits if hit.score is not None]
    assert scores == sorted(scores, reverse=True)


async def test_query_beats_substring_search_on_questions(store: MemoryBackend) -> None:
    """The prototype's ``LIKE '%question%'`` found nothing for a real question."""
    await _fill(store)
    substring_hits = sum(
        any(question.lower() in value.lower() for value in FACTS.values()) for question in QUESTIONS
    )
    top1 = 0
    for question, expected in QUESTIONS.items():
        hits = await store.query("alice", question, limit=3)
        top1 += bool(hits) and hits[0].key == expected
    assert substring_hits == 0
    assert top1 == len(QUESTIONS)


async def test_query_matches_stems_and_any_word_order(store: MemoryBackend) -> None:
    await _fill(store)
    for question in ("teaching pianos", "Toronto sister", "sisters living in toronto"):
        hits = await store.query("alice", question)
        assert hits[0].key == "sister", question


async def test_query_finds_non_latin_scripts(store: MemoryBackend) -> None:
    await store.store("ivan", "pet", "У меня есть кошка по имени Мурка")
    await store.store("ivan", "city", "Я живу в Москве")
    hits = await store.query("ivan", "Как зовут кошка?")
    assert [hit.key for hit in hits] == ["pet"]


async def test_query_respects_limit(store: MemoryBackend) -> None:
    for i in range(25):
        await store.store("alice", f"note-{i}", f"note number {i} about gardening")
    assert len(await store.query("alice", "gardening")) == 10
    assert len(await store.query("alice", "gardening", limit=3)) == 3
    assert len(await store.query("alice", "gardening", limit=100)) == 25


async def test_query_without_matches_is_empty(store: MemoryBackend) -> None:
    await _fill(store)
    assert await store.query("alice", "quantum chromodynamics") == []
    assert await store.query("nobody", "cat") == []


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
async def test_hostile_query_text_is_data(store: MemoryBackend, text: str) -> None:
    await _fill(store)
    await store.store("mallory", "x", "cat piano % _ ' \" NEAR AND OR")
    before = await _snapshot(store, "alice", "mallory")
    hits = await store.query("alice", text)
    assert isinstance(hits, list)
    assert all(hit.user_id == "alice" for hit in hits)
    if "cat" in text.lower().split() or text.startswith("cat"):
        assert "pet" in [hit.key for hit in hits]
    assert await _snapshot(store, "alice", "mallory") == before


async def test_stop_words_only_query_is_empty(store: MemoryBackend) -> None:
    await _fill(store)
    assert await store.query("alice", "what is the") == []
    assert await store.query("alice", "?!") == []


# --- list, delete, forget --------------------------------------------------------------------


async def test_list_keys_most_recently_updated_first(store: MemoryBackend) -> None:
    for key in ("a", "b", "c"):
        await store.store("alice", key, key)
    assert await store.list_keys("alice") == ["c", "b", "a"]
    await store.store("alice", "a", "updated")
    assert await store.list_keys("alice") == ["a", "c", "b"]
    assert await store.list_keys("nobody") == []


async def test_delete(store: MemoryBackend) -> None:
    await _fill(store)
    assert await store.delete("alice", "pet") is True
    assert await store.delete("alice", "pet") is False
    assert await store.retrieve("alice", "pet") is None
    assert "pet" not in await store.list_keys("alice")
    assert all(hit.key != "pet" for hit in await store.query("alice", "cat Miso piano"))
    assert len(await store.list_keys("alice")) == len(FACTS) - 1
    again = await store.store("alice", "pet", "a new cat")
    assert again.created_at == again.updated_at


async def test_forget_user(store: MemoryBackend) -> None:
    await _fill(store, "alice")
    await _fill(store, "bob")
    assert await store.forget_user("alice") == len(FACTS)
    assert await store.forget_user("alice") == 0
    assert await store.list_keys("alice") == []
    assert await store.query("alice", "cat") == []
    assert sorted(await store.list_keys("bob")) == sorted(FACTS)


# --- isolation -------------------------------------------------------------------------------

SIMILAR_USERS = [
    "alice",
    "Alice",
    "alic",
    "alice ",
    "alice%",
    "al_ce",
    "alice*",
    "'alice'",
    "é",
    "e\u0301",
]


async def test_users_never_see_each_other(store: MemoryBackend) -> None:
    for user in SIMILAR_USERS:
        await store.store(user, "secret", f"the secret of {user!r} is a cat")
        await store.store(user, f"own-{user}", f"cat of {user!r}")
    for user in SIMILAR_USERS:
        entry = await store.retrieve(user, "secret")
        assert entry is not None
        assert entry.value == f"the secret of {user!r} is a cat"
        assert sorted(await store.list_keys(user)) == sorted(["secret", f"own-{user}"])
        hits = await store.query(user, "secret cat", limit=50)
        assert {hit.user_id for hit in hits} == {user}
        assert len(hits) == 2


async def test_delete_and_forget_touch_one_user_only(store: MemoryBackend) -> None:
    for user in SIMILAR_USERS:
        await store.store(user, "k", user)
    assert await store.delete("alice", "k") is True
    assert await store.forget_user("al_ce") == 1
    for user in SIMILAR_USERS:
        expected = None if user in {"alice", "al_ce"} else user
        entry = await store.retrieve(user, "k")
        assert (entry.value if entry else None) == expected


# --- bad input -------------------------------------------------------------------------------

BAD_IDS: list[object] = ["", None, 42, b"alice", "a" * (MAX_ID_LENGTH + 1), "a\x00b", "\ud800"]
BAD_VALUES: list[object] = [None, 42, b"bytes", "a\x00b", "\udfff", "x" * (MAX_VALUE_BYTES + 1)]
BAD_METADATA: list[object] = [
    [1, 2],
    "text",
    {1: "int key"},
    {"set": {1, 2}},
    {"nan": float("nan")},
    {"inf": float("inf")},
    {"bytes": b"x"},
    {"obj": object()},
    {"nul": "a\x00b"},
    {"x" * 70_000: 1},
]
BAD_LIMITS: list[object] = [0, -1, MAX_LIMIT + 1, 10**12, 1.5, True, "10", None]


def _operations(user: object = "alice", key: object = "k") -> list[Any]:
    return [
        lambda b: b.store(user, key, "v"),
        lambda b: b.retrieve(user, key),
        lambda b: b.delete(user, key),
    ]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_bad_ids_are_rejected(backend: MemoryBackend, bad: object) -> None:
    await _fill(backend)
    before = await _snapshot(backend, "alice")
    calls = [
        *_operations(user=bad),
        *_operations(key=bad),
        lambda b: b.query(bad, "cat"),
        lambda b: b.list_keys(bad),
        lambda b: b.forget_user(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError) as raised:
            await call(backend)
        assert isinstance(raised.value, ValueError)
    assert await _snapshot(backend, "alice") == before


@pytest.mark.parametrize("bad", BAD_VALUES, ids=lambda v: repr(v)[:40])
async def test_bad_values_are_rejected(backend: MemoryBackend, bad: object) -> None:
    await _fill(backend)
    before = await _snapshot(backend, "alice")
    with pytest.raises(InvalidInputError) as raised:
        await backend.store("alice", "pet", bad)  # type: ignore[arg-type]
    assert "x" * 100 not in str(raised.value)
    assert await _snapshot(backend, "alice") == before


@pytest.mark.parametrize("bad", BAD_METADATA, ids=lambda v: repr(v)[:40])
async def test_bad_metadata_is_rejected(backend: MemoryBackend, bad: object) -> None:
    await _fill(backend)
    before = await _snapshot(backend, "alice")
    with pytest.raises(InvalidInputError):
        await backend.store("alice", "pet", "new value", bad)  # type: ignore[arg-type]
    assert await _snapshot(backend, "alice") == before


@pytest.mark.parametrize("bad", BAD_LIMITS, ids=repr)
async def test_bad_limits_are_rejected(backend: MemoryBackend, bad: object) -> None:
    with pytest.raises(InvalidInputError):
        await backend.query("alice", "cat", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [None, 42, b"cat", ["cat"]], ids=repr)
async def test_non_text_query_is_rejected(backend: MemoryBackend, bad: object) -> None:
    with pytest.raises(InvalidInputError):
        await backend.query("alice", bad)  # type: ignore[arg-type]


# --- lifecycle -------------------------------------------------------------------------------


async def test_protocol_and_names(backend: MemoryBackend) -> None:
    assert isinstance(backend, MemoryBackend)
    assert isinstance(backend.backend_name, str)
    assert backend.backend_name
    assert isinstance(backend.is_cloud, bool)
    assert await backend.is_available() is True


async def test_closed_backend_raises(backend: MemoryBackend) -> None:
    await backend.aclose()
    await backend.aclose()
    assert await backend.is_available() is False
    calls = [
        lambda b: b.store("alice", "k", "v"),
        lambda b: b.retrieve("alice", "k"),
        lambda b: b.query("alice", "cat"),
        lambda b: b.list_keys("alice"),
        lambda b: b.delete("alice", "k"),
        lambda b: b.forget_user("alice"),
    ]
    for call in calls:
        with pytest.raises(BackendClosedError):
            await call(backend)
    with pytest.raises(BackendClosedError):
        async with backend:
            pass


# --- concurrency -----------------------------------------------------------------------------


async def test_concurrent_calls_lose_nothing(store: MemoryBackend) -> None:
    n = 300

    async def writer(i: int) -> MemoryEntry:
        return await store.store("alice", f"k{i}", f"memory number {i} about concurrency")

    async def reader(i: int) -> list[MemoryEntry]:
        return await store.query("alice", "concurrency", limit=5)

    results = await asyncio.gather(*(writer(i) for i in range(n)), *(reader(i) for i in range(n)))
    assert all(isinstance(r, MemoryEntry | list) for r in results)
    assert sorted(await store.list_keys("alice")) == sorted(f"k{i}" for i in range(n))
    updates = await asyncio.gather(*(store.store("alice", "same", f"v{i}") for i in range(50)))
    entry = await store.retrieve("alice", "same")
    assert entry is not None
    assert entry.value in {u.value for u in updates}
    assert entry.updated_at == max(u.updated_at for u in updates)
