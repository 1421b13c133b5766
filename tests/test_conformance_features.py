"""The keyword-only features (filters, paging, scan, expiry, history, batches) on every backend.

``store`` runs on the backends that keep data; ``backend`` adds the null one, for input
checks and its own expectations.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any

import pytest

from asyncmem import InvalidInputError, MemoryBackend, MemoryEntry

METADATA: dict[str, dict[str, Any]] = {
    "m1": {"kind": "fact", "n": 1, "tags": {"lang": "en", "level": 3}, "flag": True},
    "m2": {"kind": "fact", "n": 2.5, "tags": {"lang": "fr"}, "flag": False},
    "m3": {"kind": "turn", "n": 10, "speaker": "Ana", "flag": None},
    "m4": {"kind": "turn", "n": "10", "speaker": "Bo"},
    "m5": {"kind": "Fact", "n": -3, "tags": ["en"]},
    "m6": {},
    "m7": {"kind": "fact", "n": 1.0, "tags": {"lang": "en", "level": 1}, "date": "2023-05-08"},
    "m8": {"kind": "éclair", "n": 0, "date": "2023-12-31"},
}

FILTERS: list[dict[str, Any]] = [
    {"kind": "fact"},
    {"kind": {"$eq": "fact"}},
    {"kind": {"$ne": "fact"}},
    {"n": 1},
    {"n": 10},
    {"n": "10"},
    {"n": {"$gt": 1}},
    {"n": {"$gte": 1}},
    {"n": {"$lt": 1}},
    {"n": {"$lte": 2.5, "$gt": -3}},
    {"n": {"$ne": 10}},
    {"flag": True},
    {"flag": False},
    {"flag": None},
    {"flag": {"$exists": True}},
    {"flag": {"$exists": False}},
    {"tags.lang": "en"},
    {"tags.level": {"$gte": 2}},
    {"tags.lang": {"$exists": True}},
    {"kind": {"$in": ["turn", "Fact"]}},
    {"kind": {"$in": []}},
    {"n": {"$in": [1, "10", None]}},
    {"kind": "fact", "tags.lang": "en"},
    {"kind": "fact", "n": {"$gt": 1}},
    {"date": {"$gte": "2023-06-01"}},
    {"kind": {"$gt": "eclair"}},
    {"speaker": {"$lt": "B"}},
    {"missing.deep.path": {"$exists": False}},
    {"missing": None},
    {"tags": {"$exists": True}},
]

_MISSING = object()


def _at(metadata: Mapping[str, Any], path: str) -> Any:
    node: Any = metadata
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "str"
    return "other"


def _equal(found: Any, wanted: Any) -> bool:
    return found is not _MISSING and _kind(found) == _kind(wanted) and found == wanted


def _test(found: Any, op: str, operand: Any) -> bool:
    """The reference semantics of one ``where`` condition (``asyncmem.sql.filters``)."""
    if op == "$eq":
        return _equal(found, operand)
    if op == "$ne":
        return not _equal(found, operand)
    if op == "$in":
        return any(_equal(found, item) for item in operand)
    if op == "$exists":
        return (found is not _MISSING) is operand
    if found is _MISSING or _kind(found) != _kind(operand):
        return False
    return {
        "$gt": found > operand,
        "$gte": found >= operand,
        "$lt": found < operand,
        "$lte": found <= operand,
    }[op]


def matches(metadata: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    for path, wanted in where.items():
        found = _at(metadata, path)
        ops = wanted if isinstance(wanted, Mapping) else {"$eq": wanted}
        if not all(_test(found, op, operand) for op, operand in ops.items()):
            return False
    return True


async def _fill_metadata(store: MemoryBackend, user: str = "alice") -> None:
    for key, metadata in METADATA.items():
        await store.store(user, key, f"note {key} about the garden", metadata)


# -- filters ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", FILTERS, ids=[str(f) for f in FILTERS])
async def test_where_filters_match_the_reference(
    store: MemoryBackend, where: dict[str, Any]
) -> None:
    await _fill_metadata(store)
    await store.store("bob", "m1", "note m1 about the garden", METADATA["m1"])
    expected = {key for key, metadata in METADATA.items() if matches(metadata, where)}
    assert set(await store.list_keys("alice", where=where)) == expected
    hits = await store.query("alice", "garden notes", limit=50, where=where)
    assert {hit.key for hit in hits} == expected
    assert all(hit.user_id == "alice" for hit in hits)
    scanned = [entry.key async for entry in store.scan("alice", where=where, page_size=3)]
    assert set(scanned) == expected


async def test_query_with_where_ranks_among_matches(store: MemoryBackend) -> None:
    await store.store("alice", "a", "grey cat on the piano", {"room": "lounge"})
    await store.store("alice", "b", "grey cat", {"room": "kitchen"})
    await store.store("alice", "c", "the cat sleeps on the piano in the sun", {"room": "lounge"})
    hits = await store.query("alice", "cat piano", where={"room": "lounge"})
    assert [hit.key for hit in hits][:2] in (["a", "c"], ["c", "a"])
    assert all(hit.score is not None for hit in hits)
    assert [hit.key for hit in await store.query("alice", "cat", where={"room": "attic"})] == []


async def test_where_values_are_data_not_sql(store: MemoryBackend) -> None:
    tricky = "x' OR 1=1 --"
    await store.store("alice", "a", "v", {"k": tricky, "q": '"quoted"', "p": "%_"})
    await store.store("alice", "b", "v", {"k": "other", "q": "x", "p": "abc"})
    assert await store.list_keys("alice", where={"k": tricky}) == ["a"]
    assert await store.list_keys("alice", where={"q": '"quoted"'}) == ["a"]
    assert await store.list_keys("alice", where={"p": "%_"}) == ["a"]
    assert await store.list_keys("alice", where={"k": {"$in": [tricky, "nope"]}}) == ["a"]


HOSTILE_WHERE: list[Any] = [
    "kind = 'fact'",
    ["kind"],
    {1: "x"},
    {"": "x"},
    {"a..b": 1},
    {".a": 1},
    {"a.": 1},
    {"a b": 1},
    {"a'b": 1},
    {'a"b': 1},
    {"a;DROP TABLE memories": 1},
    {"$or": [{"a": 1}]},
    {"$and": []},
    {"a.0": 1},
    {"x" * 129: 1},
    {".".join(["a"] * 9): 1},
    {"a": {"$regex": "x"}},
    {"a": {"$gt": 1, "b": 2}},
    {"a": {}},
    {"a": {"nested": 1}},
    {"a": [1, 2]},
    {"a": {"$in": "abc"}},
    {"a": {"$in": [[1]]}},
    {"a": {"$in": [{"b": 1}]}},
    {"a": {"$in": list(range(101))}},
    {"a": {"$exists": 1}},
    {"a": {"$gt": None}},
    {"a": {"$lt": True}},
    {"a": {"$gt": [1]}},
    {"a": math.nan},
    {"a": math.inf},
    {"a": 2**64},
    {"a": b"bytes"},
    {"a": object()},
    {"a": "nul\x00byte"},
    {"a": "\ud800"},
    {f"f{i}": 1 for i in range(33)},
]


@pytest.mark.parametrize("where", HOSTILE_WHERE, ids=range(len(HOSTILE_WHERE)))
async def test_bad_where_is_rejected(backend: MemoryBackend, where: Any) -> None:
    await backend.store("alice", "a", "garden", {"a": 1})
    with pytest.raises(InvalidInputError, match="where"):
        await backend.list_keys("alice", where=where)
    with pytest.raises(InvalidInputError, match="where"):
        await backend.query("alice", "garden", where=where)
    with pytest.raises(InvalidInputError, match="where"):
        backend.scan("alice", where=where)


# -- paging and scan --------------------------------------------------------------------


async def test_list_keys_pages(store: MemoryBackend) -> None:
    for i in range(12):
        await store.store("alice", f"k{i:02d}", "v", {"even": i % 2 == 0})
    everything = await store.list_keys("alice")
    assert everything == [f"k{i:02d}" for i in reversed(range(12))]
    pages = [await store.list_keys("alice", limit=5, offset=o) for o in (0, 5, 10, 15)]
    assert pages[0] + pages[1] + pages[2] == everything
    assert pages[3] == []
    assert await store.list_keys("alice", offset=10) == everything[10:]
    evens = await store.list_keys("alice", where={"even": True}, limit=2, offset=1)
    assert evens == ["k08", "k06"]


@pytest.mark.parametrize(
    ("limit", "offset"), [(0, 0), (-1, 0), (True, 0), (1.5, 0), ("3", 0), (None, -1), (1, "0")]
)
async def test_bad_paging_is_rejected(backend: MemoryBackend, limit: Any, offset: Any) -> None:
    with pytest.raises(InvalidInputError):
        await backend.list_keys("alice", limit=limit, offset=offset)


async def test_scan_streams_every_memory_in_stable_order(store: MemoryBackend) -> None:
    for i in range(7):
        await store.store("alice", f"a{i}", f"alice {i}", {"i": i})
        await store.store("bob", f"b{i}", f"bob {i}", {"i": i})
    await store.store("alice", "a3", "alice 3 again", {"i": 3})  # an upsert keeps its place
    alice = [entry async for entry in store.scan("alice", page_size=2)]
    assert [e.key for e in alice] == [f"a{i}" for i in range(7)]
    assert alice[3].value == "alice 3 again"
    assert all(isinstance(e, MemoryEntry) and e.user_id == "alice" for e in alice)
    everyone = [entry async for entry in store.scan(page_size=3)]
    assert len(everyone) == 14
    assert [e.key for e in everyone] == [e.key async for e in store.scan(page_size=500)]
    assert {e.user_id for e in everyone} == {"alice", "bob"}
    big = [e.key async for e in store.scan(where={"i": {"$gte": 5}}, page_size=1)]
    assert sorted(big) == ["a5", "a6", "b5", "b6"]
    assert [e async for e in store.scan("nobody")] == []


async def test_scan_sees_deletes_made_while_streaming(store: MemoryBackend) -> None:
    for i in range(6):
        await store.store("alice", f"k{i}", "v")
    seen = []
    async for entry in store.scan("alice", page_size=2):
        seen.append(entry.key)
        if entry.key == "k1":
            await store.delete("alice", "k4")
    assert seen == ["k0", "k1", "k2", "k3", "k5"]


@pytest.mark.parametrize("page_size", [0, -5, 10_001, 2.0, True, "10"])
async def test_bad_scan_arguments_raise_at_the_call(backend: MemoryBackend, page_size: Any) -> None:
    with pytest.raises(InvalidInputError):
        backend.scan("alice", page_size=page_size)
    with pytest.raises(InvalidInputError):
        backend.scan("", page_size=10)


# -- expiry -----------------------------------------------------------------------------


async def _wait_past(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.time()) + 0.05)


async def test_expired_memories_are_invisible_to_every_read(store: MemoryBackend) -> None:
    kept = await store.store("alice", "kept", "the garden gate is green", {"t": 1})
    short = await store.store("alice", "short", "the garden shed is red", {"t": 1}, ttl=1.5)
    assert kept.expires_at is None
    assert short.expires_at is not None
    assert short.expires_at == pytest.approx(short.updated_at + 1.5, abs=0.01)
    retrieved = await store.retrieve("alice", "short")
    assert retrieved is not None
    assert retrieved.expires_at == pytest.approx(short.expires_at)
    assert set(await store.list_keys("alice")) == {"kept", "short"}
    await _wait_past(short.expires_at)
    assert await store.retrieve("alice", "short") is None
    assert await store.list_keys("alice") == ["kept"]
    assert await store.list_keys("alice", where={"t": 1}) == ["kept"]
    assert [h.key for h in await store.query("alice", "garden shed")] == ["kept"]
    assert [e.key async for e in store.scan("alice")] == ["kept"]
    assert await store.history("alice", "short") == []
    assert await store.delete("alice", "short") is False
    assert await store.purge_expired() == 0  # delete already removed it


async def test_purge_expired_and_store_over_an_expired_memory(store: MemoryBackend) -> None:
    first = await store.store("alice", "a", "one", ttl=0.3)
    expiring = [
        await store.store("alice", "a", "two", ttl=0.3),
        await store.store("alice", "b", "bee", ttl=0.3),
        await store.store("bob", "c", "sea", ttl=0.3),
    ]
    await store.store("bob", "d", "dee")
    # Past the last of them, however long the stores took on a loaded machine.
    await _wait_past(max(entry.expires_at or 0.0 for entry in expiring))
    fresh = await store.store("alice", "a", "three")
    assert fresh.created_at > first.created_at  # an expired memory starts afresh
    assert fresh.expires_at is None
    assert [e.value for e in await store.history("alice", "a")] == ["three"]
    assert await store.purge_expired() == 2
    assert await store.purge_expired() == 0
    assert await store.list_keys("alice") == ["a"]
    assert await store.list_keys("bob") == ["d"]


async def test_storing_again_without_ttl_keeps_the_memory(store: MemoryBackend) -> None:
    short = await store.store("alice", "a", "one", ttl=0.3)
    await store.store("alice", "a", "two")
    await _wait_past(short.expires_at or 0.0)
    entry = await store.retrieve("alice", "a")
    assert entry is not None
    assert entry.value == "two"
    assert entry.expires_at is None


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, True, "10", 10**12])
async def test_bad_ttl_is_rejected(backend: MemoryBackend, ttl: Any) -> None:
    with pytest.raises(InvalidInputError, match="ttl"):
        await backend.store("alice", "a", "v", ttl=ttl)
    with pytest.raises(InvalidInputError, match="ttl"):
        await backend.store_many("alice", [{"key": "a", "value": "v", "ttl": ttl}])


# -- history ----------------------------------------------------------------------------


async def test_history_newest_first_with_the_current_value(store: MemoryBackend) -> None:
    for i in range(3):
        await store.store("alice", "pet", f"v{i}", {"i": i})
    await store.store("bob", "pet", "bob's")
    history = await store.history("alice", "pet")
    assert [e.value for e in history] == ["v2", "v1", "v0"]
    assert [dict(e.metadata) for e in history] == [{"i": 2}, {"i": 1}, {"i": 0}]
    assert all(e.user_id == "alice" and e.key == "pet" for e in history)
    assert len({e.created_at for e in history}) == 1
    assert history[0].updated_at > history[1].updated_at > history[2].updated_at
    assert [e.value for e in await store.history("alice", "pet", limit=2)] == ["v2", "v1"]
    assert [e.value for e in await store.history("bob", "pet")] == ["bob's"]
    assert await store.history("alice", "nothing") == []


async def test_history_keeps_at_most_max_versions(store: MemoryBackend) -> None:
    for i in range(15):
        await store.store("alice", "pet", f"v{i}")
    history = await store.history("alice", "pet", limit=100)
    assert [e.value for e in history] == [f"v{i}" for i in reversed(range(5, 15))]


async def test_delete_and_forget_erase_history(store: MemoryBackend) -> None:
    for i in range(3):
        await store.store("alice", "pet", f"v{i}")
        await store.store("alice", "car", f"c{i}")
        await store.store("bob", "pet", f"b{i}")
    assert await store.delete("alice", "pet") is True
    assert await store.history("alice", "pet") == []
    await store.store("alice", "pet", "new")
    assert [e.value for e in await store.history("alice", "pet")] == ["new"]
    assert await store.forget_user("alice") == 2
    assert await store.history("alice", "car") == []
    assert [e.value for e in await store.history("bob", "pet")] == ["b2", "b1", "b0"]


# -- batches ----------------------------------------------------------------------------


async def test_store_many_stores_all(store: MemoryBackend) -> None:
    await store.store("alice", "k0", "old", {"old": True})
    items = [{"key": f"k{i}", "value": f"value {i}", "metadata": {"i": i}} for i in range(50)]
    items[7]["ttl"] = 60
    entries = await store.store_many("alice", items)
    assert [e.key for e in entries] == [f"k{i}" for i in range(50)]
    assert all(e.user_id == "alice" for e in entries)
    assert entries[7].expires_at == pytest.approx(entries[7].updated_at + 60, abs=1)
    assert entries[0].created_at < entries[0].updated_at  # k0 existed: created_at kept
    for entry in (entries[0], entries[7], entries[49]):
        assert await store.retrieve("alice", entry.key) == entry
    assert [e.value for e in await store.history("alice", "k0")] == ["value 0", "old"]
    assert len(await store.list_keys("alice")) == 50
    assert [h.key for h in await store.query("alice", "value 42")][:1] == ["k42"]
    assert await store.store_many("alice", []) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"key": "", "value": "v"},
        {"key": "k", "value": 3},
        {"key": "k", "value": "v", "metadata": {"x": math.nan}},
        {"key": "k", "value": "v", "ttl": -1},
        {"key": "k"},
        {"key": "k", "value": "v", "extra": 1},
        {"key": "k1", "value": "duplicate key"},
        "not a mapping",
    ],
)
async def test_store_many_is_all_or_nothing(backend: MemoryBackend, bad: Any) -> None:
    items = [{"key": "k0", "value": "v"}, {"key": "k1", "value": "v"}, bad]
    await backend.store("alice", "k0", "before")
    with pytest.raises(InvalidInputError, match=r"items\[2\]"):
        await backend.store_many("alice", items)
    if backend.backend_name != "null":
        assert await backend.list_keys("alice") == ["k0"]
        entry = await backend.retrieve("alice", "k0")
        assert entry is not None
        assert entry.value == "before"


@pytest.mark.parametrize("bad", ["abc", {"key": "k", "value": "v"}, 5, None])
async def test_batch_containers_are_checked(backend: MemoryBackend, bad: Any) -> None:
    with pytest.raises(InvalidInputError):
        await backend.store_many("alice", bad)
    with pytest.raises(InvalidInputError):
        await backend.delete_many("alice", bad)


async def test_delete_many(store: MemoryBackend) -> None:
    await store.store_many("alice", [{"key": f"k{i}", "value": "v"} for i in range(5)])
    await store.store("bob", "k1", "v")
    assert await store.delete_many("alice", ["k1", "k3", "missing", "k1"]) == 2
    assert sorted(await store.list_keys("alice")) == ["k0", "k2", "k4"]
    assert await store.list_keys("bob") == ["k1"]
    assert await store.delete_many("alice", []) == 0
    with pytest.raises(InvalidInputError):
        await store.delete_many("alice", ["k0", ""])
    assert sorted(await store.list_keys("alice")) == ["k0", "k2", "k4"]
