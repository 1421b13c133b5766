"""Bad input the conformance suite does not already try: more non-JSON metadata, metadata that
is a ``Mapping`` but not a ``dict``, numbers too long to write, self-referencing and deep
structures, more wrong types and limits, and query text in PostgreSQL ``tsquery``, Unicode and
SQL injection forms. Each is the documented ``InvalidInputError`` (or, for query text, data),
never another exception, and nothing stored changes."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import pytest

from asyncmem import (
    MAX_LIMIT,
    AsyncmemError,
    InvalidInputError,
    MemoryBackend,
    MemoryEntry,
)


class ReadOnlyMapping(Mapping[str, Any]):
    """A ``Mapping`` that is not a ``dict``: the protocol's type for metadata."""

    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def _self_referencing() -> dict[str, Any]:
    node: dict[str, Any] = {}
    node["me"] = node
    return node


def _nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(depth):
        node = {"n": node}
    return node


BAD_METADATA: list[object] = [
    {"when": datetime.datetime(2024, 1, 1)},
    {"price": Decimal("1.5")},
    {"z": 1j},
    {"raw": bytearray(b"x")},
    {"set": frozenset({1})},
    {"neg": float("-inf")},
    {"list": [1, float("nan")]},
    {"deep": [1, {"s": {2}}]},
    {"nested": {1: "int key"}},
    {"nested": {None: "None key"}},
    {("tuple",): "tuple key"},
    {"surrogate": "\udc80"},
    {"\ud800": "surrogate key"},
    {"nul\x00": "NUL key"},
    {"huge": 10**5000},
    {"huge": [-(10**4400)]},
    _self_referencing(),
    _nested(200),
    MappingProxyType({"inner": {1, 2}}),
    ReadOnlyMapping(bad=object()),
    ["a", "list"],
    ("a", "tuple"),
    42,
    b"{}",
    "{}",
]
BAD_VALUES: list[object] = [True, 1.5, bytearray(b"v"), memoryview(b"v"), ["v"], {"v": 1}]
BAD_IDS: list[object] = [True, 1.5, bytearray(b"a"), ["a"], ("a",), object()]
BAD_LIMITS: list[object] = [
    -(2**63),
    2**63,
    10**100,
    -1000,
    float("nan"),
    float("inf"),
    Decimal("5"),
    [5],
]
HOSTILE_TEXTS = [
    "cat & piano",
    "cat | dog",
    "!cat",
    "cat:*",
    "cat <-> piano",
    "cat <2> piano",
    "'cat'",
    "cat\\",
    "NOT cat",
    "-cat",
    "+cat",
    "cat NEAR/2 piano",
    'key:"cat"',
    "{key value}: cat",
    '"cat" * "piano"',
    "“cat”",
    "ＣＡＴ",
    "CAT",
    "%' OR 1=1 --",
    "') UNION SELECT value FROM memories --",
    "cat'); DELETE FROM memories; --",
    "\\%cat\\_",
    "[a-z]*",
    "$.secret",
    "cat\u200b",
    "c\u0301at",
    "\ufeffcat",
    "cat\r\n\tpiano",
]
FINDS_CAT = {"cat & piano", "!cat", "cat:*", "'cat'", "“cat”", "ＣＡＴ", "CAT", "-cat", "+cat"}


async def _fill(backend: MemoryBackend) -> None:
    await backend.store("alice", "pet", "Alice has a grey cat who sleeps on the piano", {"n": 1})
    await backend.store("alice", "job", "Alice works night shifts as a nurse")
    await backend.store("mallory", "pet", "mallory cat piano % _ ' \" & | ! :*")


async def _snapshot(backend: MemoryBackend) -> list[MemoryEntry | None]:
    result: list[MemoryEntry | None] = []
    for user in ("alice", "mallory"):
        for key in await backend.list_keys(user):
            result.append(await backend.retrieve(user, key))
    return result


async def test_more_bad_metadata_is_rejected(backend: MemoryBackend) -> None:
    await _fill(backend)
    before = await _snapshot(backend)
    for bad in BAD_METADATA:
        for key in ("pet", "new-key"):
            with pytest.raises(InvalidInputError):
                await backend.store("alice", key, "new value", bad)  # type: ignore[arg-type]
    assert await _snapshot(backend) == before


