"""The JSON Lines format of ``asyncmem export`` and ``asyncmem import``, and memories as dicts.

One memory a line, a JSON object with the fields of :data:`FIELDS` in that order
(``expires_at`` only for memories stored with a ``ttl``). Lines are UTF-8 and hold no
character any reader might split lines on or a terminal might act on: U+0085, U+2028,
U+2029, DEL, the C1 controls and the bidirectional controls are written as ``\\u`` escapes
(JSON itself escapes the C0 controls), so the text is unchanged when read back. Importing
keeps each memory's own timestamps; a line without them gets the time of the import.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import stat
import sys
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

from asyncmem.backend import MemoryEntry, check_id, check_metadata, check_timestamp, check_value
from asyncmem.errors import AsyncmemError, InvalidInputError

__all__ = [
    "FIELDS",
    "ExportFile",
    "ImportTarget",
    "LineError",
    "batches",
    "check_timestamp",
    "count_lines",
    "dumps",
    "entry_to_dict",
    "export_entries",
    "import_lines",
    "parse_line",
    "read_entries",
    "to_line",
]

FIELDS = ("user_id", "key", "value", "metadata", "created_at", "updated_at", "expires_at")
"""The fields of one exported line, in this order."""

_REQUIRED = ("user_id", "key", "value")
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED = {code: f"\\u{code:04x}" for code in (*range(0x7F, 0xA0), 0x2028, 0x2029, *_BIDI)}


class LineError(AsyncmemError):
    """A line of an import that is not a memory; ``number`` counts lines from 1."""

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"line {number}: {reason}")
        self.number = number
        self.reason = reason


class ImportTarget(Protocol):
    """What an import writes to: :meth:`asyncmem.SQLBackend.import_entries`."""

    async def import_entries(self, entries: Iterable[MemoryEntry]) -> int:
        """Upsert ``entries`` with their own timestamps; return how many were written."""
        ...


def entry_to_dict(entry: MemoryEntry, *, user_id: bool = True) -> dict[str, Any]:
    """``entry`` as a JSON-ready dict: the fields of :data:`FIELDS`, then ``score`` if set.

    ``expires_at`` and ``score`` appear only when they are not ``None``; ``user_id=False``
    leaves the user out (the memory tool, bound to one user, does not repeat it).
    """
    data: dict[str, Any] = {"user_id": entry.user_id} if user_id else {}
    data["key"] = entry.key
    data["value"] = entry.value
    data["metadata"] = dict(entry.metadata)
    data["created_at"] = entry.created_at
    data["updated_at"] = entry.updated_at
    if entry.expires_at is not None:
        data["expires_at"] = entry.expires_at
    if entry.score is not None:
        data["score"] = entry.score
    return data


def dumps(data: object, *, indent: int | None = None) -> str:
    """``data`` as readable UTF-8 JSON in which U+2028, U+2029, DEL, the C1 and the
    bidirectional controls are ``\\u`` escapes: nothing a line reader splits on or a
    terminal acts on."""
    return json.dumps(data, ensure_ascii=False, indent=indent).translate(_ESCAPED)


def to_line(entry: MemoryEntry) -> str:
    """One exported line, newline included."""
    data = entry_to_dict(entry)
    data.pop("score", None)
    return dumps(data) + "\n"


def parse_line(line: bytes | str, number: int, now: float) -> MemoryEntry:
    """The memory on one exported line, checked as ``store`` checks its arguments.

    Timestamps missing from the line are ``now``. Raises :class:`LineError`.
    """
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise InvalidInputError("a line must be a JSON object")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise InvalidInputError(f"unknown field {unknown[0]!r}; a line has {', '.join(FIELDS)}")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise InvalidInputError(f"missing field {missing[0]!r}")
        expires_at = data.get("expires_at")
        return MemoryEntry(
            user_id=check_id("user_id", data["user_id"]),
            key=check_id("key", data["key"]),
            value=check_value(data["value"]),
            metadata=check_metadata(data.get("metadata")),
            created_at=check_timestamp("created_at", data.get("created_at", now)),
            updated_at=check_timestamp("updated_at", data.get("updated_at", now)),
            expires_at=None if expires_at is None else check_timestamp("expires_at", expires_at),
        )
    except UnicodeDecodeError:
        raise LineError(number, "not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise LineError(number, exc.msg) from None
    except RecursionError:
        raise LineError(number, "nested too deeply") from None
    except ValueError as exc:  # InvalidInputError, and json's limit on an int's digits
        raise LineError(number, str(exc)) from None


def read_entries(source: Iterable[bytes | str], now: float) -> Iterator[MemoryEntry]:
    """The memories of an export, line by line; blank lines are skipped."""
    for number, line in enumerate(source, 1):
        if line.strip():
            yield parse_line(line, number, now)


def batches(entries: Iterable[MemoryEntry], size: int) -> Iterator[list[MemoryEntry]]:
    """``entries`` in lists of ``size`` (the last one shorter)."""
    batch: list[MemoryEntry] = []
    for entry in entries:
        batch.append(entry)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


async def export_entries(entries: AsyncIterable[MemoryEntry], out: IO[str]) -> int:
    """Write ``entries`` (such as ``backend.scan()``) to ``out``; returns how many."""
    count = 0
    async for entry in entries:
        out.write(to_line(entry))
        count += 1
    return count


class ExportFile:
    """Where an export goes: a new file that appears only when complete, or stdout for ``-``.

    A path that does not exist, or names a regular file, gets a new file: created next to
    it with ``O_EXCL`` and mode 0600 (an export holds every memory in clear), fsynced,
    then moved into place (an existing regular file is replaced). A path that names
    something else that can be written (a device such as ``/dev/null``, a FIFO) is written
    to directly and never replaced; a symlink or a directory is refused. Opening and
    writing raise :class:`OSError`; on error the partial file is removed.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._partial: Path | None = None
        self._replace = False

    def __enter__(self) -> IO[str]:
        if self.path == "-":
            return sys.stdout
        target = Path(self.path)
        try:
            found = os.lstat(target)
        except FileNotFoundError:
            found = None
        if found is not None and stat.S_ISLNK(found.st_mode):
            raise OSError(errno.ELOOP, "it is a symbolic link; name the file itself")
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise OSError(errno.EISDIR, "it is a directory")
        if found is not None and not stat.S_ISREG(found.st_mode):
            fd = os.open(target, os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY)
        else:
            self._replace = found is not None
            self._partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(self._partial, flags, 0o600)
        self._file = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        return self._file

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        file, self._file = self._file, None
        if file is None:
            sys.stdout.flush()
            return
        partial, self._partial = self._partial, None
        try:
            if exc_type is None:
                file.flush()
                if partial is not None:
                    os.fsync(file.fileno())
                file.close()
                if partial is not None:
                    self._publish(partial)
                    partial = None
        finally:
            if not file.closed:
                with contextlib.suppress(OSError):  # the error being raised says more
                    file.close()
            if partial is not None:
                partial.unlink(missing_ok=True)

    def _publish(self, partial: Path) -> None:
        """Move the complete file into place and make that durable."""
        target = Path(self.path)
        if self._replace:
            if not stat.S_ISREG(os.lstat(target).st_mode):
                raise OSError(errno.EEXIST, "it was replaced by something not a file meanwhile")
            os.replace(partial, target)
        else:
            try:
                os.link(partial, target)  # FileExistsError if something appeared meanwhile
            except FileExistsError:
                raise
            except OSError:  # a file system without hard links: rename, after a last look
                if os.path.lexists(target):
                    raise FileExistsError(errno.EEXIST, "it appeared meanwhile") from None
                os.rename(partial, target)
            else:
                partial.unlink()
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def count_lines(source: Iterable[bytes | str], now: float) -> int:
    """Check every line of ``source``; the number of memories, or :class:`LineError`."""
    return sum(1 for _ in read_entries(source, now))


async def import_lines(
    target: ImportTarget,
    source: IO[bytes],
    now: float,
    *,
    batch_size: int,
    progress: Callable[[int], object] | None = None,
) -> tuple[int, int]:
    """Upsert the memories of ``source`` batch by batch, one transaction each.

    Check ``source`` with :func:`count_lines` first, so that a bad line writes nothing; a line
    that has changed since is reported as a :class:`LineError` saying that earlier batches
    were written. Reading runs in a thread; ``progress`` gets each batch's size. Returns
    (memories written, batches).
    """
    written = count = 0
    chunks = batches(read_entries(source, now), batch_size)
    while True:
        try:
            batch: list[MemoryEntry] = await asyncio.to_thread(next, chunks, [])
        except LineError as exc:
            raise LineError(
                exc.number,
                f"{exc.reason}; the input changed during the import, {count} batches were written",
            ) from None
        if not batch:
            return written, count
        written += await target.import_entries(batch)
        count += 1
        if progress is not None:
            progress(len(batch))
