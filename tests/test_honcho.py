"""HonchoBackend against the real honcho-ai SDK, on an in-memory Honcho server behind
httpx.MockTransport (tests/fake_honcho.py), or on a live server when
ASYNCMEM_TEST_HONCHO_URL is set (the tests marked as needing the fake are then skipped)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from asyncmem import (
    BackendClosedError,
    BackendError,
    BackendUnavailableError,
    InvalidInputError,
    MemoryBackend,
    open_backend,
)
from asyncmem.backend import MAX_VALUE_BYTES
from asyncmem.honcho import MAX_MESSAGE_CHARS, HonchoBackend
from tests.fake_honcho import TEST_KEY, FakeHoncho, fake_backend, honcho_backend, live_settings

honcho = pytest.importorskip("honcho")

LOCAL = "http://127.0.0.1:8000"
SESSION_PATH = re.compile(r"/v3/workspaces/[^/]+/sessions/([^/]+)")
needs_fake = pytest.mark.skipif(
    live_settings() is not None, reason="drives the fake server's state and faults"
)


@pytest.fixture
def fake() -> FakeHoncho:
    return FakeHoncho(api_key=TEST_KEY)


def make(fake: FakeHoncho, **options: object) -> HonchoBackend:
    backend: HonchoBackend = fake_backend(fake, **options)
    return backend


@pytest.fixture
async def memory(fake: FakeHoncho) -> AsyncIterator[HonchoBackend]:
    async with make(fake) as backend:
        yield backend


@pytest.fixture
async def any_memory() -> AsyncIterator[HonchoBackend]:
    """The fake or, when configured, the live server."""
    async with honcho_backend() as backend:
        yield backend


async def until(condition: Callable[[], bool]) -> None:
    """Wait (up to 10 s) for the fake server's threads to reach ``condition``."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")


def user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


# The contract, on the fake or the live server.


async def test_satisfies_the_protocol(any_memory: HonchoBackend) -> None:
    assert isinstance(any_memory, MemoryBackend)
    assert any_memory.backend_name == "honcho"
    assert await any_memory.is_available()


async def test_store_retrieve_and_upsert(any_memory: HonchoBackend) -> None:
    alice = user()
    first = await any_memory.store(alice, "pet", "Alice has a grey cat called Miso", {"a": 1})
    got = await any_memory.retrieve(alice, "pet")
    assert got == first
    assert got.metadata == {"a": 1}
    second = await any_memory.store(alice, "pet", "Alice adopted a puppy", {"b": [1, 2]})
    got = await any_memory.retrieve(alice, "pet")
    assert got is not None
    assert got.value == "Alice adopted a puppy"
    assert got.metadata == {"b": [1, 2]}
    assert got.created_at == first.created_at
    assert got.updated_at > first.updated_at
    assert got == second
    assert await any_memory.retrieve(alice, "nothing") is None


async def test_metadata_beyond_honchos_own_limits_round_trips(any_memory: HonchoBackend) -> None:
    alice = user()
    nested: dict[str, object] = {"leaf": "ok"}
    for level in range(12):
        nested = {f"level{level}": nested}
    wide = {f"k{i}": i for i in range(150)}
    metadata = {"nested": nested, "wide": wide, "text": "ünïcode ✓", "f": 1.5, "n": None}
    await any_memory.store(alice, "deep", "v", metadata)
    got = await any_memory.retrieve(alice, "deep")
    assert got is not None
    assert got.metadata == metadata


async def test_users_are_isolated(any_memory: HonchoBackend) -> None:
    alice, bob = user(), user()
    await any_memory.store(alice, "pet", "Alice has a grey cat")
    await any_memory.store(bob, "pet", "Bob has a goldfish")
    assert (await any_memory.retrieve(bob, "pet")).value == "Bob has a goldfish"  # type: ignore[union-attr]
    assert [e.user_id for e in await any_memory.query(bob, "cat goldfish")] == [bob]
    assert await any_memory.list_keys(bob) == ["pet"]
    assert await any_memory.delete(bob, "pet")
    assert (await any_memory.retrieve(alice, "pet")).value == "Alice has a grey cat"  # type: ignore[union-attr]
    assert await any_memory.forget_user(bob) == 0
    assert await any_memory.list_keys(alice) == ["pet"]