@pytest.mark.parametrize(
    "metadata",
    [
        MappingProxyType({"a": 1, "b": [1, 2]}),
        ReadOnlyMapping(a=1, nested=MappingProxyType({"b": (1, 2)})),
        {"deep": _nested(60)},
        {"big": 10**4000, "small": -(10**4000)},
        {"tuple": (1, "two", None)},
    ],
    ids=["mappingproxy", "custom-mapping", "60-deep", "4000-digit-ints", "tuple"],
)
async def test_any_json_mapping_is_accepted(store: MemoryBackend, metadata: Any) -> None:
    """The protocol types metadata as ``Mapping``: any mapping of JSON values is stored, as a
    plain JSON object."""
    stored = await store.store("alice", "k", "v", metadata)
    entry = await store.retrieve("alice", "k")
    assert entry == stored
    assert isinstance(entry.metadata, dict)
    assert set(entry.metadata) == set(metadata)
    if "tuple" in metadata:
        assert entry.metadata["tuple"] == [1, "two", None]


async def test_more_bad_values_ids_and_limits_are_rejected(backend: MemoryBackend) -> None:
    await _fill(backend)
    before = await _snapshot(backend)
    for value in BAD_VALUES:
        with pytest.raises(InvalidInputError):
            await backend.store("alice", "pet", value)  # type: ignore[arg-type]
    for bad in BAD_IDS:
        calls: list[tuple[Any, tuple[object, ...]]] = [
            (backend.store, (bad, "k", "v")),
            (backend.store, ("alice", bad, "v")),
            (backend.retrieve, ("alice", bad)),
            (backend.query, (bad, "cat")),
            (backend.list_keys, (bad,)),
            (backend.delete, (bad, "pet")),
            (backend.forget_user, (bad,)),
        ]
        for method, arguments in calls:
            with pytest.raises(InvalidInputError):
                await method(*arguments)
    for limit in BAD_LIMITS:
        with pytest.raises(InvalidInputError):
            await backend.query("alice", "cat", limit)  # type: ignore[arg-type]
    assert await _snapshot(backend) == before


async def test_limit_bounds_are_accepted(store: MemoryBackend) -> None:
    await _fill(store)
    assert len(await store.query("alice", "cat", 1)) == 1
    assert len(await store.query("alice", "cat", MAX_LIMIT)) == 1


async def test_more_hostile_query_text_is_data(store: MemoryBackend) -> None:
    await _fill(store)
    before = await _snapshot(store)
    for text in HOSTILE_TEXTS:
        try:
            hits = await store.query("alice", text, limit=MAX_LIMIT)
        except AsyncmemError as exc:  # pragma: no cover - the message explains
            raise AssertionError(f"query text {text!r} was treated as syntax: {exc!r}") from exc
        assert all(hit.user_id == "alice" for hit in hits), text
        if text in FINDS_CAT:
            assert [hit.key for hit in hits] == ["pet"], text
    assert await _snapshot(store) == before


@pytest.mark.parametrize("ttl", [10**400, -(10**400), float("nan"), float("inf"), 0, -1])
async def test_ttl_beyond_float_range_is_invalid_input(backend: MemoryBackend, ttl: Any) -> None:
    await backend.store("alice", "kept", "kept value")
    with pytest.raises(InvalidInputError, match="ttl"):
        await backend.store("alice", "kept", "replaced", ttl=ttl)
    with pytest.raises(InvalidInputError, match="ttl"):
        await backend.store_many("alice", [{"key": "kept", "value": "replaced", "ttl": ttl}])
    if backend.backend_name != "null":
        entry = await backend.retrieve("alice", "kept")
        assert entry is not None
        assert entry.value == "kept value"


async def test_a_session_id_larger_than_its_limit_is_invalid_input(backend: MemoryBackend) -> None:
    from asyncmem.backend import MAX_SESSION_BYTES

    # As JSON text the session has its quotes: at the limit, then one byte past it.
    await backend.store("alice", "turn", "kept", {"session": "s" * (MAX_SESSION_BYTES - 2)})
    with pytest.raises(InvalidInputError, match="session"):
        await backend.store("alice", "turn", "replaced", {"session": "s" * (MAX_SESSION_BYTES - 1)})
    with pytest.raises(InvalidInputError, match="session"):
        await backend.store("alice", "turn", "replaced", {"session": "é" * MAX_SESSION_BYTES})
    if backend.backend_name != "null":
        entry = await backend.retrieve("alice", "turn")
        assert entry is not None
        assert entry.value == "kept"
