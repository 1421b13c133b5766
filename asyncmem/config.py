"""Choosing a backend: the one place (with the CLI) that reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping

from asyncmem.backend import MemoryBackend
from asyncmem.errors import InvalidInputError
from asyncmem.null import NullBackend
from asyncmem.sql.store import SQLBackend

__all__ = ["open_backend"]


def open_backend(spec: str | None = None, *, env: Mapping[str, str] | None = None) -> MemoryBackend:
    """Make the backend ``spec`` names: ``"null"``, ``"sqlite"`` (the embedded file) or a
    SQLAlchemy URL. Without ``spec``: ``ASYNCMEM_BACKEND``, then ``ASYNCMEM_URL``, then the
    embedded SQLite file in the user data directory.

    Nothing is opened yet: use the result with ``async with``.
    """
    environ = os.environ if env is None else env
    if spec is None:
        spec = environ.get("ASYNCMEM_BACKEND") or environ.get("ASYNCMEM_URL") or None
    if spec is None or spec in {"sqlite", "sql", "default"}:
        return SQLBackend()
    if not isinstance(spec, str):
        raise InvalidInputError(f"backend spec must be a str, not {type(spec).__name__}")
    if spec == "null":
        return NullBackend()
    if "://" in spec:
        return SQLBackend(spec)
    raise InvalidInputError(f"unknown backend {spec!r}: use 'null', 'sqlite' or a database URL")
