"""Property-based tests (hypothesis) of the contract on every backend that stores.

Arbitrary Unicode ids and values (emoji, right-to-left scripts, combining marks, lengths up to
the limits), arbitrary JSON metadata, and random sequences of operations checked against a
plain dict model of the contract. Each backend is opened once per test on a real database (a
SQLite file under ``tmp_path``, a PostgreSQL schema), and each example starts from users of
its own.

Example counts come from a settings profile: ``fast`` by default (the counts are in
``PROFILES``), ``thorough`` (ten times more) with ``ASYNCMEM_TEST_HYPOTHESIS=thorough``.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from asyncmem import (
    MAX_ID_LENGTH,
    MAX_LIMIT,
    MAX_VALUE_BYTES,
    InvalidInputError,
    MemoryBackend,
)
from tests.backends import BACKEND_FACTORIES, NON_PERSISTENT

T = TypeVar("T")

STORES = sorted(name for name in BACKEND_FACTORIES if name not in NON_PERSISTENT)
SCALE = 10 if os.environ.get("ASYNCMEM_TEST_HYPOTHESIS") == "thorough" else 1
PROFILES = {
    "round_trip": 40 * SCALE,
    "metadata": 40 * SCALE,
    "isolation": 25 * SCALE,
    "value_size": 10 * SCALE,
    "machine_runs": 10 * SCALE,
    "machine_steps": 30,
}


def _settings(examples: int, **extra: Any) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        **extra,
    )


# --- strategies ------------------------------------------------------------------------------

CHARACTERS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
"""Any Unicode scalar value but NUL (the contract rejects NUL and lone surrogates)."""

TRICKY = [
    "alice",
    "Alice",
    "ALICE",
    "alic",
    "alice ",
    " alice",
    "alice\t",
    "ali\u200bce",
    "ａｌｉｃｅ",
    "é",
    "e\u0301",
    "ß",
    "ss",
    "SS",
    "İ",
    "i\u0307",
    "ǅ",
    "%",
    "_",
    "*",
    "'",
    '"',
    "\\",
    "a%",
    "a_",
    "' OR '1'='1",
    "שלום",
    "مرحبا",
    "🐈",
    "👩‍👩‍👧",
    "🇺🇦",
    "a" * MAX_ID_LENGTH,
    "🐈" * MAX_ID_LENGTH,
    "e\u0301" * (MAX_ID_LENGTH // 2),
]
"""Ids that differ only in case, normalization, invisible characters, LIKE/GLOB wildcards or
quotes, right-to-left and astral characters, and ids at the length limit."""

IDS = st.one_of(
    st.sampled_from(TRICKY),
    st.text(CHARACTERS, min_size=1, max_size=24),
    st.text(CHARACTERS, min_size=MAX_ID_LENGTH - 8, max_size=MAX_ID_LENGTH),
)
VALUES = st.one_of(
    st.text(CHARACTERS, max_size=200),
    st.sampled_from(["", " ", "Miso 🐈 שלום e\u0301", "%_*'\"\\", "x" * 10_000]),
    st.builds(
        lambda unit, n: unit * n,
        st.text(CHARACTERS, min_size=1, max_size=6),
        st.integers(1, 20_000),
    ),
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(CHARACTERS, max_size=20),
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(CHARACTERS, max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
METADATA = st.dictionaries(st.text(CHARACTERS, max_size=12), JSON, max_size=6)


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON: numbers compare by value, so a float that a JSON column returns as the
    integer of the same value (PostgreSQL ``jsonb`` keeps numbers as decimals) is equal."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return Decimal(repr(a)) == Decimal(repr(b)) if math.isfinite(a) else a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# --- running a backend from hypothesis' synchronous tests ------------------------------------


class Opened:
    """One backend, open for a whole test, on a loop the synchronous hypothesis test drives."""

    def __init__(
        self, factory: Callable[[Path], AbstractAsyncContextManager[MemoryBackend]], tmp_path: Path
    ) -> None:
        self.runner = asyncio.Runner()
        self._context = factory(tmp_path)
        self.backend = self.run(self._context.__aenter__())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coroutine)

    def close(self) -> None:
        try:
            self.run(self._context.__aexit__(None, None, None))
        finally:
            self.runner.close()


@pytest.fixture(params=STORES)
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opened]:
    handle = Opened(BACKEND_FACTORIES[request.param], tmp_path)
    try:
        yield handle
    finally:
        handle.close()


# --- single-call properties ------------------------------------------------------------------


def test_any_ids_and_values_round_trip(opened: Opened) -> None:
    backend = opened.backend

    @_settings(PROFILES["round_trip"])
    @given(user=IDS, key=IDS, value=VALUES)
    def check(user: str, key: str, value: str) -> None:
        opened.run(backend.forget_user(user))
        stored = opened.run(backend.store(user, key, value))
        assert (stored.user_id, stored.key, stored.value) == (user, key, value)
        assert opened.run(backend.retrieve(user, key)) == stored
        assert opened.run(backend.list_keys(user)) == [key]
        assert opened.run(backend.delete(user, key)) is True
        assert opened.run(backend.retrieve(user, key)) is None

    check()


def test_any_json_metadata_round_trips(opened: Opened) -> None:
    backend = opened.backend

    @_settings(PROFILES["metadata"])
    @given(metadata=METADATA)
    def check(metadata: dict[str, Any]) -> None:
        stored = opened.run(backend.store("meta", "k", "v", metadata))
        assert stored.metadata == metadata
        entry = opened.run(backend.retrieve("meta", "k"))
        assert entry is not None
        assert _same_json(dict(entry.metadata), metadata), (entry.metadata, metadata)

    check()


def test_similar_users_stay_apart(opened: Opened) -> None:
    """Two different ids, however alike, are two users: a write, query, list, delete or
    forget through one never touches the other."""
    backend = opened.backend

    @_settings(PROFILES["isolation"])
    @given(a=IDS, b=IDS, key=IDS, word=st.sampled_from(["apple", "zebra", "piano"]))
    def check(a: str, b: str, key: str, word: str) -> None:
        if a == b:
            return
        for user in (a, b):
            opened.run(backend.forget_user(user))
        opened.run(backend.store(a, key, f"secret of a {word}"))
        opened.run(backend.store(b, key, f"secret of b {word}"))
        opened.run(backend.store(b, "only-b", f"b {word}"))
        for user, other in ((a, b), (b, a)):
            hits = opened.run(backend.query(user, word, limit=MAX_LIMIT))
            assert {hit.user_id for hit in hits} == {user}
            assert all(f"of {'a' if other == a else 'b'}" not in hit.value for hit in hits)
        assert opened.run(backend.list_keys(a)) == [key]
        assert opened.run(backend.delete(a, "only-b")) is False
        assert opened.run(backend.forget_user(a)) == 1
        entry = opened.run(backend.retrieve(b, key))
        assert entry is not None
        assert entry.value == f"secret of b {word}"
        assert sorted(opened.run(backend.list_keys(b))) == sorted({key, "only-b"})

    check()


def test_value_size_limit_is_in_utf8_bytes(opened: Opened) -> None:
    backend = opened.backend

    @_settings(PROFILES["value_size"])
    @given(unit=st.sampled_from(["a", "é", "€", "🐈", "e\u0301"]), slack=st.integers(-3, 3))
    def check(unit: str, slack: int) -> None:
        size = len(unit.encode())
        count = MAX_VALUE_BYTES // size + slack
        value = unit * count
        fits = len(value.encode()) <= MAX_VALUE_BYTES
        before = opened.run(backend.store("size", "k", "before"))
        if fits:
            assert opened.run(backend.store("size", "k", value)).value == value
        else:
            with pytest.raises(InvalidInputError):
                opened.run(backend.store("size", "k", value))
            assert opened.run(backend.retrieve("size", "k")) == before

    check()


# --- random operation sequences against a model ---------------------------------------------

WORDS = ["apple", "zebra", "piano", "violet", "copper"]
MODEL_USERS = st.sampled_from(["u", "U", "u ", "u%", "u_", "ü", "u\u0308", "🐈"]) | IDS
MODEL_KEYS = st.sampled_from(["k", "K", "k%", "k_", "*", "é", "e\u0301"]) | IDS


class ContractModel(RuleBasedStateMachine):
    """The contract as a dict: users → keys (most recently updated first) → (value, metadata,
    created_at). Every rule calls the backend and compares it with the model."""

    opened: Opened
    users_seen: ClassVar[set[str]] = set()

    users = Bundle("users")

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, dict[str, tuple[str, dict[str, Any], float]]] = {}

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.opened.run(coroutine)

    @initialize()
    def start_empty(self) -> None:
        for user in sorted(ContractModel.users_seen):
            self.run(self.opened.backend.forget_user(user))
        ContractModel.users_seen.clear()

    @rule(target=users, user=MODEL_USERS)
    def add_user(self, user: str) -> str:
        ContractModel.users_seen.add(user)
        return user

    @rule(
        user=users,
        key=MODEL_KEYS,
        text=st.text(CHARACTERS, max_size=40),
        word=st.sampled_from(WORDS),
        metadata=METADATA,
    )
    def store(self, user: str, key: str, text: str, word: str, metadata: dict[str, Any]) -> None:
        value = f"{text} {word} "
        entry = self.run(self.opened.backend.store(user, key, value, metadata))
        memories = self.model.setdefault(user, {})
        old = memories.pop(key, None)
        if old is not None:
            assert entry.created_at == old[2]
        assert entry.updated_at >= entry.created_at
        self.model[user] = {key: (value, metadata, entry.created_at), **memories}

    @rule(user=users, key=MODEL_KEYS)
    def retrieve(self, user: str, key: str) -> None:
        entry = self.run(self.opened.backend.retrieve(user, key))
        expected = self.model.get(user, {}).get(key)
        if expected is None:
            assert entry is None
        else:
            assert entry is not None
            assert (entry.user_id, entry.key, entry.value) == (user, key, expected[0])
            assert _same_json(dict(entry.metadata), expected[1])
            assert entry.created_at == expected[2]

    @rule(user=users, key=MODEL_KEYS)
    def delete(self, user: str, key: str) -> None:
        removed = self.run(self.opened.backend.delete(user, key))
        assert removed is (self.model.get(user, {}).pop(key, None) is not None)

    @rule(user=users)
    def forget_user(self, user: str) -> None:
        count = self.run(self.opened.backend.forget_user(user))
        assert count == len(self.model.pop(user, {}))

    @rule(user=users)
    def list_keys(self, user: str) -> None:
        assert self.run(self.opened.backend.list_keys(user)) == list(self.model.get(user, {}))

    @rule(user=users, word=st.sampled_from(WORDS))
    def query(self, user: str, word: str) -> None:
        hits = self.run(self.opened.backend.query(user, word, limit=MAX_LIMIT))
        memories = self.model.get(user, {})
        for hit in hits:
            assert hit.user_id == user
            assert hit.key in memories
            assert hit.value == memories[hit.key][0]
        assert len({hit.key for hit in hits}) == len(hits)
        expected = {key for key, (value, _, _) in memories.items() if f" {word} " in value}
        assert expected <= {hit.key for hit in hits}

    @rule(
        user=users,
        key=MODEL_KEYS,
        bad=st.sampled_from(
            [
                ("value", "a\x00b"),
                ("value", "\ud800"),
                ("value", "x" * (MAX_VALUE_BYTES + 1)),
                ("metadata", {"set": {1}}),
                ("metadata", {"nan": float("nan")}),
                ("metadata", {"bytes": b"x"}),
                ("key", ""),
                ("key", "k" * (MAX_ID_LENGTH + 1)),
            ]
        ),
    )
    def rejected_store(self, user: str, key: str, bad: tuple[str, Any]) -> None:
        arguments: dict[str, Any] = {"value": "v", "metadata": None, "key": key} | dict([bad])
        with pytest.raises(InvalidInputError):
            self.run(
                self.opened.backend.store(
                    user, arguments["key"], arguments["value"], arguments["metadata"]
                )
            )


def test_random_operations_follow_the_model(opened: Opened) -> None:
    ContractModel.opened = opened
    ContractModel.users_seen = set()
    run_state_machine_as_test(
        ContractModel,
        settings=_settings(PROFILES["machine_runs"], stateful_step_count=PROFILES["machine_steps"]),
    )
