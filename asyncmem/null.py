"""A backend that accepts everything, stores nothing and costs nothing."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from asyncmem.backend import (
    BackendBase,
    MemoryEntry,
    check_id,
    check_limit,
    check_metadata,
    check_text,
    check_value,
)

__all__ = ["NullBackend"]


class NullBackend(BackendBase):
    """Validates like every backend, then forgets: reads find nothing, deletes remove nothing.

    Useful to switch memory off without changing the agent, and as the floor in evaluations.
    """

    backend_name = "null"
    is_cloud = False

    def __repr__(self) -> str:
        return "NullBackend()"

    async def is_available(self) -> bool:
        return not self.closed

    async def store(
        self,
        user_id: str,
        key: str,
        value: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryEntry:
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        value = check_value(value)
        clean = check_metadata(metadata)
        await self._ready()
        now = time.time()
        return MemoryEntry(user_id, key, value, clean, now, now)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        check_id("user_id", user_id)
        check_id("key", key)
        await self._ready()
        return None

    async def query(self, user_id: str, text: str, limit: int = 10) -> list[MemoryEntry]:
        check_id("user_id", user_id)
        check_text(text)
        check_limit(limit)
        await self._ready()
        return []

    async def list_keys(self, user_id: str) -> list[str]:
        check_id("user_id", user_id)
        await self._ready()
        return []

    async def delete(self, user_id: str, key: str) -> bool:
        check_id("user_id", user_id)
        check_id("key", key)
        await self._ready()
        return False

    async def forget_user(self, user_id: str) -> int:
        check_id("user_id", user_id)
        await self._ready()
        return 0
