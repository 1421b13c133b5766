"""Memory as one function-calling tool: :data:`MEMORY_TOOL` and :func:`run_memory_tool`.

::

    tools = [{"type": "function", "function": MEMORY_TOOL}]
    ...
    reply = await run_memory_tool(memory, call.function.arguments)   # a JSON string

The model gets a JSON answer it can act on for every call, ``{"success": true, ...}`` or
``{"success": false, "error": "..."}``: bad arguments, a missing memory or a backend that is
down become messages, never a traceback. Stored values are data: they are returned to the
model, never parsed or executed here.

A host serving many users binds the user: ``run_memory_tool(memory, args, user_id="alice")``
refuses calls that name another user, so a model can only reach the memories of the person
it is talking to. The operator actions (:data:`ADMIN_ACTIONS`: ``purge`` reaches every user,
``evaluate`` writes scratch users) run only with ``admin=True`` and never for a bound user.

Each SDK gets its exact tool shape from one helper: :func:`openai_tool` (Chat Completions or
Responses, strict or not), :func:`anthropic_tool`, and ready tools for the OpenAI Agents SDK
(:func:`openai_agents_tool`), LangChain (:func:`langchain_tool`) and pydantic-ai
(:func:`pydantic_ai_tool`), whose packages are imported only when those helpers are called.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, overload

import asyncmem
from asyncmem.backend import (
    MAX_BATCH,
    MAX_ID_LENGTH,
    MAX_LIMIT,
    MAX_METADATA_BYTES,
    MAX_TTL,
    MAX_VALUE_BYTES,
    MemoryBackend,
    MemoryEntry,
)
from asyncmem.errors import (
    AsyncmemError,
    BackendClosedError,
    BackendUnavailableError,
    InvalidInputError,
    SchemaError,
)
from asyncmem.export import entry_to_dict

if TYPE_CHECKING:
    import jsonschema
    from agents import FunctionTool
    from agents.tool_context import ToolContext
    from anthropic.types import ToolParam as AnthropicToolParam
    from langchain_core.tools import StructuredTool
    from openai.types.chat import ChatCompletionFunctionToolParam
    from openai.types.responses import FunctionToolParam
    from pydantic_ai import Tool as PydanticAITool

__all__ = [
    "ACTIONS",
    "ADMIN_ACTIONS",
    "MEMORY_TOOL",
    "action_schema",
    "answer_schema",
    "anthropic_tool",
    "langchain_tool",
    "openai_agents_tool",
    "openai_tool",
    "pydantic_ai_tool",
    "run_memory_tool",
    "tool_parameters",
]

logger = logging.getLogger(__name__)

ACTIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "store": ("user_id", "key", "value"),
    "retrieve": ("user_id", "key"),
    "query": ("user_id", "text"),
    "list": ("user_id",),
    "history": ("user_id", "key"),
    "delete": ("user_id", "key"),
    "forget": ("user_id",),
    "store_many": ("user_id", "items"),
    "delete_many": ("user_id", "keys"),
    "purge": (),
    "info": (),
    "evaluate": (),
}
"""Each action and the arguments it requires (besides ``action``)."""

ADMIN_ACTIONS: Final = frozenset({"purge", "evaluate"})
"""Operator actions: ``purge`` deletes every user's expired memories, ``evaluate`` writes
scratch users. Offered and run only when the host asks for them (``admin=True``), never to a
tool bound to one user."""

_ACTION_OPTIONAL: Final[Mapping[str, tuple[str, ...]]] = {
    "store": ("metadata", "ttl"),
    "query": ("limit", "where"),
    "list": ("where", "limit", "offset"),
    "history": ("limit",),
    "evaluate": ("size", "repetitions"),
}

_ACTION_HELP = (
    "store: save or overwrite a memory under a key. retrieve: read one memory by key. "
    "query: find memories relevant to a question. list: the user's keys, most recent "
    "first. history: a memory's previous values, newest first. delete: remove one "
    "memory. forget: erase every memory of the user. store_many / delete_many: several "
    "at once. info: which backend is in use."
)
_ADMIN_HELP = (
    "purge: remove expired memories. evaluate: measure this backend's speed and relevance "
    "(slow; scratch users only)."
)

_PROPERTIES: Final[dict[str, dict[str, Any]]] = {
    "action": {
        "type": "string",
        "enum": list(ACTIONS),
        "description": _ACTION_HELP + " " + _ADMIN_HELP,
    },
    "user_id": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_ID_LENGTH,
        "description": "Whose memories: the person the conversation is with. Required for "
        "store, retrieve, query, list, delete and forget.",
    },
    "key": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_ID_LENGTH,
        "description": "A short, stable name for one memory, e.g. 'pet' or 'favourite_food'. "
        "Required for store, retrieve and delete.",
    },
    "value": {
        "type": "string",
        "description": "The memory itself, as a self-contained sentence. Required for store.",
    },
    "metadata": {
        "type": "object",
        "description": "Optional JSON object stored with the memory (store only), "
        "e.g. {'source': 'chat'}.",
    },
    "text": {
        "type": "string",
        "description": "A natural-language question or keywords to search for. Required for query.",
    },
    "ttl": {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": MAX_TTL,
        "description": "store only: forget the memory after this many seconds "
        "(e.g. 86400 for a day). Leave out to keep it until deleted.",
    },
    "where": {
        "type": "object",
        "description": "query and list only: only memories whose metadata matches, e.g. "
        "{'source': 'chat'} or {'priority': {'$gte': 2}}. Operators: $eq $ne $gt $gte $lt "
        "$lte $in $exists; a dotted field reaches into nested objects.",
    },
    "limit": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_LIMIT,
        "description": f"How many results at most (1 to {MAX_LIMIT}): query (default 5), "
        "history (default 10), list (default all; page with offset).",
    },
    "offset": {
        "type": "integer",
        "minimum": 0,
        "description": "list only: skip this many keys (for paging).",
    },
    "items": {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_BATCH,
        "items": {
            "type": "object",
            "properties": {
                "key": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
                "value": {"type": "string"},
                "metadata": {"type": "object"},
                "ttl": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TTL},
            },
            "required": ["key", "value"],
            "additionalProperties": False,
        },
        "description": "store_many only: the memories to store, all or none, "
        "e.g. [{'key': 'pet', 'value': 'has a cat'}].",
    },
    "keys": {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_BATCH,
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
        "description": "delete_many only: the keys to delete.",
    },
    "size": {
        "type": "integer",
        "minimum": 1,
        "maximum": 2000,
        "description": "evaluate only: how many memories to time against (default 200).",
    },
    "repetitions": {
        "type": "integer",
        "minimum": 1,
        "maximum": 500,
        "description": "evaluate only: timed calls per operation (default 50).",
    },
}

MEMORY_TOOL: Final[dict[str, Any]] = {
    "name": "memory",
    "description": (
        "Long-term memory about the user that lasts across conversations. Store facts worth "
        "remembering under short keys, query with a question before answering, retrieve a "
        "known key, list keys, delete what is wrong or forget everything on request. "
        "Returns JSON with success true or false; on false, read 'error' and fix the call."
    ),
    "parameters": {
        "type": "object",
        "properties": _PROPERTIES,
        "required": ["action"],
        "additionalProperties": False,
    },
}
"""An OpenAI-style function definition (``name``, ``description``, JSON-schema ``parameters``).

