from __future__ import annotations

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
