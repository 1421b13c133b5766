"""The README's promises: its opening example runs, and CI runs its test command."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


async def test_opening_example_runs(capsys: object) -> None:
    code = _blocks("python")[0]
    body = "async def _example():\n" + textwrap.indent(code, "    ")
    namespace: dict[str, object] = {}
    exec(compile(body, "README.md", "exec"), namespace)
    await namespace["_example"]()  # type: ignore[operator]


def test_ci_runs_the_readme_test_command() -> None:
    setup = _blocks("sh")[:2]
    assert len(setup) == 2
    test_command = setup[1].strip()
    assert "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()
