"""The store's fixed statements as compiled SQL, loaded without SQLAlchemy.

:mod:`asyncmem.sql.statements` builds every statement from the ORM model and compiles it;
that needs SQLAlchemy, whose import alone costs more than a whole ``asyncmem query`` should.
So the compiled text of the fixed statements ships with the package in ``compiled.json``
(written by ``python -m asyncmem.sql.statements``; a test checks it equals a fresh
compilation), and a store that is at the schema's head opens and serves ``store``,
``retrieve``, ``query`` and the rest from it. Statements whose text depends on a call (a
``where`` filter, a PostgreSQL question's word count, an import's size) are compiled when
first needed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

__all__ = [
    "COMPILED_FILE",
    "HEAD",
    "IMPORT_FIELDS",
    "PLAIN_MANY_FIELDS",
    "SQL",
    "Statements",
    "compiled_for",
    "load_statements",
]

HEAD = "0011_plain_postings"
"""The Alembic revision this code's schema is at (a test checks it against the scripts)."""

IMPORT_FIELDS = (
    "user_id",
    "key",
    "value",
    "metadata_",
    "created_at",
    "updated_at",
    "expires_at",
    "session",
    "facets",
    "words",
    "length",
)
"""The bound fields of each memory of an import statement, ``<field>_<n>``."""

PLAIN_MANY_FIELDS = ("user_id", "key", "value", "metadata", "ttl", "facets", "words", "length")
"""The fields of each store in ``Statements.upsert_plain_many``'s ``items``, in order (the
metadata as a JSON object)."""

COMPILED_FILE = Path(__file__).with_name("compiled.json")
"""The fixed statements of both dialects, as :func:`as_json` writes them."""


@dataclass(frozen=True, slots=True)
class SQL:
    """A compiled statement: its text, how to order named values into driver arguments, and
    the names of the columns its rows have (callers read rows by these names)."""

    text: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]
    columns: tuple[str, ...] = ()

    def args(self, **values: Any) -> tuple[Any, ...]:
        return tuple(values[name] if name in values else self.defaults[name] for name in self.names)


@dataclass(frozen=True, slots=True)
class Statements:
    """Every fixed statement of the store, for one dialect."""

    upsert: SQL
    upsert_plain: SQL
    upsert_many: SQL
    retrieve: SQL
    query: SQL
    list_keys: SQL
    delete: SQL
    delete_plain: SQL
    delete_many: SQL
    forget_user: SQL
    history: SQL
    clock: SQL
    expired_turn_users: SQL
    purge_expired: SQL
    purge_expired_turns: SQL
    purge_expired_versions: SQL
    set_setting: SQL
    ping: SQL
    turns_tail: SQL
    turns_before: SQL
    turns_from: SQL
    turns_all: SQL
    set_context: SQL
    set_session: SQL
    clear_session: SQL
    revision: SQL
    append_turn: SQL | None
    retrieve_many: SQL | None
    upsert_plain_many: SQL | None
    lock_user: SQL | None
    merge_due: SQL | None


def as_json(statements: Statements) -> dict[str, Any]:
    """``statements`` as plain JSON data (what ``compiled.json`` holds per dialect)."""
    found: dict[str, Any] = {}
    for field in fields(Statements):
        sql = getattr(statements, field.name)
        found[field.name] = (
            None
            if sql is None
            else {
                "text": sql.text,
                "names": list(sql.names),
                "defaults": dict(sql.defaults),
                "columns": list(sql.columns),
            }
        )
    return found


def _from_json(data: Mapping[str, Any]) -> Statements:
    loaded: dict[str, Any] = {
        name: None
        if item is None
        else SQL(item["text"], tuple(item["names"]), item["defaults"], tuple(item["columns"]))
        for name, item in data.items()
    }
    return Statements(**loaded)


def compiled_for() -> dict[str, Any]:
    """The ranking constants the statements' text depends on (:mod:`asyncmem.sql.search`):
    the shipped file is used only while they are what it was compiled with."""
    from asyncmem.sql import search, terms

    return {
        "bm25": [search.BM25_K1, search.BM25_B],
        "scale": terms.SCALE,
        "reach": [search.CONTEXT_BEFORE, search.CONTEXT_AFTER],
        "head": HEAD,
    }


@functools.cache
def _shipped() -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(COMPILED_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


def load_statements(dialect_name: str) -> Statements:
    """The fixed statements of ``dialect_name``: from ``compiled.json``, or compiled now if
    the file is missing or was compiled with other ranking constants (a benchmark trying
    other values sets them before it opens a store)."""
    shipped = _shipped()
    if shipped is not None and shipped.get("compiled_for") == compiled_for():
        return _loaded(dialect_name)
    from asyncmem.sql.statements import statements_for

    return statements_for(dialect_name)


@functools.cache
def _loaded(dialect_name: str) -> Statements:
    shipped = _shipped()
    assert shipped is not None
    return _from_json(shipped[dialect_name])