async def test_list_keys_most_recently_updated_first(any_memory: HonchoBackend) -> None:
    alice = user()
    for key in ["a", "b", "c"]:
        await any_memory.store(alice, key, f"value {key}")
    await any_memory.store(alice, "a", "updated")
    assert await any_memory.list_keys(alice) == ["a", "c", "b"]
    assert await any_memory.list_keys(user()) == []


async def test_query_ranks_and_forgets_replaced_values(any_memory: HonchoBackend) -> None:
    alice = user()
    await any_memory.store(alice, "pet", "Alice has a grey cat called Miso")
    await any_memory.store(alice, "food", "Alice loves sushi")
    await any_memory.store(alice, "job", "Alice works as a nurse")
    hits = await any_memory.query(alice, "What is the name of Alice's cat?")
    assert hits
    assert hits[0].key == "pet"
    assert hits[0].score is not None
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))  # type: ignore[operator]
    await any_memory.store(alice, "pet", "Alice gave the goldfish away")
    hits = await any_memory.query(alice, "grey cat Miso")
    assert "pet" not in [h.key for h in hits]
    assert [h.value for h in await any_memory.query(alice, "goldfish")] == [
        "Alice gave the goldfish away"
    ]
    assert len(await any_memory.query(alice, "Alice", limit=2)) <= 2


async def test_query_ranks_memories_sharing_more_words_higher(any_memory: HonchoBackend) -> None:
    alice = user()
    await any_memory.store(alice, "dog", "Alice walks a grey dog every morning")
    await any_memory.store(alice, "cat", "Alice has a grey cat called Miso")
    await any_memory.store(alice, "bird", "A blue bird sings outside")
    hits = await any_memory.query(alice, "Which grey cat?")
    assert [h.key for h in hits][:2] == ["cat", "dog"]
    assert "bird" not in [h.key for h in hits]
    assert [h.key for h in await any_memory.query(alice, "cats", limit=1)] == ["cat"]


@pytest.mark.parametrize(
    "text", ["", "   ", "the of and", "?!", "' OR 1=1 --", '"cat" AND %_', "cat* NEAR(x)"]
)
async def test_query_text_is_data(any_memory: HonchoBackend, text: str) -> None:
    alice = user()
    await any_memory.store(alice, "pet", "Alice has a grey cat")
    hits = await any_memory.query(alice, text)
    assert all(h.user_id == alice for h in hits)


async def test_delete_then_store_again(any_memory: HonchoBackend) -> None:
    alice = user()
    await any_memory.store(alice, "pet", "Alice has a grey cat")
    assert await any_memory.delete(alice, "pet") is True
    assert await any_memory.delete(alice, "pet") is False
    assert await any_memory.retrieve(alice, "pet") is None
    assert await any_memory.list_keys(alice) == []
    assert await any_memory.query(alice, "grey cat") == []
    again = await any_memory.store(alice, "pet", "Alice has a hamster")
    assert await any_memory.retrieve(alice, "pet") == again
    assert [h.key for h in await any_memory.query(alice, "hamster")] == ["pet"]
    assert await any_memory.query(alice, "grey cat") == []


async def test_forget_user(any_memory: HonchoBackend) -> None:
    alice, bob = user(), user()
    for key in ["a", "b", "c"]:
        await any_memory.store(alice, key, f"fact {key} about tulips")
    await any_memory.store(alice, "a", "rewritten fact about tulips")
    await any_memory.store(bob, "a", "bob fact about tulips")
    assert await any_memory.forget_user(alice) == 3
    assert await any_memory.list_keys(alice) == []
    assert await any_memory.query(alice, "tulips") == []
    assert await any_memory.retrieve(alice, "a") is None
    assert await any_memory.list_keys(bob) == ["a"]
    assert await any_memory.forget_user(alice) == 0


