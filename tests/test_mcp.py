"""``asyncmem mcp``: the memory tool served over stdio, driven by the MCP SDK's own client."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from asyncmem import InvalidInputError, SQLBackend
from asyncmem.mcp_server import ANNOTATIONS, TOOL_PREFIX, loopback, make_server
from asyncmem.tool import ACTIONS, ADMIN_ACTIONS, action_schema, answer_schema

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def server(tmp_path: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "asyncmem", "mcp", "--backend", f"sqlite:///{tmp_path / 'memory.db'}", *extra],
        env={"PYTHONPATH": str(ROOT), "XDG_DATA_HOME": str(tmp_path / "xdg")},
        cwd=tmp_path,
    )


def connect(tmp_path: Path, *extra: str) -> Client:
    """A client that spawns the server; entered in the test itself, since anyio's cancel
    scopes must be left in the task that entered them (an async fixture would not be)."""
    return Client(server(tmp_path, *extra), read_timeout_seconds=60)


async def call(client: Client, action: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(TOOL_PREFIX + action, arguments)
    (content,) = result.content
    assert content.type == "text"
    answer: dict[str, Any] = json.loads(content.text)
    assert result.structured_content == answer
    assert answer["success"] is not result.is_error
    return result.is_error, answer


async def test_every_action_is_a_tool_with_its_schema(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        listed = await client.list_tools()
    offered = [action for action in ACTIONS if action not in ADMIN_ACTIONS]
    assert [tool.name for tool in listed.tools] == [TOOL_PREFIX + action for action in offered]
    for tool, action in zip(listed.tools, offered, strict=True):
        assert tool.input_schema == action_schema(action)
        assert tool.output_schema == answer_schema(action)
        assert tool.description
        hints = tool.annotations
        assert hints is not None
        assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
            ANNOTATIONS[action]
        )
    read_only = {tool.name for tool in listed.tools if tool.annotations.read_only_hint}  # type: ignore[union-attr]
    assert read_only == {TOOL_PREFIX + a for a in ("retrieve", "query", "list", "history", "info")}


async def test_operator_tools_only_with_admin_and_never_for_one_user(
    sql_store: SQLBackend,
) -> None:
    """In process: the same server object the stdio and HTTP transports serve."""
    await sql_store.store("bob", "note", "expires soon", ttl=0.01)
    await asyncio.sleep(0.05)  # expired before any purge below, however fast the client is
    async with Client(make_server(sql_store)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert not names & {TOOL_PREFIX + action for action in ADMIN_ACTIONS}
        result = await client.call_tool(TOOL_PREFIX + "purge", {})
        assert result.is_error
        assert "unknown tool" in result.content[0].text  # type: ignore[union-attr]
    async with Client(make_server(sql_store, admin=True)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {TOOL_PREFIX + action for action in ADMIN_ACTIONS} <= names
        failed, answer = await call(client, "purge")
        assert not failed
        assert answer["purged_count"] == 1
    with pytest.raises(InvalidInputError, match="never served to one user"):
        make_server(sql_store, user_id="alice", admin=True)
    async with Client(make_server(sql_store, user_id="alice")) as client:
        result = await client.call_tool(TOOL_PREFIX + "evaluate", {})
        assert result.is_error


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.2", "example.org", "::"])
async def test_http_transport_refuses_addresses_off_loopback(host: str) -> None:
    with pytest.raises(InvalidInputError, match="no authentication"):
        loopback(host)


async def test_streamable_http_on_loopback(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "server.log"
    with log.open("wb") as stderr:
        spawned = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "asyncmem", "mcp", "--http", f"127.0.0.1:{port}"],
            *["--backend", f"sqlite:///{tmp_path / 'memory.db'}", "--user", "alice"],
            env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_DATA_HOME": str(tmp_path / "x")},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        for _ in range(300):
            with socket.socket() as attempt:
                if attempt.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert spawned.returncode is None, log.read_text()
            await asyncio.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=60) as client:
            failed, _ = await call(client, "store", key="pet", value="a grey cat")
            assert not failed
            _, hits = await call(client, "query", text="which cat?")
            assert [hit["key"] for hit in hits["results"]] == ["pet"]
    finally:
        spawned.terminate()
        await spawned.wait()
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as store:
        assert await store.list_keys("alice") == ["pet"]


async def test_memories_stored_over_mcp_are_in_the_database(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        failed, stored = await call(
            client,
            "store",
            user_id="alice",
            key="pet",
            value="Alice has a grey cat",
            metadata={"n": 1},
        )
        assert not failed
        assert stored["created"] is True
        await call(client, "store", user_id="alice", key="job", value="Alice is a nurse")

        _, found = await call(client, "retrieve", user_id="alice", key="pet")
        assert found["memory"]["value"] == "Alice has a grey cat"
        _, hits = await call(client, "query", user_id="alice", text="Which cat does she have?")
        assert [hit["key"] for hit in hits["results"]] == ["pet"]
        _, listed = await call(client, "list", user_id="alice")
        assert listed["keys"] == ["job", "pet"]
        _, deleted = await call(client, "delete", user_id="alice", key="job")
        assert deleted["deleted"] is True
        _, info = await call(client, "info")
        assert info["backend"] == "sql (sqlite)"

        async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as store:
            entry = await store.retrieve("alice", "pet")
            assert entry is not None
            assert entry.metadata == {"n": 1}
            assert await store.list_keys("alice") == ["pet"]

        _, forgot = await call(client, "forget", user_id="alice")
        assert forgot["deleted_count"] == 1


async def test_mistakes_are_tool_errors_the_model_can_read(tmp_path: Path) -> None:
    async with connect(tmp_path) as client:
        failed, answer = await call(client, "retrieve", user_id="alice")
        assert failed
        assert answer["error"] == "action 'retrieve' needs 'key'; it takes: user_id, key"
        failed, answer = await call(client, "query", user_id="a", text="x", limit=0)
        assert failed
        assert "minimum of 1" in answer["error"]
        failed, answer = await call(client, "store", user_id="a", key="k", value="v", colour="red")
        assert failed
        assert "unexpected argument 'colour'" in answer["error"]
        result = await client.call_tool("remember", {"user_id": "a"})
        assert result.is_error
        assert "unknown tool" in result.content[0].text  # type: ignore[union-attr]
        failed, _ = await call(client, "list", user_id="a")
        assert not failed, "the server keeps serving after errors"


async def test_bound_user_server(tmp_path: Path) -> None:
    async with Client(server(tmp_path, "--user", "alice"), read_timeout_seconds=60) as client:
        listed = await client.list_tools()
        for tool in listed.tools:
            assert "user_id" not in tool.input_schema["properties"]
        failed, _ = await call(client, "store", key="pet", value="a grey cat")
        assert not failed
        failed, answer = await call(client, "list", user_id="bob")
        assert failed
        assert "one user" in answer["error"]
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as store:
        assert await store.list_keys("alice") == ["pet"]


async def test_a_backend_that_cannot_open_still_answers_initialize(tmp_path: Path) -> None:
    """The server opens the backend while the client initializes: a failure comes back as a
    tool error the model can read, and the server keeps serving."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "asyncmem", "mcp", "--backend", "postgresql://nobody@127.0.0.1:1/none"],
        env={"PYTHONPATH": str(ROOT), "XDG_DATA_HOME": str(tmp_path / "xdg")},
        cwd=tmp_path,
    )
    async with Client(params, read_timeout_seconds=60) as client:
        assert (await client.list_tools()).tools
        for _ in range(2):
            failed, answer = await call(client, "list", user_id="alice")
            assert failed
            assert "unavailable" in answer["error"]
            assert "nobody" not in answer["error"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--user", "alice", "--admin"], "never served to one user"),
        (["--http", "0.0.0.0:8765"], "no authentication"),
        (["--http", "localhost:port"], "[HOST:]PORT"),
        (["--http", "127.0.0.1:70000"], "[HOST:]PORT"),
    ],
)
def test_mcp_command_refuses_unsafe_or_bad_options(
    capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    from asyncmem.cli import main

    assert main(["mcp", "--backend", "null", *extra]) == 1
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err