The schema is one flat object, since several providers refuse ``oneOf``/``allOf`` at the top
level; which arguments each action needs is in the descriptions and checked by
:func:`run_memory_tool` against :func:`action_schema`.
"""

_DEFAULT_QUERY_LIMIT = 5
_DEFAULT_EVAL_SIZE = 200
_DEFAULT_EVAL_REPETITIONS = 50
_MAX_ERROR_CHARS = 300


def action_schema(action: str, *, bound_user: bool = False) -> dict[str, Any]:
    """The JSON schema of one action's arguments, without ``action`` itself.

    ``bound_user`` leaves out ``user_id`` (the host supplies it). Used to check calls and to
    describe each action as its own MCP tool.
    """
    if action not in ACTIONS:
        raise InvalidInputError(f"unknown action {action!r}")
    names = [*ACTIONS[action], *_ACTION_OPTIONAL.get(action, ())]
    if bound_user:
        names = [name for name in names if name != "user_id"]
    return {
        "type": "object",
        "properties": {name: _PROPERTIES[name] for name in names},
        "required": [name for name in ACTIONS[action] if name in names],
        "additionalProperties": False,
    }


@functools.cache
def _validator(action: str | None) -> jsonschema.Draft202012Validator:
    """The checker of all arguments (``None``) or of one action's: made on first use, since
    jsonschema is a tenth of a second to import and the MCP server should start without it."""
    import jsonschema

    schema = MEMORY_TOOL["parameters"] if action is None else action_schema(action)
    return jsonschema.Draft202012Validator(schema)


_MEMORY_ANSWER: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "key": {"type": "string"},
        "value": {"type": "string"},
        "metadata": {"type": "object"},
        "created_at": {"type": "number"},
        "updated_at": {"type": "number"},
        "expires_at": {"type": "number"},
        "score": {"type": "number"},
    },
    "required": ["key", "value", "metadata", "created_at", "updated_at"],
    "additionalProperties": False,
}
_COUNT = {"type": "integer", "minimum": 0}
_TEXT = {"type": "string"}
_MEMORIES = {"type": "array", "items": _MEMORY_ANSWER}
_KEYS = {"type": "array", "items": _TEXT}
_ANSWERS: Final[Mapping[str, Mapping[str, Any]]] = {
    "store": {
        "key": _TEXT,
        "created": {"type": "boolean"},
        "updated_at": {"type": "number"},
        "expires_at": {"type": "number"},
    },
    "retrieve": {"found": {"type": "boolean"}, "memory": _MEMORY_ANSWER, "message": _TEXT},
    "query": {"count": _COUNT, "results": _MEMORIES},
    "list": {"count": _COUNT, "keys": _KEYS},
    "history": {"count": _COUNT, "versions": _MEMORIES},
    "delete": {"deleted": {"type": "boolean"}, "message": _TEXT},
    "forget": {"deleted_count": _COUNT},
    "store_many": {"count": _COUNT, "keys": _KEYS},
    "delete_many": {"deleted_count": _COUNT},
    "purge": {"purged_count": _COUNT},
    "info": {
        "backend": _TEXT,
        "is_cloud": {"type": "boolean"},
        "available": {"type": "boolean"},
        "version": _TEXT,
        "actions": _KEYS,
        "limits": {"type": "object", "additionalProperties": {"type": "number"}},
    },
    "evaluate": {"report": {"type": "object"}},
}


def answer_schema(action: str) -> dict[str, Any]:
    """The JSON schema of what :func:`run_memory_tool` answers to ``action``, failures included
    (``{"success": false, "error": ...}``): the MCP tools' ``outputSchema``."""
    if action not in ACTIONS:
        raise InvalidInputError(f"unknown action {action!r}")
    return copy.deepcopy(
        {
            "type": "object",
            "properties": {
                "success": {"type": "boolean"},
                "error": _TEXT,
                "action": {"const": action},
                **_ANSWERS[action],
            },
            "required": ["success"],
            "additionalProperties": False,
        }
    )


