"""The README's code works as written: every Python block runs as a file, every console
block's commands run and print what the README shows (same lines, numbers and column widths
aside), every shell command runs (``pip install`` lines: the extra exists), and the two
set-up commands are the ones CI runs and the one that installs and runs ``asyncmem eval``.
Blocks of sections being rewritten elsewhere are skipped, each with its reason.

Each block runs in a fresh directory under ``tmp_path`` that is also ``$HOME`` (shown as
``/home/me`` in the README), with the installed ``asyncmem`` on ``PATH``. Placeholder
PostgreSQL URLs become a fresh database of the test server.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from asyncmem.sql import migrate
from tests.backends import PG_ENABLED, pg_database

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent
PG_PLACEHOLDERS = ("postgresql://app@db.internal/memories", "postgresql://user@host/db")
OTHER_SECTIONS = {
    "Memory as a tool for agents": "a fragment around a model's tool call (`call`)",
    "Testing against a server": "runs the test suite against a live Honcho server",
}
OTHER_PROGRAMS = {"claude": "Claude Code's own command line, which is not installed here"}


@dataclass(frozen=True)
class Block:
    section: str
    chapter: str
    language: str
    code: str
    line: int

    @property
    def id(self) -> str:
        return f"{self.language}@{self.line}"


def _blocks() -> list[Block]:
    found: list[Block] = []
    chapter = section = ""
    lines = README.splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith("## "):
            chapter = section = line[3:]
        elif line.startswith("### "):
            section = line[4:]
        elif line.startswith("```") and line != "```":
            end = lines.index("```", number + 1)
            code = "\n".join(lines[number + 1 : end]) + "\n"
            found.append(Block(section, chapter, line[3:], code, number + 1))
            number = end
        number += 1
    return found


BLOCKS = _blocks()


def _of(language: str) -> list[Block]:
    return [block for block in BLOCKS if block.language == language]


def _environment(home: Path) -> dict[str, str]:
    env = {
        "HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "XDG_DATA_HOME": str(home / ".local" / "share"),
    }
    for name, value in os.environ.items():
        if name.startswith("ASYNCMEM_TEST_"):
            env[name] = value
    return env


@contextmanager
def _postgresql(code: str) -> Iterator[str]:
    """``code`` with its placeholder PostgreSQL URLs pointing at a fresh test database."""
    if not any(url in code for url in PG_PLACEHOLDERS):
        yield code
        return
    if not PG_ENABLED:
        pytest.skip("needs the PostgreSQL server (ASYNCMEM_TEST_PG_URL)")

    runner = asyncio.Runner()
    manager = pg_database()
    url = runner.run(manager.__aenter__())
    try:
        for placeholder in PG_PLACEHOLDERS:
            code = code.replace(placeholder, url)
        yield code
    finally:
        runner.run(manager.__aexit__(None, None, None))
        runner.close()


def _skip_others(block: Block) -> None:
    reason = OTHER_SECTIONS.get(block.section)
    if reason is not None:
        pytest.skip(f"{block.section}: {reason}")


# --- Python -----------------------------------------------------------------------------------


@pytest.mark.parametrize("block", _of("python"), ids=lambda block: block.id)
def test_python_blocks_run_as_files(block: Block, tmp_path: Path) -> None:
    _skip_others(block)
    code = block.code
    if block.chapter == "Honcho":
        live = os.environ.get("ASYNCMEM_TEST_HONCHO_URL")
        if not live:
            pytest.skip("needs a Honcho server (ASYNCMEM_TEST_HONCHO_URL)")
        code = code.replace("http://127.0.0.1:8000", live)
    with _postgresql(code) as code:
        script = tmp_path / "example.py"
        script.write_text(code)
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    if block is _of("python")[0]:
        # The first example prints what its comment says it prints.
        (shown,) = re.findall(r"print\(.*\)  # (.+)", code)
        assert done.stdout == shown + "\n"


# --- console ----------------------------------------------------------------------------------


def _steps(code: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?!\w)")
_PROGRESS = re.compile(r"^[^:]+: [\w -]+ \.\.\.$")
"""``asyncmem eval``'s progress on stderr (a terminal overwrites it in place)."""


def _shape(lines: list[str]) -> list[str]:
    """Lines with numbers, column widths and rules made alike."""
    shaped = []
    for line in lines:
        line = _NUMBER.sub("N", line)
        line = re.sub(r"-{2,}", "--", line)
        shaped.append(" ".join(line.split()))
    return shaped


@pytest.mark.parametrize("block", _of("console"), ids=lambda block: block.id)
def test_console_blocks_print_what_the_readme_shows(block: Block, tmp_path: Path) -> None:
    steps = _steps(block.code)
    marker = "\x1e"
    script = "".join(f"printf '{marker}\\n'\n{{ {command}\n}} 2>&1\n" for command, _ in steps)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outputs = done.stdout.split(marker + "\n")[1:]
    assert len(outputs) == len(steps)
    for (command, expected), output in zip(steps, outputs, strict=True):
        got = [
            line.replace(str(tmp_path), "/home/me")
            for line in output.splitlines()
            if not _PROGRESS.match(line)
        ]
        assert _shape(got) == _shape(expected), (command, output)


def test_the_readme_shows_the_current_schema_revision() -> None:
    shown = set(re.findall(r"revision: (\S+) \(head: (\S+)\)", README))
    assert shown == {(migrate.HEAD, migrate.HEAD)}


# --- shell ------------------------------------------------------------------------------------


def test_ci_runs_the_readme_test_command() -> None:
    setup = _of("sh")[:2]
    assert all(block.chapter == "Set up" for block in setup)
    test_command = setup[1].code.strip()
    assert "pytest" in test_command
    assert f'TEST_COMMAND="{test_command}"' in (ROOT / ".ci" / "run").read_text()


def test_the_first_set_up_installs_and_runs_the_evaluation() -> None:
    install = _of("sh")[0].code.strip()
    assert install == "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/asyncmem eval"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["asyncmem"] == "asyncmem.cli:main"


@pytest.mark.parametrize(
    "block", [b for b in _of("sh") if b.chapter != "Set up"], ids=lambda block: block.id
)
def test_shell_commands_run(block: Block, tmp_path: Path) -> None:
    _skip_others(block)
    program = block.code.split(maxsplit=1)[0]
    if program in OTHER_PROGRAMS:
        pytest.skip(f"{program}: {OTHER_PROGRAMS[program]}")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    commands = []
    for line in block.code.splitlines():
        install = re.fullmatch(r"pip install 'asyncmem\[(\w+)\]'", line)
        if install:
            assert install[1] in extras, line
        else:
            commands.append(line)
    if not commands:
        return
    with _postgresql("\n".join(commands)) as script:
        done = subprocess.run(
            ["bash", "-ec", script],
            cwd=ROOT,
            env=_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (ROOT / "path").exists(), "a relative SQLite path landed in the checkout"