@pytest.mark.parametrize(
    ("user_id", "key"),
    [("ünïcode user ✓", "key/with/slashes"), ("a" * 256, "k" * 256), ("x", "spaces and 'quotes'")],
)
async def test_any_id_round_trips(any_memory: HonchoBackend, user_id: str, key: str) -> None:
    user_id = user_id + uuid.uuid4().hex[:4] if len(user_id) < 250 else user_id
    await any_memory.store(user_id, key, "value")
    got = await any_memory.retrieve(user_id, key)
    assert got is not None
    assert (got.user_id, got.key) == (user_id, key)
    assert await any_memory.list_keys(user_id) == [key]
    await any_memory.forget_user(user_id)


async def test_long_values_are_split_into_messages(any_memory: HonchoBackend) -> None:
    alice = user()
    value = "filler " * (2 * MAX_MESSAGE_CHARS // 7) + "the final word is zeppelin"
    assert len(value) > 2 * MAX_MESSAGE_CHARS
    await any_memory.store(alice, "long", value)
    assert (await any_memory.retrieve(alice, "long")).value == value  # type: ignore[union-attr]
    assert [h.key for h in await any_memory.query(alice, "zeppelin")] == ["long"]


async def test_bad_input_is_rejected_before_any_request(fake: FakeHoncho) -> None:
    async with make(fake) as memory:
        before = len(fake.requests)
        with pytest.raises(InvalidInputError):
            await memory.store("", "k", "v")
        with pytest.raises(InvalidInputError):
            await memory.store("u", "k" * 257, "v")
        with pytest.raises(InvalidInputError):
            await memory.store("u", "k", "x" * (MAX_VALUE_BYTES + 1))
        with pytest.raises(InvalidInputError):
            await memory.store("u", "k", "v", {"bad": object()})
        with pytest.raises(InvalidInputError):
            await memory.store("u", "k", "nul\x00")
        with pytest.raises(InvalidInputError):
            await memory.query("u", "text", limit=0)
        with pytest.raises(InvalidInputError):
            await memory.retrieve("u", 5)  # type: ignore[arg-type]
        assert len(fake.requests) == before


# Mapping onto Honcho: what is sent, and how many requests.


@needs_fake
async def test_ids_are_hashed_into_honchos_alphabet(fake: FakeHoncho) -> None:
    async with make(fake) as memory:
        await memory.store("alice@example.com", "ünï/key", "v")
    ids = {s.id for s in fake.sessions.values()} | {peer for _, peer in fake.peers}
    assert ids
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,512}", i) for i in ids)
    assert not any("alice" in i for i in ids)
    (session,) = fake.sessions.values()
    assert session.metadata["user_id"] == "alice@example.com"
    assert session.metadata["key"] == "ünï/key"
    assert session.configuration == {"reasoning": {"enabled": False}}


@needs_fake
async def test_reasoning_can_be_left_on(fake: FakeHoncho) -> None:
    async with make(fake, reasoning=True) as memory:
        await memory.store("alice", "pet", "cat")
    (session,) = fake.sessions.values()
    assert session.configuration == {}