_STRICT_KEYWORDS: Final = frozenset(
    {"type", "enum", "description", "properties", "required", "additionalProperties", "items"}
)
"""What a strict schema keeps: OpenAI's strict mode refuses the rest (``minLength``,
``maxLength``, ``exclusiveMinimum`` …); :func:`run_memory_tool` still checks those bounds."""

_JSON_TEXT: Final = frozenset({"metadata", "where"})
"""Free-form objects: strict mode cannot describe an object with unknown keys, so a strict
schema asks for them as JSON text, which :func:`run_memory_tool` decodes."""

_STRICT_NOTE = (
    " Every field must be present: use null for the fields the action does not take, and "
    "write metadata and where as JSON text."
)


def _offered(*, admin: bool) -> list[str]:
    return [action for action in ACTIONS if admin or action not in ADMIN_ACTIONS]


def _strict(name: str, schema: Mapping[str, Any], *, nullable: bool) -> dict[str, Any]:
    """``schema`` under OpenAI's strict rules; ``nullable`` where the field may be left out."""
    if name in _JSON_TEXT:
        example = '{"source": "chat"}' if name == "metadata" else '{"priority": {"$gte": 2}}'
        strict: dict[str, Any] = {
            "type": "string",
            "description": f"{schema.get('description', 'A JSON object')} Written as JSON "
            f"text, e.g. '{example}'.",
        }
    else:
        strict = {word: value for word, value in schema.items() if word in _STRICT_KEYWORDS}
        if "properties" in schema:
            required = set(schema.get("required", ()))
            strict["properties"] = {
                field: _strict(field, sub, nullable=field not in required)
                for field, sub in schema["properties"].items()
            }
            strict["required"] = list(schema["properties"])
            strict["additionalProperties"] = False
        if "items" in schema:
            strict["items"] = _strict("", schema["items"], nullable=False)
    if nullable:
        strict["type"] = [strict["type"], "null"]
        if "enum" in strict:
            strict["enum"] = [*strict["enum"], None]
    return strict


