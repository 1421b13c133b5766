"""``mypy --strict`` accepts the tool helpers' return values where each SDK takes its tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parent.parent
CALL_SITES = ROOT / "tests" / "typed" / "sdk_call_sites.py"

pytestmark = pytest.mark.slow

WRONG = """\
import openai
from asyncmem.tool import MEMORY_TOOL, anthropic_tool, openai_tool
def calls(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="m", messages=[], tools=[anthropic_tool()])
    client.responses.create(model="m", input="hi", tools=[openai_tool()])
    client.chat.completions.create(model="m", messages=[], tools=[MEMORY_TOOL])
"""


def test_helpers_type_check_at_every_sdk_call_site(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_shapes.py"
    wrong.write_text(WRONG)
    out, err, _ = api.run(
        ["--strict", "--config-file", str(ROOT / "pyproject.toml"), str(CALL_SITES), str(wrong)]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [line for line in errors if "sdk_call_sites" in line], out + err
    # The check can fail: the wrong shape at each call site is refused, MEMORY_TOOL included.
    assert [int(line.split(":")[1]) for line in errors] == [4, 5, 6], out + err
