"""What a deleted memory leaves in SQLite's files, read as raw bytes (README: "Deleting").

The store sets ``secure_delete``, so freed pages are zeroed, and a memory's index terms are
rows that its delete removes. After ``delete`` neither the value nor any of its words is in
the database file once the WAL is checkpointed; copies stay in the ``-wal`` file until it is
checkpointed and truncated (``forget_user``, ``compact()``, and closing the last connection,
which deletes it). After ``forget_user`` and after ``compact()`` the unique marker is in none
of the three files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from asyncmem import SQLBackend

MARKER = b"zqxmarker"
VALUE = "the door code is zqxmarker 4417, keep it between us"


def _found(path: Path, needle: bytes = MARKER) -> dict[str, int | None]:
    counts: dict[str, int | None] = {}
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        counts[suffix or ".db"] = file.read_bytes().count(needle) if file.exists() else None
    return counts


async def _fill(backend: SQLBackend, turn: bool) -> None:
    meta = {"session": "s"} if turn else None
    for i in range(30):
        await backend.store("bob", f"k{i}", f"bob keeps filler words number {i}")
    await backend.store("alice", "before", "a turn before the secret", meta)
    await backend.store("alice", "secret", VALUE, meta)
    await backend.store("alice", "after", "a turn after the secret", meta)


@pytest.mark.parametrize("turn", [False, True], ids=["fact", "turn"])
async def test_after_delete_no_copy_of_the_value_nor_its_words(tmp_path: Path, turn: bool) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await _fill(backend, turn)
        assert (_found(path)["-wal"] or 0) > 0  # written: the WAL has it
        assert await backend.delete("alice", "secret")
        assert await backend.query("alice", "zqxmarker door code") == []
        await backend._driver.checkpoint()
        found = _found(path, VALUE.encode())
        assert found == {".db": 0, "-wal": 0, "-shm": 0}, found
        assert _found(path) == {".db": 0, "-wal": 0, "-shm": 0}
        assert await backend.query("bob", "filler") != []
        await backend.compact()
        assert _found(path) == {".db": 0, "-wal": 0, "-shm": 0}
    assert _found(path) == {".db": 0, "-wal": None, "-shm": None}


async def test_after_forget_user_the_marker_is_in_no_file(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await _fill(backend, turn=True)
        await backend.store("alice", "history", VALUE)
        await backend.store("alice", "history", "overwritten, the old one is a version")
        assert await backend.forget_user("alice") == 4
        assert _found(path) == {".db": 0, "-wal": 0, "-shm": 0}
        assert await backend.query("bob", "filler") != []
    assert _found(path) == {".db": 0, "-wal": None, "-shm": None}


async def test_a_deleted_value_leaves_the_wal_when_the_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLBackend(f"sqlite:///{path}") as backend:
        await _fill(backend, turn=False)
        await backend.delete("alice", "secret")
        assert (_found(path, VALUE.encode())["-wal"] or 0) > 0  # until a checkpoint
    found = _found(path, VALUE.encode())
    assert found == {".db": 0, "-wal": None, "-shm": None}, found