def tool_parameters(
    *, strict: bool = False, bound_user: bool = False, admin: bool = False
) -> dict[str, Any]:
    """The JSON schema of the tool's arguments (a fresh copy: SDKs may change what they get).

    ``strict`` follows OpenAI's strict rules: every property required, nullable where the
    action may leave it out, ``additionalProperties: false`` on every object, no keyword strict
    mode refuses, ``metadata`` and ``where`` as JSON text. ``bound_user`` leaves out
    ``user_id`` (the host supplies it); ``admin`` offers :data:`ADMIN_ACTIONS` too.
    """
    properties = {
        name: copy.deepcopy(schema)
        for name, schema in _PROPERTIES.items()
        if not (bound_user and name == "user_id")
        and (admin or name not in _ACTION_OPTIONAL["evaluate"])
    }
    properties["action"]["enum"] = _offered(admin=admin)
    if not admin:
        properties["action"]["description"] = _ACTION_HELP
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": ["action"],
        "additionalProperties": False,
    }
    if strict:
        schema = _strict("", schema, nullable=False)
        schema["properties"]["action"]["description"] += _STRICT_NOTE
    return schema


def _function(*, strict: bool, bound_user: bool, admin: bool) -> tuple[str, str, dict[str, Any]]:
    description: str = MEMORY_TOOL["description"]
    return (
        MEMORY_TOOL["name"],
        description,
        tool_parameters(strict=strict, bound_user=bound_user, admin=admin),
    )


@overload
def openai_tool(
    *,
    api: Literal["chat"] = "chat",
    strict: bool = True,
    bound_user: bool = False,
    admin: bool = False,
) -> ChatCompletionFunctionToolParam: ...
@overload
def openai_tool(
    *,
    api: Literal["responses"],
    strict: bool = True,
    bound_user: bool = False,
    admin: bool = False,
) -> FunctionToolParam: ...
def openai_tool(
    *,
    api: Literal["chat", "responses"] = "chat",
    strict: bool = True,
    bound_user: bool = False,
    admin: bool = False,
) -> ChatCompletionFunctionToolParam | FunctionToolParam:
    """The memory tool for OpenAI: an item of ``tools=`` for Chat Completions (``api="chat"``,
    the nested ``{"type": "function", "function": {...}}``) or the Responses API
    (``api="responses"``, the flat ``{"type": "function", "name": ...}``).

    ``strict`` (the default; the Responses API is strict when told nothing) gives the strict
    schema of :func:`tool_parameters`; ``strict=False`` the plain one, with ``"strict": false``
    written out so the Responses API does not make it strict anyway. Pass
    ``bound_user=True`` when :func:`run_memory_tool` gets ``user_id``, ``admin=True`` to offer
    the operator actions.
    """
    name, description, parameters = _function(strict=strict, bound_user=bound_user, admin=admin)
    if api == "responses":
        return {
            "type": "function",
            "name": name,
            "description": description,
            "parameters": parameters,
            "strict": strict,
        }
    if api != "chat":
        raise InvalidInputError("api must be 'chat' or 'responses'")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": parameters,
            "strict": strict,
        },
    }


def anthropic_tool(*, bound_user: bool = False, admin: bool = False) -> AnthropicToolParam:
    """The memory tool for Anthropic's Messages API: an item of ``tools=`` (``input_schema``)."""
    name, description, parameters = _function(strict=False, bound_user=bound_user, admin=admin)
    return {"name": name, "description": description, "input_schema": parameters}


def _bound(user_id: str | None, admin: bool) -> None:
    if user_id is not None and admin:
        raise InvalidInputError(
            "the operator actions reach every user: they are never offered to a tool bound "
            "to one user"
        )


