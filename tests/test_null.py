from __future__ import annotations

import time

import pytest

from asyncmem import MemoryBackend, NullBackend


async def test_null_backend_stores_nothing() -> None:
    async with NullBackend() as backend:
        assert isinstance(backend, MemoryBackend)
        entry = await backend.store("alice", "pet", "cat", {"a": [1]})
        assert (entry.user_id, entry.key, entry.value, dict(entry.metadata)) == (
            "alice",
            "pet",
            "cat",
            {"a": [1]},
        )
        assert entry.created_at == entry.updated_at > 0
        assert await backend.retrieve("alice", "pet") is None
        assert await backend.query("alice", "cat") == []
        assert await backend.list_keys("alice") == []
        assert await backend.delete("alice", "pet") is False
        assert await backend.forget_user("alice") == 0
        assert backend.is_cloud is False
        assert repr(backend) == "NullBackend()"


async def test_null_backend_opens_lazily() -> None:
    backend = NullBackend()
    assert await backend.is_available() is True
    await backend.store("alice", "k", "v")
    await backend.aclose()
    assert await backend.is_available() is False


async def test_null_backend_extensions() -> None:
    """Filters, expiry, history and batches on the null backend: checked, nothing kept."""
    async with NullBackend() as backend:
        entry = await backend.store("alice", "a", "v", ttl=10)
        assert entry.expires_at == pytest.approx(time.time() + 10, abs=1)
        items = [{"key": "a", "value": "v", "metadata": {"x": 1}}]
        entries = await backend.store_many("alice", items)
        assert [(e.key, dict(e.metadata)) for e in entries] == [("a", {"x": 1})]
        assert [e async for e in backend.scan()] == []
        assert [e async for e in backend.scan("alice", where={"x": 1}, page_size=1)] == []
        assert await backend.history("alice", "a") == []
        assert await backend.delete_many("alice", ["a"]) == 0
        assert await backend.purge_expired() == 0
        assert await backend.list_keys("alice", where={"x": 1}, limit=5, offset=2) == []
        assert await backend.query("alice", "v", where={"x": {"$gt": 0}}) == []
