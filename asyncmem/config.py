"""Choosing a backend: the one place (with the CLI) that reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from asyncmem.errors import InvalidInputError

if TYPE_CHECKING:
    from asyncmem.backend import MemoryBackend

__all__ = ["open_backend"]


def open_backend(spec: str | None = None, *, env: Mapping[str, str] | None = None) -> MemoryBackend:
    """Make the backend ``spec`` names: ``"null"``, ``"sqlite"`` (the embedded file),
    ``"honcho"`` (configured by ``HONCHO_URL`` or ``HONCHO_BASE_URL``, ``HONCHO_API_KEY`` and
    ``HONCHO_WORKSPACE_ID``) or a SQLAlchemy URL. Without ``spec``: ``ASYNCMEM_BACKEND``,
    then ``ASYNCMEM_URL``, then the embedded SQLite file in the user data directory.

    Nothing is opened yet: use the result with ``async with``.
    """
    environ = os.environ if env is None else env
    if spec is None:
        spec = environ.get("ASYNCMEM_BACKEND") or environ.get("ASYNCMEM_URL") or None
    if spec is None or spec in {"sqlite", "sql", "default"}:
        return _sql_backend(None)
    if not isinstance(spec, str):
        raise InvalidInputError(f"backend spec must be a str, not {type(spec).__name__}")
    if spec == "null":
        from asyncmem.null import NullBackend

        return NullBackend()
    if spec == "honcho":
        return _honcho_backend(environ)
    if "://" in spec:
        return _sql_backend(spec)
    # The spec is not repeated: a URL mistyped without "://" may carry a password.
    raise InvalidInputError(
        "unknown backend: use 'null', 'sqlite', 'honcho' or a database URL "
        "such as sqlite:///path/memory.db or postgresql://user@host/db"
    )


def _sql_backend(url: str | None) -> MemoryBackend:
    """The SQL store, imported only now: SQLAlchemy is most of asyncmem's import time."""
    from asyncmem.sql.store import SQLBackend

    return SQLBackend() if url is None else SQLBackend(url)


def _honcho_backend(environ: Mapping[str, str]) -> MemoryBackend:
    from asyncmem.honcho import DEFAULT_BASE_URL, DEFAULT_WORKSPACE, HonchoBackend

    return HonchoBackend(
        base_url=environ.get("HONCHO_URL") or environ.get("HONCHO_BASE_URL") or DEFAULT_BASE_URL,
        api_key=environ.get("HONCHO_API_KEY") or None,
        workspace_id=environ.get("HONCHO_WORKSPACE_ID") or DEFAULT_WORKSPACE,
    )
