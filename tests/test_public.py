"""The package's public surface: ``__all__`` exactly, every name loading on first use, and
``import asyncmem`` staying light (what it loads, not how long it takes: speed is measured by
benchmarks/startup.py)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import asyncmem

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"sqlalchemy", "aiosqlite", "asyncpg", "alembic", "honcho", "jsonschema", "tqdm"}


def test_all_is_exactly_the_public_names() -> None:
    assert asyncmem.__all__ == [
        "MAX_ID_LENGTH",
        "MAX_LIMIT",
        "MAX_METADATA_BYTES",
        "MAX_VALUE_BYTES",
        "AsyncmemError",
        "BackendClosedError",
        "BackendError",
        "BackendUnavailableError",
        "HonchoBackend",
        "InvalidInputError",
        "MemoryBackend",
        "MemoryEntry",
        "NullBackend",
        "SQLBackend",
        "SchemaError",
        "__version__",
        "open_backend",
    ]
    homes = asyncmem._HOMES
    assert set(asyncmem.__all__) == {*homes, "__version__"}
    for name, home in homes.items():
        assert getattr(asyncmem, name) is getattr(importlib.import_module(home), name), name
    assert isinstance(asyncmem.__version__, str)
    assert set(asyncmem.__all__) <= set(dir(asyncmem))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        asyncmem.Nope  # type: ignore[attr-defined]  # noqa: B018


def loaded_after(statement: str) -> set[str]:
    """The heavy top-level packages a fresh interpreter has loaded after ``statement``."""
    probe = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    ).stdout
    return {name.split(".")[0] for name in json.loads(out)} & HEAVY


@pytest.mark.parametrize(
    "statement",
    [
        "import asyncmem",
        "from asyncmem import MemoryBackend, MemoryEntry, InvalidInputError, open_backend",
        "from asyncmem.tool import openai_tool, anthropic_tool, MEMORY_TOOL; openai_tool()",
        "import asyncmem.mcp_server",
        "from asyncmem import NullBackend, open_backend; open_backend('null')",
    ],
)
def test_importing_loads_no_database_driver(statement: str) -> None:
    assert loaded_after(statement) == set()


def test_a_backend_loads_what_it_needs() -> None:
    loaded = loaded_after("from asyncmem import SQLBackend")
    assert "aiosqlite" in loaded
    assert "sqlalchemy" not in loaded  # compiled statements ship with the package
    assert "jsonschema" in loaded_after(
        "import asyncio, asyncmem.tool as t\n"
        "asyncio.run(t.run_memory_tool(__import__('asyncmem').NullBackend(), {}))"
    )