@needs_fake
async def test_http_calls_per_operation(fake: FakeHoncho, memory: HonchoBackend) -> None:
    async def calls(operation: object) -> int:
        before = len(fake.requests)
        await operation  # type: ignore[misc]
        return len(fake.requests) - before

    assert await calls(memory.is_available()) == 1
    await memory.store("warm", "up", "ensures the workspace once")
    assert await calls(memory.store("u", "k", "new key")) == 4
    assert await calls(memory.store("u", "k", "existing key")) == 3
    assert await calls(memory.retrieve("u", "k")) == 1
    assert await calls(memory.list_keys("u")) == 1
    assert await calls(memory.query("u", "key")) == 2
    assert await calls(memory.query("u", "existing key?")) == 1 + 2 + 1
    assert await calls(memory.query("u", "nothing-matches-this")) == 1 + 2
    assert await calls(memory.query("u", "one two three four five six seven eight nine")) == 9
    assert await calls(memory.query("u", "the and of")) == 0
    assert await calls(memory.delete("u", "k")) == 2
    await memory.store("u", "a", "1")
    await memory.store("u", "b", "2")
    assert await calls(memory.forget_user("u")) == 3


@needs_fake
async def test_list_keys_reads_every_page(fake: FakeHoncho, memory: HonchoBackend) -> None:
    keys = [f"key{i:03}" for i in range(130)]
    await asyncio.gather(*(memory.store("alice", k, "v") for k in keys))
    before = fake.count("POST", "/sessions/list")
    listed = await memory.list_keys("alice")
    assert sorted(listed) == keys
    assert fake.count("POST", "/sessions/list") - before == 2
    assert await memory.forget_user("alice") == 130


