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
it is talking to.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

import jsonschema

import asyncmem
from asyncmem.backend import (
    MAX_BATCH,
    MAX_ID_LENGTH,
    MAX_LIMIT,
    MAX_METADATA_BYTES,
    MAX_PAGE_SIZE,
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

__all__ = ["ACTIONS", "MEMORY_TOOL", "action_schema", "run_memory_tool"]

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

_ACTION_OPTIONAL: Final[Mapping[str, tuple[str, ...]]] = {
    "store": ("metadata", "ttl"),
    "query": ("limit", "where"),
    "list": ("where", "limit", "offset"),
    "history": ("limit",),
    "evaluate": ("size", "repetitions"),
}

_PROPERTIES: Final[dict[str, dict[str, Any]]] = {
    "action": {
        "type": "string",
        "enum": list(ACTIONS),
        "description": (
            "store: save or overwrite a memory under a key. retrieve: read one memory by key. "
            "query: find memories relevant to a question. list: the user's keys, most recent "
            "first. history: a memory's previous values, newest first. delete: remove one "
            "memory. forget: erase every memory of the user. store_many / delete_many: several "
            "at once. purge: remove expired memories. info: which backend is in use. "
            "evaluate: measure this backend's speed and relevance (slow; scratch users only)."
        ),
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
        "maximum": MAX_PAGE_SIZE,
        "description": f"How many results at most: query (default 5, at most {MAX_LIMIT}), "
        "history (default 10), list (default all).",
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
_VALIDATOR = jsonschema.Draft202012Validator(MEMORY_TOOL["parameters"])


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


_ACTION_VALIDATORS = {
    action: jsonschema.Draft202012Validator(action_schema(action)) for action in ACTIONS
}


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
    if error.validator == "required":
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
    return {name: value for name, value in arguments.items() if value is not None}


def _check(args: dict[str, Any], user_id: str | None) -> str:
    """Validate ``args`` in place (the bound user filled in) and return the action."""
    named = args.get("action")
    known = named if isinstance(named, str) and named in ACTIONS else None
    if user_id is not None:
        if args.get("user_id", user_id) != user_id:
            raise _ToolError(
                "this memory tool serves one user only; leave out user_id to use their memories"
            )
        if known is not None and "user_id" in ACTIONS[known]:
            args["user_id"] = user_id
        else:
            args.pop("user_id", None)
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(args))
    if error is None and known is not None:
        rest = {name: value for name, value in args.items() if name != "action"}
        error = jsonschema.exceptions.best_match(_ACTION_VALIDATORS[known].iter_errors(rest))
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


async def _dispatch(backend: MemoryBackend, action: str, args: dict[str, Any]) -> dict[str, Any]:
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
            "actions": list(ACTIONS),
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
    backend: MemoryBackend, arguments: object, *, user_id: str | None = None
) -> str:
    """Validate a call of :data:`MEMORY_TOOL`, run it on ``backend`` and answer in JSON.

    ``arguments`` is the dict or the raw JSON text the model produced. ``user_id`` binds the
    tool to one user: calls may leave ``user_id`` out, and calls naming another user fail.
    Always returns a JSON object with ``success``; never raises for anything the model or the
    backend did (only cancellation propagates).
    """
    try:
        args = _parse(arguments)
        action = _check(args, user_id)
        result = await _dispatch(backend, action, args)
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
