"""The memory tool over the Model Context Protocol: ``asyncmem mcp`` serves it on stdio (or
streamable HTTP on a loopback address).

Each action of :data:`~asyncmem.tool.MEMORY_TOOL` is one MCP tool (``memory_store``,
``memory_query``, …) whose input schema is :func:`~asyncmem.tool.action_schema`, whose output
schema is :func:`~asyncmem.tool.answer_schema`, and whose annotations say whether it reads,
destroys, or may be repeated safely. Calls go through :func:`~asyncmem.tool.run_memory_tool`,
so validation, errors and answers are the same as for function calling; a failed call comes
back as a tool result with ``isError`` set and a message the model can act on. The operator
actions (``purge``, ``evaluate``) are served only with ``admin=True`` and never to one user.

Needs the optional ``mcp`` package: ``pip install 'asyncmem[mcp]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator
from typing import Any, Final

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

import asyncmem
from asyncmem.backend import MemoryBackend
from asyncmem.errors import InvalidInputError
from asyncmem.tool import (
    ACTIONS,
    ADMIN_ACTIONS,
    action_schema,
    answer_schema,
    run_memory_tool,
)

__all__ = ["ANNOTATIONS", "TOOL_PREFIX", "make_server", "serve", "serve_http"]

TOOL_PREFIX = "memory_"

_READ = (True, False, True)
ANNOTATIONS: Final[dict[str, tuple[bool, bool, bool]]] = {
    "store": (False, True, False),
    "retrieve": _READ,
    "query": _READ,
    "list": _READ,
    "history": _READ,
    "delete": (False, True, True),
    "forget": (False, True, True),
    "store_many": (False, True, False),
    "delete_many": (False, True, True),
    "purge": (False, True, True),
    "info": _READ,
    "evaluate": (False, False, False),
}
"""Each action's ``(readOnlyHint, destructiveHint, idempotentHint)``. Storing overwrites a key
(destructive) and adds a version each time (not idempotent); deleting twice is deleting once;
``evaluate`` writes and removes scratch users only (not destructive)."""

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


def _tools(*, bound_user: bool, admin: bool) -> list[types.Tool]:
    return [
        types.Tool(
            name=TOOL_PREFIX + action,
            description=_DESCRIPTIONS[action],
            input_schema=action_schema(action, bound_user=bound_user),
            output_schema=answer_schema(action),
            annotations=types.ToolAnnotations(
                read_only_hint=ANNOTATIONS[action][0],
                destructive_hint=ANNOTATIONS[action][1],
                idempotent_hint=ANNOTATIONS[action][2],
                open_world_hint=False,
            ),
        )
        for action in ACTIONS
        if admin or action not in ADMIN_ACTIONS
    ]


def make_server(
    backend: MemoryBackend, *, user_id: str | None = None, admin: bool = False
) -> Server[Any]:
    """An MCP server whose tools run on ``backend`` (opened and closed by the caller).

    ``user_id`` serves that user's memories only; ``admin`` (not with ``user_id``) adds the
    operator tools ``memory_purge`` and ``memory_evaluate``.
    """
    if user_id is not None and admin:
        raise InvalidInputError("the operator tools are never served to one user (--user)")
    tools = _tools(bound_user=user_id is not None, admin=admin)
    offered = {tool.name for tool in tools}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        action = params.name.removeprefix(TOOL_PREFIX)
        if params.name not in offered:
            names = ", ".join(tool.name for tool in tools)
            answer = {"success": False, "error": f"unknown tool; use one of: {names}"}
        else:
            arguments = {**(params.arguments or {}), "action": action}
            answer = json.loads(
                await run_memory_tool(backend, arguments, user_id=user_id, admin=admin)
            )
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


async def serve(
    backend: MemoryBackend,
    *,
    user_id: str | None = None,
    admin: bool = False,
    http: str | None = None,
) -> None:
    """Serve ``backend`` over stdin/stdout until the client disconnects, then close it.

    ``http="[HOST:]PORT"`` serves streamable HTTP on that loopback address instead.
    """
    if http is not None:
        host, _, port = http.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInputError("--http takes [HOST:]PORT, e.g. 127.0.0.1:8765")
        host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
        await serve_http(backend, host=host, port=int(port), user_id=user_id, admin=admin)
        return
    server = make_server(backend, user_id=user_id, admin=admin)
    try:
        async with stdio_server() as (read_stream, write_stream), _opening(backend):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await backend.aclose()


@contextlib.asynccontextmanager
async def _opening(backend: MemoryBackend) -> AsyncIterator[None]:
    """Open ``backend`` while the client initializes, instead of before answering it.

    A call that arrives first waits for the opening (the backends open once, under a lock);
    an opening that failed is retried by the next call, which reports the error.
    """
    task = asyncio.create_task(backend.__aenter__())
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        yield
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def loopback(host: str) -> str:
    """``host`` if it is a loopback address or ``localhost``; the server has no authentication,
    so it is never offered to the network."""
    try:
        is_loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        is_loopback = False
    if not is_loopback:
        raise InvalidInputError(
            "the HTTP transport has no authentication: serve it on 127.0.0.1, ::1 or localhost"
        )
    return host


async def serve_http(
    backend: MemoryBackend,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    user_id: str | None = None,
    admin: bool = False,
) -> None:
    """Serve ``backend`` over streamable HTTP at ``http://host:port/mcp`` (loopback only)
    until interrupted, then close it."""
    import uvicorn

    server = make_server(backend, user_id=user_id, admin=admin)
    app = server.streamable_http_app(host=loopback(host))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    async with backend:
        await uvicorn.Server(config).serve()