@needs_fake
async def test_deleted_session_waits_for_the_worker(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    await memory.store("alice", "pet", "cat")
    await memory.delete("alice", "pet")
    (marked,) = fake.sessions.values()
    assert not marked.is_active
    await memory.store("alice", "pet", "dog")
    assert len(fake.sessions) == 2
    assert fake.run_deletions() == 1
    assert (await memory.retrieve("alice", "pet")).value == "dog"  # type: ignore[union-attr]
    await memory.store("alice", "pet", "fish")
    assert len(fake.sessions) == 1
    assert [h.value for h in await memory.query("alice", "fish dog cat")] == ["fish"]


@needs_fake
async def test_concurrent_stores_of_one_key_leave_one_memory(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    values = [f"value {i}" for i in range(10)]
    stored = await asyncio.gather(*(memory.store("alice", "k", v) for v in values))
    assert await memory.list_keys("alice") == ["k"]
    assert await memory.retrieve("alice", "k") == max(stored, key=lambda e: e.updated_at)
    assert len([s for s in fake.sessions.values() if s.is_active]) == 1


# Failures.


@needs_fake
async def test_a_failed_store_changes_nothing_visible(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    kept = await memory.store("alice", "pet", "Alice has a grey cat")
    fake.fail(500, method="POST", path_suffix="/messages")
    with pytest.raises(BackendError):
        await memory.store("alice", "pet", "Alice has a parrot")
    fake.fail(500, method="PUT")
    with pytest.raises(BackendError):
        await memory.store("alice", "pet", "Alice has a lizard")
    assert await memory.retrieve("alice", "pet") == kept
    assert await memory.query("alice", "parrot lizard") == []
    fake.fail(500, method="POST", path_suffix="/messages")
    with pytest.raises(BackendError):
        await memory.store("alice", "new", "never stored")
    assert await memory.list_keys("alice") == ["pet"]
    assert await memory.retrieve("alice", "new") is None
    assert (await memory.store("alice", "new", "stored now")).value == "stored now"
    assert await memory.list_keys("alice") == ["new", "pet"]


@needs_fake
async def test_wrong_key_is_unavailable_and_never_shown(
    fake: FakeHoncho, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "wrong-secret-key-42"
    memory = HonchoBackend(base_url=LOCAL, api_key=secret, http_client=fake.client())
    async with memory:
        assert await memory.is_available() is False
        with pytest.raises(BackendUnavailableError) as caught:
            await memory.store("alice", "pet", "cat")
        assert isinstance(caught.value.__cause__, honcho.AuthenticationError)
        assert "401" in str(caught.value)
        for shown in (str(caught.value), repr(caught.value), repr(memory), str(memory)):
            assert secret not in shown
    assert secret not in caplog.text
    assert fake.authorizations[-1] == f"Bearer {secret}"


@needs_fake
async def test_the_key_comes_from_arguments_not_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HONCHO_API_KEY", "from-the-environment")
    monkeypatch.setenv("HONCHO_WORKSPACE_ID", "from-the-environment")
    fake = FakeHoncho()
    async with HonchoBackend(base_url=LOCAL, http_client=fake.client()) as memory:
        await memory.store("alice", "pet", "cat")
    assert set(fake.authorizations) == {None}
    assert set(fake.workspaces) == {"asyncmem"}


@needs_fake
async def test_rate_limit_is_retried_after_the_servers_delay(fake: FakeHoncho) -> None:
    async with make(fake, max_retries=2) as memory:
        await memory.store("alice", "pet", "cat")
        fake.fail(429, times=2, headers={"Retry-After": "0"})
        before = len(fake.requests)
        assert (await memory.retrieve("alice", "pet")).value == "cat"  # type: ignore[union-attr]
        assert len(fake.requests) - before == 3
        fake.fail(429, times=3, headers={"Retry-After": "0"})
        with pytest.raises(BackendError, match="429") as caught:
            await memory.retrieve("alice", "pet")
    assert isinstance(caught.value.__cause__, honcho.RateLimitError)
    assert not isinstance(caught.value, BackendUnavailableError)


@needs_fake
async def test_server_error_is_a_backend_error(fake: FakeHoncho, memory: HonchoBackend) -> None:
    await memory.store("alice", "pet", "cat")
    fake.fail(503)
    with pytest.raises(BackendError, match="503") as caught:
        await memory.list_keys("alice")
    assert isinstance(caught.value.__cause__, honcho.ServerError)
    assert await memory.list_keys("alice") == ["pet"]


@needs_fake
async def test_a_slow_server_times_out(fake: FakeHoncho) -> None:
    async with make(fake, timeout=0.2) as memory:
        await memory.store("alice", "pet", "cat")
        fake.slow()
        with pytest.raises(BackendUnavailableError, match="timed out") as caught:
            await memory.retrieve("alice", "pet")
        assert isinstance(caught.value.__cause__, honcho.TimeoutError)
        assert (await memory.retrieve("alice", "pet")).value == "cat"  # type: ignore[union-attr]


async def test_no_server_is_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = httpx.Client(transport=httpx.MockTransport(refuse))
    async with HonchoBackend(base_url=LOCAL, http_client=client, max_retries=0) as memory:
        assert await memory.is_available() is False
        with pytest.raises(BackendUnavailableError, match="cannot connect"):
            await memory.retrieve("alice", "pet")


@needs_fake
async def test_unexpected_response_is_a_backend_error(fake: FakeHoncho) -> None:
    def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"unexpected": True})

    client = httpx.Client(transport=httpx.MockTransport(garbage))
    async with HonchoBackend(base_url=LOCAL, http_client=client) as memory:
        with pytest.raises(BackendError, match="unexpected Honcho response"):
            await memory.retrieve("alice", "pet")


# Threads and the event loop.


@needs_fake
async def test_event_loop_keeps_running_while_50_calls_block(fake: FakeHoncho) -> None:
    async with make(fake, max_workers=50) as memory:
        await memory.store("alice", "pet", "cat")
        fake.gate = threading.Event()
        calls = [asyncio.create_task(memory.retrieve("alice", "pet")) for _ in range(50)]
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        try:
            await until(lambda: fake.in_flight == 50)
            before = ticks
            await asyncio.sleep(0.2)
            assert ticks - before >= 20
            assert not any(call.done() for call in calls)
        finally:
            fake.gate.set()
            ticking.cancel()
        results = await asyncio.gather(*calls)
    assert {r.value for r in results if r is not None} == {"cat"}
    assert fake.max_in_flight == 50


@needs_fake
async def test_the_pool_bounds_calls_in_flight(fake: FakeHoncho) -> None:
    async with make(fake, max_workers=3) as memory:
        await memory.store("alice", "pet", "cat")
        fake.max_in_flight = 0
        await asyncio.gather(*(memory.retrieve("alice", "pet") for _ in range(30)))
    assert 1 <= fake.max_in_flight <= 3


# Lifecycle and configuration.


@needs_fake
async def test_lifecycle(fake: FakeHoncho) -> None:
    client = fake.client()
    memory = HonchoBackend(base_url=LOCAL, api_key=TEST_KEY, http_client=client)
    assert fake.requests == []
    await memory.store("alice", "pet", "cat")
    await memory.aclose()
    await memory.aclose()
    assert await memory.is_available() is False
    with pytest.raises(BackendClosedError):
        await memory.retrieve("alice", "pet")
    assert not client.is_closed


@needs_fake
async def test_aclose_lets_calls_in_flight_finish(fake: FakeHoncho) -> None:
    memory = make(fake, max_workers=2)
    await memory.store("alice", "pet", "cat")
    fake.gate = threading.Event()
    calls = [asyncio.create_task(memory.retrieve("alice", "pet")) for _ in range(5)]
    await until(lambda: fake.in_flight == 2)
    closing = asyncio.create_task(memory.aclose())
    await asyncio.sleep(0.05)
    assert not closing.done()
    with pytest.raises(BackendClosedError):
        await memory.retrieve("alice", "pet")
    fake.gate.set()
    await closing
    assert [r.value for r in await asyncio.gather(*calls) if r is not None] == ["cat"] * 5


async def test_own_client_is_closed() -> None:
    memory = HonchoBackend(base_url=LOCAL)
    async with memory:
        http = memory._http
        assert http is not None
    assert http.is_closed


def test_configuration() -> None:
    assert HonchoBackend(base_url="http://127.0.0.1:8000").is_cloud is False
    assert HonchoBackend(base_url="http://localhost:8000/").is_cloud is False
    assert HonchoBackend(base_url="http://[::1]:8000").is_cloud is False
    assert HonchoBackend().is_cloud is True
    assert HonchoBackend(base_url="https://honcho.internal.example").is_cloud is True
    bad_settings: list[dict[str, object]] = [
        {"base_url": "ftp://x"},
        {"workspace_id": "no spaces"},
        {"workspace_id": ""},
        {"timeout": 0},
        {"max_workers": 0},
        {"max_retries": -1},
    ]
    for bad in bad_settings:
        with pytest.raises(InvalidInputError):
            HonchoBackend(**bad)  # type: ignore[arg-type]


def test_open_backend_reads_the_honcho_variables() -> None:
    env = {
        "HONCHO_URL": "http://127.0.0.1:9999",
        "HONCHO_API_KEY": "env-secret",
        "HONCHO_WORKSPACE_ID": "ws1",
    }
    memory = open_backend("honcho", env=env)
    assert isinstance(memory, HonchoBackend)
    assert (memory.base_url, memory.workspace_id, memory.is_cloud) == (
        "http://127.0.0.1:9999",
        "ws1",
        False,
    )
    assert "env-secret" not in repr(memory)
    other = open_backend("honcho", env={"HONCHO_BASE_URL": "https://h.example"})
    assert isinstance(other, HonchoBackend)
    assert other.base_url == "https://h.example"
    assert other.workspace_id == "asyncmem"


async def test_missing_sdk_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "honcho", None)
    memory = HonchoBackend(base_url=LOCAL)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'asyncmem\[honcho\]'"):
        await memory.retrieve("alice", "pet")
    await memory.aclose()


def test_asyncmem_imports_without_the_sdk() -> None:
    code = (
        "import sys; sys.modules['honcho'] = None\n"
        "import asyncmem\n"
        "assert asyncmem.HonchoBackend.backend_name == 'honcho'\n"
        "assert 'honcho' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
