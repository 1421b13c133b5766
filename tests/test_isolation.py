"""Isolation among many look-alike users at once (extends the conformance suite's ten).

Every id below is a different user: prefixes of each other, ids that differ only in case,
Unicode normalization, width or invisible characters, and ids made of LIKE/GLOB wildcards,
quotes and backslashes. They all hold memories under the same keys with the same words, so a
comparison that is not exact (prefix, LIKE, case folding, normalization) would show up as a
foreign hit.
"""

from __future__ import annotations

from asyncmem import MAX_ID_LENGTH, MAX_LIMIT, MemoryBackend
from tests.test_properties import TRICKY

PREFIXES = ["a", "ab", "abc", "user:1", "user:10", "user:1%", "user:1_", "user:1*", "user"]
USERS = sorted(set(TRICKY + PREFIXES))


def _own(user: str) -> str:
    return f"own {user}"[:MAX_ID_LENGTH]


async def test_many_look_alike_users_never_see_each_other(store: MemoryBackend) -> None:
    word = "secret"
    for user in USERS:
        await store.store(user, "k", f"{word} of {user}")
        await store.store(user, _own(user), f"{word} note of {user}")
    for user in USERS:
        keys = await store.list_keys(user)
        assert sorted(keys) == sorted(["k", _own(user)]), repr(user)
        hits = await store.query(user, word, limit=MAX_LIMIT)
        assert {hit.user_id for hit in hits} == {user}, repr(user)
        assert len(hits) == 2
        entry = await store.retrieve(user, "k")
        assert entry is not None
        assert entry.value == f"{word} of {user}"


async def test_delete_and_forget_reach_exactly_one_user(store: MemoryBackend) -> None:
    for user in USERS:
        await store.store(user, "k", user)
    gone = {"%", "_", "*", "a", "user:1", "alice", "e\u0301"}
    for user in sorted(gone)[:3]:
        assert await store.forget_user(user) == 1
    for user in sorted(gone)[3:]:
        assert await store.delete(user, "k") is True
    for user in USERS:
        entry = await store.retrieve(user, "k")
        assert (entry is None) == (user in gone), repr(user)
        if entry is not None:
            assert entry.value == user
