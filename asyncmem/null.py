"""A backend that accepts everything, stores nothing and costs nothing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from asyncmem.backend import (
    BackendBase,
    MemoryEntry,
    check_id,
    check_items,
    check_keys,
    check_limit,
    check_metadata,
    check_offset,
    check_page_limit,
    check_page_size,
    check_text,
    check_ttl,
    check_value,
    check_where,
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
        *,
        ttl: float | None = None,
    ) -> MemoryEntry:
        user_id = check_id("user_id", user_id)
        key = check_id("key", key)
        value = check_value(value)
        clean = check_metadata(metadata)
        seconds = check_ttl(ttl)
        await self._ready()
        now = time.time()
        expires_at = None if seconds is None else now + seconds
        return MemoryEntry(user_id, key, value, clean, now, now, None, expires_at)

    async def retrieve(self, user_id: str, key: str) -> MemoryEntry | None:
        check_id("user_id", user_id)
        check_id("key", key)
        await self._ready()
        return None

    async def query(
        self,
        user_id: str,
        text: str,
        limit: int = 10,
        *,
        where: Mapping[str, Any] | None = None,
    ) -> list[MemoryEntry]:
        check_id("user_id", user_id)
        check_text(text)
        check_limit(limit)
        check_where(where)
        await self._ready()
        return []

    async def list_keys(
        self,
        user_id: str,
        *,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[str]:
        check_id("user_id", user_id)
        check_where(where)
        check_page_limit(limit)
        check_offset(offset)
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

    def scan(
        self,
        user_id: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[MemoryEntry]:
        if user_id is not None:
            check_id("user_id", user_id)
        check_where(where)
        check_page_size(page_size)
        return self._nothing()

    async def _nothing(self) -> AsyncIterator[MemoryEntry]:
        await self._ready()
        nothing: tuple[MemoryEntry, ...] = ()
        for entry in nothing:
            yield entry

    async def history(self, user_id: str, key: str, limit: int = 10) -> list[MemoryEntry]:
        check_id("user_id", user_id)
        check_id("key", key)
        check_limit(limit)
        await self._ready()
        return []

    async def store_many(
        self, user_id: str, items: Iterable[Mapping[str, Any]]
    ) -> list[MemoryEntry]:
        """Return what each item would have been as an entry, like :meth:`store`."""
        check_id("user_id", user_id)
        checked = check_items(items)
        await self._ready()
        now = time.time()
        return [
            MemoryEntry(
                user_id,
                item.key,
                item.value,
                item.metadata,
                now,
                now,
                None,
                None if item.ttl is None else now + item.ttl,
            )
            for item in checked
        ]

    async def delete_many(self, user_id: str, keys: Iterable[str]) -> int:
        check_id("user_id", user_id)
        check_keys(keys)
        await self._ready()
        return 0

    async def purge_expired(self) -> int:
        await self._ready()
        return 0