def openai_agents_tool(
    backend: MemoryBackend, *, user_id: str | None = None, admin: bool = False, strict: bool = True
) -> FunctionTool:
    """A ready ``agents.FunctionTool`` (OpenAI Agents SDK) running on ``backend``.

    Strict by default, as the SDK is; ``user_id`` binds the tool to one user. Needs
    ``pip install 'asyncmem[agents]'``.
    """
    from agents import FunctionTool

    _bound(user_id, admin)
    name, description, parameters = _function(
        strict=strict, bound_user=user_id is not None, admin=admin
    )

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        return await run_memory_tool(backend, arguments, user_id=user_id, admin=admin)

    return FunctionTool(
        name=name,
        description=description,
        params_json_schema=parameters,
        on_invoke_tool=invoke,
        strict_json_schema=strict,
    )


def langchain_tool(
    backend: MemoryBackend, *, user_id: str | None = None, admin: bool = False
) -> StructuredTool:
    """A ready LangChain ``StructuredTool`` (async: ``ainvoke``) running on ``backend``.

    Its ``args_schema`` is the plain JSON schema; LangChain's converters make the strict one
    when asked. Needs ``pip install 'asyncmem[langchain]'``.
    """
    from langchain_core.tools import StructuredTool

    _bound(user_id, admin)
    name, description, parameters = _function(
        strict=False, bound_user=user_id is not None, admin=admin
    )

    async def memory(**arguments: Any) -> str:
        return await run_memory_tool(backend, arguments, user_id=user_id, admin=admin)

    return StructuredTool.from_function(
        coroutine=memory, name=name, description=description, args_schema=parameters
    )


def pydantic_ai_tool(
    backend: MemoryBackend, *, user_id: str | None = None, admin: bool = False
) -> PydanticAITool[Any]:
    """A ready pydantic-ai ``Tool`` running on ``backend`` (``Agent(..., tools=[...])``).

    Needs ``pip install 'asyncmem[pydantic-ai]'``.
    """
    from pydantic_ai import Tool

    _bound(user_id, admin)
    name, description, parameters = _function(
        strict=False, bound_user=user_id is not None, admin=admin
    )

    async def memory(**arguments: Any) -> str:
        return await run_memory_tool(backend, arguments, user_id=user_id, admin=admin)

    return Tool.from_schema(memory, name=name, description=description, json_schema=parameters)


class _ToolError(Exception):
    """A call the model can fix: the message says how."""


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 1] + "…"


def _schema_error(
    error: jsonschema.ValidationError, args: dict[str, Any], action: str | None
) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    allowed = action_schema(action)["properties"] if action else _PROPERTIES
    takes = ", ".join(allowed) or "no other arguments"
    if error.validator == "required" and not where:
        if action is None:
            return f"missing 'action'; use one of: {', '.join(ACTIONS)}"
        missing = [name for name in ACTIONS[action] if name not in args]
        names = ", ".join(repr(name) for name in missing)
        return f"action {action!r} needs {names}; it takes: {takes}"
    if error.validator == "additionalProperties" and not where:
        extra = sorted((n for n in args if n != "action" and n not in allowed), key=repr)
        names = ", ".join(repr(name) for name in extra)
        suffix = f" for action {action!r}; it takes: {takes}" if action else ""
        return _clip(f"unexpected argument {names}{suffix}")
    if error.validator == "enum" and where == "action":
        return f"unknown action; use one of: {', '.join(ACTIONS)}"
    return _clip(f"invalid argument {where or 'arguments'!r}: {error.message}")


def _parse(arguments: object) -> dict[str, Any]:
    if isinstance(arguments, str | bytes | bytearray):
        if not arguments.strip():
            raise _ToolError('no arguments: send a JSON object such as {"action": "info"}')
        try:
            arguments = json.loads(arguments)
        except RecursionError:
            raise _ToolError(_TOO_DEEP) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            where = (
                f" at line {exc.lineno} column {exc.colno}"
                if isinstance(exc, json.JSONDecodeError)
                else ""
            )
            raise _ToolError(
                f"arguments are not valid JSON ({detail}{where}); send one JSON object "
                'such as {"action": "query", "user_id": "alice", "text": "pets"}'
            ) from None
    if not isinstance(arguments, Mapping):
        raise _ToolError(
            f"arguments must be a JSON object, not {type(arguments).__name__}; "
            'such as {"action": "list", "user_id": "alice"}'
        )
    _check_depth(arguments)
    args = {name: value for name, value in arguments.items() if value is not None}
    for name in _JSON_TEXT:
        if isinstance(args.get(name), str):
            decoded = _json_text(name, args.pop(name))
            if decoded is not None:
                _check_depth(decoded)
                args[name] = decoded
    items = args.get("items")
    if isinstance(items, list):
        args["items"] = [_strict_item(item) for item in items]
    return args


