"""Docs inside the package say the thing itself: every public name of the protocol, the export
format and the evaluator has a docstring, and none points at files a user of the package does
not have (the project's design notes, ``../shared``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from asyncmem import MemoryBackend

PACKAGE = Path(__file__).resolve().parent.parent / "asyncmem"
DOCUMENTED = [
    PACKAGE / "backend.py",
    PACKAGE / "export.py",
    PACKAGE / "cli.py",
    PACKAGE / "sql" / "migrate.py",
    *sorted((PACKAGE / "evaluation").glob("*.py")),
]


def test_every_protocol_method_has_a_docstring() -> None:
    members = [
        name
        for name, value in vars(MemoryBackend).items()
        if callable(value) and (not name.startswith("_") or name in {"__aenter__", "__aexit__"})
    ]
    assert len(members) == 15
    assert [name for name in members if not inspect.getdoc(getattr(MemoryBackend, name))] == []


@pytest.mark.parametrize("path", DOCUMENTED, ids=lambda path: path.name)
def test_public_definitions_have_docstrings(path: Path) -> None:
    missing = []

    def walk(nodes: list[ast.stmt], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if not node.name.startswith("_") and ast.get_docstring(node) is None:
                    missing.append(prefix + node.name)
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    walk(node.body, f"{node.name}.")

    walk(ast.parse(path.read_text()).body, "")
    assert missing == []


def test_no_docstring_points_at_files_users_do_not_have() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.suffix not in {".py", ".md"}:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "DESIGN.md" in line or "../shared" in line:
                found.append(f"{relative}:{number}")
    assert found == []
