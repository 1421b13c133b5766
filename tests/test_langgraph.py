"""AsyncmemStore: LangGraph's BaseStore over asyncmem backends, checked against LangGraph's own
InMemoryStore on random operation sequences, and driven by langmem's memory tools."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from asyncmem import InvalidInputError, MemoryBackend, SQLBackend
from asyncmem.langgraph import INDEX_USER, AsyncmemStore, item_key, namespace_user


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SQLBackend]:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as opened:
        yield opened


def test_an_embedding_index_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidInputError, match="without embeddings"):
        AsyncmemStore(None, index={"dims": 3, "embed": "fake"})  # type: ignore[arg-type]


async def test_put_get_search_delete_on_every_backend(store: MemoryBackend) -> None:
    lg = AsyncmemStore(store)
    await lg.aput(("users", "alice"), "pet", {"text": "Alice has a grey cat", "n": 1})
    await lg.aput(("users", "alice"), "job", {"text": "Alice is a night nurse", "n": 2})
    await lg.aput(("users", "bob"), "pet", {"text": "Bob has a dog", "n": 3})
    item = await lg.aget(("users", "alice"), "pet")
    assert isinstance(item, Item)
    assert item.value == {"text": "Alice has a grey cat", "n": 1}
    assert (item.namespace, item.key) == (("users", "alice"), "pet")
    assert item.created_at.tzinfo is not None
    hits = await lg.asearch(("users",), query="which cat?")
    assert [(hit.namespace, hit.key) for hit in hits] == [(("users", "alice"), "pet")]
    assert hits[0].score is not None
    assert {hit.key for hit in await lg.asearch(("users", "alice"))} == {"pet", "job"}
    filtered = await lg.asearch(("users",), filter={"n": {"$gte": 2}})
    assert {(hit.namespace[1], hit.key) for hit in filtered} == {("alice", "job"), ("bob", "pet")}
    assert await lg.alist_namespaces() == [("users", "alice"), ("users", "bob")]
    assert await lg.alist_namespaces(max_depth=1) == [("users",)]
    await lg.adelete(("users", "bob"), "pet")
    assert await lg.aget(("users", "bob"), "pet") is None
    assert await lg.alist_namespaces(prefix=("users",)) == [("users", "alice")]
    assert await store.list_keys(INDEX_USER) == [namespace_user(("users", "alice"))]


async def test_namespaces_and_keys_never_collide(sqlite: SQLBackend) -> None:
    lg = AsyncmemStore(sqlite)
    long_label = "n" * 300
    namespaces = [("a",), ("a", "b"), ("a b",), ("#a",), (long_label,), (long_label, "x")]
    namespaces += [(long_label + "y",), ("langgraph!namespaces",)]
    keys = ["k", "", "#k", "\\k", "\\\\k", "k" * 256, "k" * 300, "k" * 299 + "j", "a\x00b"]
    keys += ["#" + "k" * 255, "ключ 鍵"]
    for namespace in namespaces:
        for key in keys:
            await lg.aput(namespace, key, {"ns": list(namespace), "key": key})
    assert len({namespace_user(ns) for ns in namespaces}) == len(namespaces)
    assert len({item_key(key) for key in keys}) == len(keys)
    for namespace in namespaces:
        for key in keys:
            item = await lg.aget(namespace, key)
            assert item is not None, (namespace, key)
            assert item.value == {"ns": list(namespace), "key": key}
            assert item.key == key
        listed = await lg.asearch(namespace, limit=100)
        assert sorted(hit.key for hit in listed if hit.namespace == namespace) == sorted(keys)
    assert await lg.alist_namespaces(limit=100) == sorted(namespaces)
    assert await lg.alist_namespaces(prefix=(long_label,)) == [(long_label,), (long_label, "x")]


async def test_values_larger_than_the_metadata_limit(sqlite: SQLBackend) -> None:
    lg = AsyncmemStore(sqlite)
    value = {"notes": ["a long note about cats and pianos " * 50 for _ in range(150)]}
    assert len(json.dumps(value)) > 200_000
    await lg.aput(("docs",), "big", value)
    item = await lg.aget(("docs",), "big")
    assert item is not None
    assert item.value == value
    with pytest.raises(InvalidInputError, match="the limit is"):
        await lg.aput(("docs",), "huge", {"x": "y" * (2 * 1024 * 1024)})
    with pytest.raises(InvalidInputError, match="JSON"):
        await lg.aput(("docs",), "odd", {"when": object()})
    assert await lg.aget(("docs",), "huge") is None


async def test_bad_namespaces_are_langgraphs_errors(sqlite: SQLBackend) -> None:
    lg = AsyncmemStore(sqlite)
    for namespace in [(), ("a.b",), ("",), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            await lg.aput(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        await lg.abatch([PutOp(("a.b",), "k", {"v": 1})])
    assert await lg.alist_namespaces() == []


async def test_ttl_in_minutes_refreshed_by_reads(sqlite: SQLBackend) -> None:
    lg = AsyncmemStore(sqlite, ttl={"default_ttl": 10, "refresh_on_read": True})
    await lg.aput(("s",), "default", {"v": 1})
    await lg.aput(("s",), "short", {"v": 2}, ttl=0.002)
    await lg.aput(("s",), "forever", {"v": 3}, ttl=None)
    user = namespace_user(("s",))
    default = await sqlite.retrieve(user, "default")
    assert default is not None
    assert default.expires_at is not None
    assert 590 < default.expires_at - default.updated_at <= 600
    forever = await sqlite.retrieve(user, "forever")
    assert forever is not None
    assert forever.expires_at is None
    first = default.expires_at
    item = await lg.aget(("s",), "default")
    assert item is not None
    refreshed = await sqlite.retrieve(user, "default")
    assert refreshed is not None
    assert refreshed.expires_at is not None
    assert refreshed.expires_at > first
    assert item.updated_at.timestamp() == pytest.approx(json_updated(default))
    await lg.aget(("s",), "default", refresh_ttl=False)
    unrefreshed = await sqlite.retrieve(user, "default")
    assert unrefreshed is not None
    assert unrefreshed.expires_at == refreshed.expires_at
    await asyncio.sleep(0.3)
    assert await lg.aget(("s",), "short") is None
    assert {hit.key for hit in await lg.asearch(("s",))} == {"default", "forever"}


def json_updated(entry: Any) -> float:
    return float(entry.metadata["updated_at"])


async def test_ttl_of_a_whole_namespace_leaves_it_unlisted(sqlite: SQLBackend) -> None:
    lg = AsyncmemStore(sqlite)
    await lg.aput(("gone",), "k", {"v": 1}, ttl=0.001)
    await lg.aput(("kept",), "k", {"v": 1})
    await asyncio.sleep(0.2)
    assert await lg.alist_namespaces() == [("kept",)]


def test_sync_methods_on_the_stores_own_loop(tmp_path: Path) -> None:
    lg = AsyncmemStore(SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}"))
    try:
        lg.put(("users", "alice"), "pet", {"text": "a grey cat"})
        item = lg.get(("users", "alice"), "pet")
        assert item is not None
        assert item.value == {"text": "a grey cat"}
        assert [hit.key for hit in lg.search(("users",), query="cat")] == ["pet"]
        assert lg.list_namespaces() == [("users", "alice")]
        got, listed = lg.batch([GetOp(("users", "alice"), "pet"), ListNamespacesOp(max_depth=1)])
        assert isinstance(got, Item)
        assert listed == [("users",)]
        lg.delete(("users", "alice"), "pet")
        assert lg.get(("users", "alice"), "pet") is None
    finally:
        lg.close()
    assert lg.backend.closed  # type: ignore[attr-defined]


async def test_sync_methods_from_a_thread_use_the_running_loop(sqlite: SQLBackend) -> None:
    lg = AsyncmemStore(sqlite)
    await lg.aput(("t",), "k", {"v": 1})
    item = await asyncio.to_thread(lg.get, ("t",), "k")
    assert item is not None
    assert item.value == {"v": 1}
    await asyncio.to_thread(lg.put, ("t",), "k2", {"v": 2})
    assert await lg.aget(("t",), "k2") is not None
    with pytest.raises(InvalidInputError, match="inside a running event loop"):
        lg.get(("t",), "k")


async def test_a_batch_reads_before_it_writes(sqlite: SQLBackend) -> None:
    lg = AsyncmemStore(sqlite)
    reference = Reference()
    ops = [
        PutOp(("b",), "k", {"v": 1}),
        GetOp(("b",), "k"),
        PutOp(("b",), "k", {"v": 2}),
        SearchOp(("b",)),
        ListNamespacesOp(),
    ]
    ours, theirs = await lg.abatch(ops), await reference.abatch(ops)
    assert [normalize(x) for x in ours] == [normalize(x) for x in theirs]
    assert (await lg.aget(("b",), "k")).value == {"v": 2}  # type: ignore[union-attr]


# -- the differential test ------------------------------------------------------------------


class Reference(InMemoryStore):
    """InMemoryStore, less one quirk: it lists namespaces that were only read, or emptied."""

    def _handle_list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        for namespace in [ns for ns, items in self._data.items() if not items]:
            del self._data[namespace]
        return super()._handle_list_namespaces(op)


WORDS = ["cat", "piano", "nurse", "garden", "tea", "violin", "river", "olive"]
NAMESPACES = [("u", "a"), ("u", "b"), ("u", "a", "notes"), ("v",), ("v", "x", "y"), ("w", "a")]
KEYS = ["k1", "k2", "k3", "#k", "", "k" * 300]
KINDS = ["fact", "turn"]


def normalize(result: Any) -> Any:
    """An answer, comparable across stores: timestamps and scores left out."""
    if isinstance(result, Item):
        return (result.namespace, result.key, json.dumps(result.value, sort_keys=True))
    if isinstance(result, list) and result and isinstance(result[0], Item):
        return sorted(normalize(item) for item in result)
    return result


def random_op(rng: random.Random) -> Any:
    namespace = rng.choice(NAMESPACES)
    roll = rng.random()
    if roll < 0.4:
        value = {"text": " ".join(rng.sample(WORDS, 2)), "n": rng.randrange(5)}
        value["kind"] = rng.choice(KINDS)
        if rng.random() < 0.3:
            value["tags"] = {"colour": rng.choice(["red", "blue"])}
        return PutOp(namespace, rng.choice(KEYS), value)
    if roll < 0.5:
        return PutOp(namespace, rng.choice(KEYS), None)
    if roll < 0.65:
        return GetOp(namespace, rng.choice(KEYS))
    if roll < 0.85:
        prefix = namespace[: rng.randrange(len(namespace) + 1)]
        filters = [
            None,
            {"kind": rng.choice(KINDS)},
            {"n": {"$gte": rng.randrange(5)}},
            {"n": {"$lt": 3}, "kind": "fact"},
            {"tags": {"colour": "red"}},
            {"n": {"$ne": 2}},
        ]
        return SearchOp(prefix, rng.choice(filters), limit=1000)
    conditions: list[MatchCondition] = []
    if rng.random() < 0.5:
        conditions.append(MatchCondition("prefix", rng.choice([("u",), ("u", "*"), ("v",)])))
    if rng.random() < 0.3:
        conditions.append(MatchCondition("suffix", rng.choice([("a",), ("*", "a"), ("y",)])))
    return ListNamespacesOp(
        tuple(conditions),
        max_depth=rng.choice([None, None, 1, 2]),
        limit=rng.choice([100, 2, 3]),
        offset=rng.choice([0, 0, 1]),
    )


async def compare(lg: AsyncmemStore, reference: Reference, op: Any) -> None:
    (ours,), (theirs,) = await lg.abatch([op]), await reference.abatch([op])
    assert normalize(ours) == normalize(theirs), op


DIFFERENTIAL_SEEDS = range(4)
DIFFERENTIAL_OPS = 250
"""4 sequences of 250 operations, 1,000 in all, each answer compared with InMemoryStore's, on
SQLite and on PostgreSQL."""


@pytest.mark.parametrize("seed", DIFFERENTIAL_SEEDS)
async def test_same_answers_as_langgraphs_in_memory_store(sql_store: SQLBackend, seed: int) -> None:
    rng = random.Random(seed)
    lg, reference = AsyncmemStore(sql_store), Reference()
    for _ in range(DIFFERENTIAL_OPS):
        op = random_op(rng)
        await compare(lg, reference, op)
        if rng.random() < 0.1:
            # A paged search: the same number of items, all from the full answer.
            prefix = rng.choice(NAMESPACES)[:1]
            limit, offset = rng.randrange(1, 4), rng.randrange(3)
            page = await lg.asearch(prefix, limit=limit, offset=offset)
            everything = normalize(await reference.asearch(prefix, limit=1000))
            assert len(page) == len(everything[offset : offset + limit])
            assert set(normalize(page)) <= set(everything)
        if rng.random() < 0.1:
            # A query: asyncmem ranks by words, so the answer is the items holding the word.
            word = rng.choice(WORDS)
            hits = await lg.asearch((), query=word, limit=1000)
            everything = normalize(await reference.asearch((), limit=1000))
            holding = {item for item in everything if word in json.loads(item[2])["text"]}
            assert set(normalize(hits)) == holding


# -- langmem ------------------------------------------------------------------------------


# trustcall (langmem's dependency) imports Send from where LangGraph 1.x deprecated it.
@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
async def test_langmem_memory_tools_run_on_the_store(sqlite: SQLBackend) -> None:
    from langmem import create_manage_memory_tool, create_search_memory_tool

    lg = AsyncmemStore(sqlite)
    namespace = ("memories", "alice")
    manage = create_manage_memory_tool(namespace, store=lg)
    search = create_search_memory_tool(namespace, store=lg)
    created = await manage.ainvoke({"content": "Alice has a grey cat called Miso"})
    assert "created" in str(created)
    await manage.ainvoke({"content": "Alice works night shifts as a nurse"})
    found = await search.ainvoke({"query": "cat"})
    assert "Miso" in str(found)
    assert "nurse" not in str(found)
    (memory_id,) = [item.key for item in await lg.asearch(namespace, query="Miso")]
    await manage.ainvoke({"content": "Alice has two cats now", "action": "update", "id": memory_id})
    item = await lg.aget(namespace, memory_id)
    assert item is not None
    assert item.value == {"content": "Alice has two cats now"}
    await manage.ainvoke({"action": "delete", "id": memory_id})
    assert await lg.aget(namespace, memory_id) is None
    assert len(await lg.asearch(namespace)) == 1