_MAX_DEPTH = 100
"""Deepest nesting of the arguments (metadata itself may nest 64 levels inside them)."""
_TOO_DEEP = f"arguments are nested more than {_MAX_DEPTH} levels deep"


def _check_depth(value: object) -> None:
    """Refuse arguments nested deeper than :data:`_MAX_DEPTH` (without recursing)."""
    level: list[object] = [value]
    for _ in range(_MAX_DEPTH + 1):
        inner: list[object] = []
        for node in level:
            if isinstance(node, Mapping):
                inner.extend(node.values())
            elif isinstance(node, list | tuple):
                inner.extend(node)
        if not inner:
            return
        level = inner
    raise _ToolError(_TOO_DEEP)


def _json_text(name: str, text: str) -> object:
    """Decode ``metadata`` or ``where`` sent as JSON text (what the strict schema asks for)."""
    if not text.strip():
        return None
    try:
        decoded: object = json.loads(text)
    except RecursionError:
        raise _ToolError(f"{name!r} is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise _ToolError(
            f"{name!r} is not valid JSON text ({exc.msg} at column {exc.colno}); write a JSON "
            'object such as \'{"source": "chat"}\''
        ) from None
    return decoded


def _strict_item(item: object) -> object:
    """One ``store_many`` item as a strict model writes it: nulls left out, metadata decoded."""
    if not isinstance(item, Mapping):
        return item
    found = {name: value for name, value in item.items() if value is not None}
    if isinstance(found.get("metadata"), str):
        decoded = _json_text("metadata", found.pop("metadata"))
        if decoded is not None:
            found["metadata"] = decoded
    return found


def _check(args: dict[str, Any], user_id: str | None, admin: bool) -> str:
    """Validate ``args`` in place (the bound user filled in) and return the action."""
    named = args.get("action")
    known = named if isinstance(named, str) and named in ACTIONS else None
    if known in ADMIN_ACTIONS and (user_id is not None or not admin):
        why = "a tool bound to one user" if user_id is not None else "this host"
        offered = ", ".join(_offered(admin=False))
        raise _ToolError(
            f"action {known!r} is an operator action, not offered to {why}; use one of: {offered}"
        )
    if user_id is not None:
        if args.get("user_id", user_id) != user_id:
            raise _ToolError(
                "this memory tool serves one user only; leave out user_id to use their memories"
            )
        if known is not None and "user_id" in ACTIONS[known]:
            args["user_id"] = user_id
        else:
            args.pop("user_id", None)
    from jsonschema.exceptions import best_match

    error = best_match(_validator(None).iter_errors(args))
    if error is None and known is not None:
        rest = {name: value for name, value in args.items() if name != "action"}
        error = best_match(_validator(known).iter_errors(rest))
    if error is not None or known is None:
        raise _ToolError(
            _schema_error(error, args, known) if error is not None else "missing 'action'"
        )
    return known


def _memory(entry: MemoryEntry) -> dict[str, Any]:
    return entry_to_dict(entry, user_id=False)


async def _evaluate(backend: MemoryBackend, args: dict[str, Any]) -> dict[str, Any]:
    """Run the evaluator on ``backend``, when this installation has it."""
    try:
        evaluation: Any = importlib.import_module("asyncmem.evaluation")
    except ImportError:
        raise _ToolError("evaluation is not available in this version of asyncmem") from None
    workload = evaluation.Workload(
        size=args.get("size", _DEFAULT_EVAL_SIZE),
        repetitions=args.get("repetitions", _DEFAULT_EVAL_REPETITIONS),
    )
    report = await evaluation.evaluate([backend], workload=workload)
    result: dict[str, Any] = report.to_dict()
    return {"report": result}


