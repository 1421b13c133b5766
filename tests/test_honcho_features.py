"""Filters, paging, expiry, history and batches on Honcho: what the adapter does beyond the
shared suite (the server's state, HTTP calls, the weaker batch guarantee), against the real
SDK on tests/fake_honcho.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from asyncmem import BackendError, InvalidInputError
from asyncmem.honcho import HonchoBackend, _base_session_id
from tests.fake_honcho import TEST_KEY, FakeHoncho

pytest.importorskip("honcho")


@pytest.fixture
def fake() -> FakeHoncho:
    return FakeHoncho(api_key=TEST_KEY)


def make(fake: FakeHoncho, **options: object) -> HonchoBackend:
    return HonchoBackend(
        base_url="http://127.0.0.1:8000",
        api_key=TEST_KEY,
        http_client=fake.client(),
        max_retries=0,
        timeout=5.0,
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
async def memory(fake: FakeHoncho) -> AsyncIterator[HonchoBackend]:
    async with make(fake) as backend:
        yield backend


def active_sessions(fake: FakeHoncho) -> int:
    return sum(1 for s in fake.sessions.values() if s.is_active)


def calls(fake: FakeHoncho) -> int:
    return len(fake.requests)


@pytest.mark.parametrize("bad", [0, -1, 1001, True, 2.0, "10"])
def test_max_versions_is_checked(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="max_versions"):
        HonchoBackend(base_url="http://127.0.0.1:8000", max_versions=bad)  # type: ignore[arg-type]


async def test_max_versions_bounds_history(fake: FakeHoncho) -> None:
    async with make(fake, max_versions=3) as backend:
        for i in range(6):
            await backend.store("alice", "pet", f"v{i}", {"i": i})
        history = await backend.history("alice", "pet", limit=50)
    assert [e.value for e in history] == ["v5", "v4", "v3"]
    assert [dict(e.metadata) for e in history] == [{"i": 5}, {"i": 4}, {"i": 3}]


async def test_expired_sessions_stay_until_purged(fake: FakeHoncho, memory: HonchoBackend) -> None:
    short = await memory.store("alice", "short", "brief", ttl=0.2)
    await memory.store("alice", "kept", "lasting")
    await asyncio.sleep(max(0.0, (short.expires_at or 0.0) - time.time()) + 0.05)
    assert await memory.list_keys("alice") == ["kept"]
    assert active_sessions(fake) == 2  # hidden, not yet deleted
    assert await memory.purge_expired() == 1
    assert active_sessions(fake) == 1
    assert await memory.purge_expired() == 0


async def test_purge_leaves_a_key_stored_again_alone(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    short = await memory.store("alice", "a", "brief", ttl=0.2)
    await asyncio.sleep(max(0.0, (short.expires_at or 0.0) - time.time()) + 0.05)
    await memory.store("alice", "a", "again")
    assert await memory.purge_expired() == 0
    entry = await memory.retrieve("alice", "a")
    assert entry is not None
    assert entry.value == "again"


async def test_http_calls_of_the_new_operations(fake: FakeHoncho, memory: HonchoBackend) -> None:
    for i in range(5):
        await memory.store("alice", f"k{i}", f"value {i}", {"i": i})
    before = calls(fake)
    await memory.history("alice", "k1")
    assert calls(fake) - before == 1
    before = calls(fake)
    await memory.list_keys("alice", where={"i": {"$gte": 2}}, limit=2, offset=1)
    assert calls(fake) - before == 1
    before = calls(fake)
    assert len([e async for e in memory.scan("alice", page_size=2)]) == 5
    assert calls(fake) - before == 1 + 3  # the listing, then one read per page
    before = calls(fake)
    assert await memory.delete_many("alice", ["k0", "k1", "missing"]) == 2
    assert calls(fake) - before == 3 + 2  # a read per key, a delete per session
    before = calls(fake)
    await memory.store_many("alice", [{"key": "n1", "value": "x"}, {"key": "n2", "value": "y"}])
    assert calls(fake) - before == 2 * 4  # as two stores of new keys


async def test_scan_of_the_whole_workspace_ignores_other_sessions(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    await memory.store("alice", "a", "one")
    await memory._call("setup", lambda client: client.session("foreign", metadata={"x": 1}))
    await memory._call("setup", lambda client: client.session("bare"))
    assert [(e.user_id, e.key) async for e in memory.scan()] == [("alice", "a")]
    assert await memory.purge_expired() == 0


async def test_store_many_is_not_atomic_on_a_server_failure(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    """The documented weaker guarantee: items before the failing one are stored, the rest not."""
    items = [{"key": f"k{i}", "value": f"v{i}"} for i in range(4)]
    await memory.store_many("alice", items[:1])
    # The third item's final metadata write fails.
    fake.fail(500, method="PUT", path_suffix=f"/sessions/{_base_session_id('alice', 'k2')}")
    with pytest.raises(BackendError, match="store"):
        await memory.store_many("alice", [{"key": "k0", "value": "new"}, *items[1:]])
    assert sorted(await memory.list_keys("alice")) == ["k0", "k1"]
    assert await memory.retrieve("alice", "k2") is None
    entry = await memory.retrieve("alice", "k0")
    assert entry is not None
    assert entry.value == "new"
