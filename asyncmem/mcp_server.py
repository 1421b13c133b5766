"""The memory tool over the Model Context Protocol: ``asyncmem mcp`` serves it on stdio.

Each action of :data:`~asyncmem.tool.MEMORY_TOOL` is one MCP tool (``memory_store``,
``memory_query``, …) whose input schema is :func:`~asyncmem.tool.action_schema`. Calls go
through :func:`~asyncmem.tool.run_memory_tool`, so validation, errors and answers are the same
as for function calling; a failed call comes back as a tool result with ``isError`` set and a
message the model can act on.

Needs the optional ``mcp`` package: ``pip install 'asyncmem[mcp]'``.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

import asyncmem
from asyncmem.backend import MemoryBackend
from asyncmem.tool import ACTIONS, action_schema, run_memory_tool

__all__ = ["TOOL_PREFIX", "make_server", "serve"]

TOOL_PREFIX = "memory_"

_DESCRIPTIONS = {
    "store": "Save a fact about the user under a short key (overwrites that key).",
    "retrieve": "Read the memory stored under a key.",
    "query": "Find the user's memories most relevant to a question.",
    "list": "List the user's keys, most recently updated first.",
    "delete": "Delete the memory stored under a key.",
    "forget": "Erase every memory of the user.",
    "history": "Read a memory's kept versions, newest (the current one) first.",
    "store_many": "Save several memories at once, all or none.",
    "delete_many": "Delete the memories stored under several keys.",
    "purge": "Remove every expired memory (they are already invisible to reads).",
    "info": "Which memory backend is in use, where data lives, and the size limits.",
    "evaluate": "Measure this memory backend's speed and relevance (slow).",
}


def _tools(bound_user: bool) -> list[types.Tool]:
    return [
        types.Tool(
            name=TOOL_PREFIX + action,
            description=_DESCRIPTIONS[action],
            input_schema=action_schema(action, bound_user=bound_user),
        )
        for action in ACTIONS
    ]


def make_server(backend: MemoryBackend, *, user_id: str | None = None) -> Server[Any]:
    """An MCP server whose tools run on ``backend`` (opened and closed by the caller)."""
    tools = _tools(user_id is not None)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        action = params.name.removeprefix(TOOL_PREFIX)
        if not params.name.startswith(TOOL_PREFIX) or action not in ACTIONS:
            names = ", ".join(tool.name for tool in tools)
            answer = {"success": False, "error": f"unknown tool; use one of: {names}"}
        else:
            arguments = {**(params.arguments or {}), "action": action}
            answer = json.loads(await run_memory_tool(backend, arguments, user_id=user_id))
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(answer, ensure_ascii=False))],
            structured_content=answer,
            is_error=not answer["success"],
        )

    return Server(
        "asyncmem",
        version=asyncmem.__version__,
        instructions=(
            "Long-term memory about the user. Query it before answering questions about the "
            "user; store facts worth keeping under short keys."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(backend: MemoryBackend, *, user_id: str | None = None) -> None:
    """Serve ``backend`` over stdin/stdout until the client disconnects, then close it."""
    async with backend:
        server = make_server(backend, user_id=user_id)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