async def _dispatch(
    backend: MemoryBackend, action: str, args: dict[str, Any], *, admin: bool
) -> dict[str, Any]:
    if action == "store":
        entry = await backend.store(
            args["user_id"], args["key"], args["value"], args.get("metadata"), ttl=args.get("ttl")
        )
        return {
            "key": entry.key,
            "created": entry.created_at == entry.updated_at,
            "updated_at": entry.updated_at,
        } | ({"expires_at": entry.expires_at} if entry.expires_at is not None else {})
    if action == "retrieve":
        found = await backend.retrieve(args["user_id"], args["key"])
        if found is None:
            return {
                "found": False,
                "message": f"no memory under key {args['key']!r}; use 'list' to see the keys "
                "or 'query' to search",
            }
        return {"found": True, "memory": _memory(found)}
    if action == "query":
        hits = await backend.query(
            args["user_id"],
            args["text"],
            args.get("limit", _DEFAULT_QUERY_LIMIT),
            where=args.get("where"),
        )
        return {"count": len(hits), "results": [_memory(hit) for hit in hits]}
    if action == "list":
        keys = await backend.list_keys(
            args["user_id"],
            where=args.get("where"),
            limit=args.get("limit"),
            offset=args.get("offset", 0),
        )
        return {"count": len(keys), "keys": keys}
    if action == "history":
        versions = await backend.history(args["user_id"], args["key"], args.get("limit", 10))
        return {"count": len(versions), "versions": [_memory(v) for v in versions]}
    if action == "store_many":
        stored = await backend.store_many(args["user_id"], args["items"])
        return {"count": len(stored), "keys": [entry.key for entry in stored]}
    if action == "delete_many":
        return {"deleted_count": await backend.delete_many(args["user_id"], args["keys"])}
    if action == "purge":
        return {"purged_count": await backend.purge_expired()}
    if action == "delete":
        deleted = await backend.delete(args["user_id"], args["key"])
        return {"deleted": deleted} | (
            {} if deleted else {"message": f"there was no memory under key {args['key']!r}"}
        )
    if action == "forget":
        return {"deleted_count": await backend.forget_user(args["user_id"])}
    if action == "info":
        return {
            "backend": backend.backend_name,
            "is_cloud": backend.is_cloud,
            "available": await backend.is_available(),
            "version": asyncmem.__version__,
            "actions": _offered(admin=admin),
            "limits": {
                "id_characters": MAX_ID_LENGTH,
                "value_bytes": MAX_VALUE_BYTES,
                "metadata_bytes": MAX_METADATA_BYTES,
                "query_limit": MAX_LIMIT,
            },
        }
    return await _evaluate(backend, args)


def _failure(message: str) -> str:
    return json.dumps({"success": False, "error": message}, ensure_ascii=False)


async def run_memory_tool(
    backend: MemoryBackend,
    arguments: object,
    *,
    user_id: str | None = None,
    admin: bool = False,
) -> str:
    """Validate a call of the memory tool, run it on ``backend`` and answer in JSON.

    ``arguments`` is the dict or the raw JSON text the model produced, from any of the shapes
    (strict ones send null for unused fields and ``metadata``/``where`` as JSON text).
    ``user_id`` binds the tool to one user: calls may leave ``user_id`` out, calls naming
    another user fail, and the operator actions are refused. ``admin=True`` (unbound only)
    allows :data:`ADMIN_ACTIONS`. Always returns a JSON object with ``success``; never raises
    for anything the model or the backend did (only cancellation propagates).
    """
    _bound(user_id, admin)
    try:
        args = _parse(arguments)
        action = _check(args, user_id, admin)
        result = await _dispatch(backend, action, args, admin=admin and user_id is None)
    except _ToolError as exc:
        return _failure(str(exc))
    except InvalidInputError as exc:
        return _failure(f"invalid input: {_clip(str(exc))}")
    except BackendUnavailableError as exc:
        return _failure(f"memory is unavailable right now ({exc}); try again later")
    except (BackendClosedError, SchemaError) as exc:
        return _failure(f"memory cannot be used: {exc}")
    except AsyncmemError as exc:
        return _failure(f"the memory backend failed: {exc}")
    except Exception as exc:
        logger.warning("memory tool call failed unexpectedly", exc_info=exc)
        return _failure(f"internal error in the memory backend ({type(exc).__name__})")
    return json.dumps({"success": True, "action": action, **result}, ensure_ascii=False)
