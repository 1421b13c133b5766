"""Each SDK's tool shape, checked with that SDK's own types and converters (no network), and a
strict model's arguments replayed for every action."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import TypeAdapter

from asyncmem import MemoryBackend, SQLBackend
from asyncmem.errors import InvalidInputError
from asyncmem.tool import (
    ACTIONS,
    ADMIN_ACTIONS,
    MEMORY_TOOL,
    answer_schema,
    anthropic_tool,
    langchain_tool,
    openai_agents_tool,
    openai_tool,
    pydantic_ai_tool,
    run_memory_tool,
    tool_parameters,
)

OPTIONS = [
    {"bound_user": bound_user, "admin": admin}
    for bound_user in (False, True)
    for admin in (False, True)
    if not (bound_user and admin)
]

REFUSED_IN_STRICT = {
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "format",
    "default",
    "oneOf",
    "allOf",
    "not",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
}


def walk(schema: Any) -> list[dict[str, Any]]:
    """Every sub-schema of ``schema``, itself included."""
    found = [schema]
    for sub in schema.get("properties", {}).values():
        found += walk(sub)
    if "items" in schema:
        found += walk(schema["items"])
    return found


@pytest.fixture
async def sqlite(tmp_path: Path) -> Any:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as opened:
        yield opened


@pytest.mark.parametrize("options", OPTIONS)
def test_strict_schema_follows_openai_strict_rules(options: dict[str, bool]) -> None:
    schema = tool_parameters(strict=True, **options)
    jsonschema.Draft202012Validator.check_schema(schema)
    for sub in walk(schema):
        assert not REFUSED_IN_STRICT & set(sub), sub
        if "properties" in sub:
            assert sub["additionalProperties"] is False
            assert sub["required"] == list(sub["properties"])
        types = sub["type"] if isinstance(sub["type"], list) else [sub["type"]]
        assert "object" not in types or "properties" in sub, "free-form object in strict"
    assert schema["type"] == "object"
    properties = schema["properties"]
    assert properties["action"]["type"] == "string", "action is required, never null"
    for name, sub in properties.items():
        if name != "action":
            assert "null" in sub["type"], name
    assert properties["metadata"]["type"] == ["string", "null"]
    assert properties["where"]["type"] == ["string", "null"]
    item = properties["items"]["items"]
    assert item["properties"]["key"]["type"] == "string"
    assert item["properties"]["ttl"]["type"] == ["number", "null"]
    assert ("user_id" in properties) is not options["bound_user"]
    offered = set(properties["action"]["enum"])
    assert bool(offered & ADMIN_ACTIONS) is options["admin"]
    assert offered | ADMIN_ACTIONS == set(ACTIONS)


@pytest.mark.parametrize("options", OPTIONS)
def test_agents_sdk_takes_the_strict_schema_unchanged(options: dict[str, bool]) -> None:
    """The SDK's own strict converter finds nothing to rewrite (it did rewrite MEMORY_TOOL)."""
    from agents.strict_schema import ensure_strict_json_schema

    schema = tool_parameters(strict=True, **options)
    assert ensure_strict_json_schema(copy.deepcopy(schema)) == schema
    plain = tool_parameters(**options)
    assert ensure_strict_json_schema(copy.deepcopy(plain)) != plain


def test_openai_chat_and_responses_shapes() -> None:
    from openai.types.chat import ChatCompletionFunctionToolParam
    from openai.types.responses import FunctionToolParam

    for strict in (True, False):
        chat = openai_tool(api="chat", strict=strict)
        assert TypeAdapter(ChatCompletionFunctionToolParam).validate_python(chat) == chat
        assert set(chat) == {"type", "function"}
        assert chat["function"]["strict"] is strict
        assert chat["function"]["parameters"] == tool_parameters(strict=strict)
        responses = openai_tool(api="responses", strict=strict)
        assert TypeAdapter(FunctionToolParam).validate_python(responses) == responses
        assert responses["strict"] is strict, "left out, the Responses API would be strict"
        assert responses["parameters"] == chat["function"]["parameters"]
    assert openai_tool() == openai_tool(api="chat", strict=True)
    assert tool_parameters(admin=True) == MEMORY_TOOL["parameters"]
    with pytest.raises(InvalidInputError):
        openai_tool(api="completions")  # type: ignore[call-overload]


def _mock_http(seen: list[dict[str, Any]], reply: dict[str, Any], module: Any = httpx) -> Any:
    """An HTTP client of ``module`` (httpx, or httpx2 for anthropic) that answers ``reply``."""

    def handle(request: Any) -> Any:
        assert request.url.host == "127.0.0.1"
        seen.append(json.loads(request.content))
        return module.Response(200, json=reply)

    return module.Client(transport=module.MockTransport(handle))


async def test_openai_clients_send_the_shapes_and_their_calls_run(sqlite: MemoryBackend) -> None:
    """The SDK serializes the tool as given; the call it parses back runs on the store."""
    import openai

    arguments = json.dumps(strict_arguments("store", bound_user=False))
    seen: list[dict[str, Any]] = []
    chat_reply = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "memory", "arguments": arguments},
                        }
                    ],
                },
            }
        ],
    }
    client = openai.OpenAI(
        api_key="test", base_url="http://127.0.0.1:9/v1", http_client=_mock_http(seen, chat_reply)
    )
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], tools=[openai_tool()]
    )
    assert seen[0]["tools"] == [openai_tool()]
    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.type == "function"
    answer = json.loads(await run_memory_tool(sqlite, call.function.arguments))
    assert answer["success"], answer

    responses_reply = {
        "id": "r1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": "completed",
        "output": [
            {
                "type": "function_call",
                "id": "f1",
                "call_id": "t2",
                "name": "memory",
                "arguments": json.dumps(strict_arguments("query", bound_user=False)),
                "status": "completed",
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    seen.clear()
    client = openai.OpenAI(
        api_key="test",
        base_url="http://127.0.0.1:9/v1",
        http_client=_mock_http(seen, responses_reply),
    )
    response = client.responses.create(model="m", input="hi", tools=[openai_tool(api="responses")])
    assert seen[0]["tools"] == [openai_tool(api="responses")]
    (item,) = response.output
    assert item.type == "function_call"
    answer = json.loads(await run_memory_tool(sqlite, item.arguments))
    assert answer["success"], answer
    assert [hit["key"] for hit in answer["results"]] == ["pet"]


async def test_anthropic_shape_and_a_tool_use_block_runs(sqlite: MemoryBackend) -> None:
    import anthropic
    import httpx2
    from anthropic.types import ToolParam

    for options in OPTIONS:
        tool = anthropic_tool(**options)
        assert TypeAdapter(ToolParam).validate_python(tool) == tool
        assert set(tool) == {"name", "description", "input_schema"}
        assert tool["input_schema"] == tool_parameters(**options)
    seen: list[dict[str, Any]] = []
    reply = {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
        "content": [
            {
                "type": "tool_use",
                "id": "t1",
                "name": "memory",
                "input": {"action": "store", "key": "pet", "value": "a grey cat"},
            }
        ],
    }
    client = anthropic.Anthropic(
        api_key="test", base_url="http://127.0.0.1:9", http_client=_mock_http(seen, reply, httpx2)
    )
    message = client.messages.create(
        model="m",
        max_tokens=10,
        messages=[{"role": "user", "content": "I have a cat"}],
        tools=[anthropic_tool(bound_user=True)],
    )
    assert seen[0]["tools"] == [anthropic_tool(bound_user=True)]
    (block,) = message.content
    assert block.type == "tool_use"
    answer = json.loads(await run_memory_tool(sqlite, block.input, user_id="alice"))
    assert answer["success"], answer
    assert await sqlite.list_keys("alice") == ["pet"]


async def test_openai_agents_function_tool(sqlite: MemoryBackend) -> None:
    from agents import FunctionTool
    from agents.models.chatcmpl_converter import Converter as ChatConverter
    from agents.models.openai_responses import Converter as ResponsesConverter
    from agents.tool_context import ToolContext

    tool = openai_agents_tool(sqlite, user_id="alice")
    assert isinstance(tool, FunctionTool)
    assert tool.strict_json_schema is True
    assert ChatConverter.tool_to_openai(tool) == openai_tool(bound_user=True)
    converted = ResponsesConverter.convert_tools([tool], [])
    assert converted.tools == [openai_tool(api="responses", bound_user=True)]
    loose = openai_agents_tool(sqlite, strict=False)
    assert ChatConverter.tool_to_openai(loose) == openai_tool(strict=False)

    for action in ("store", "query", "list"):
        arguments = json.dumps(strict_arguments(action, bound_user=True))
        context = ToolContext(
            context=None, tool_name="memory", tool_call_id="t", tool_arguments=arguments
        )
        answer = json.loads(await tool.on_invoke_tool(context, arguments))
        assert answer["success"], (action, answer)
    assert await sqlite.list_keys("alice") == ["pet"]
    with pytest.raises(InvalidInputError, match="bound to one user"):
        openai_agents_tool(sqlite, user_id="alice", admin=True)


async def test_langchain_structured_tool(sqlite: MemoryBackend) -> None:
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    tool = langchain_tool(sqlite, user_id="alice")
    assert isinstance(tool, BaseTool)
    converted = convert_to_openai_tool(tool)
    assert converted["function"]["name"] == "memory"
    assert converted["function"]["parameters"] == tool_parameters(bound_user=True)
    stored = json.loads(
        await tool.ainvoke({"action": "store", "key": "pet", "value": "a grey cat"})
    )
    assert stored["success"], stored
    found = json.loads(await tool.ainvoke({"action": "query", "text": "which cat?"}))
    assert [hit["key"] for hit in found["results"]] == ["pet"]
    refused = json.loads(await tool.ainvoke({"action": "list", "user_id": "bob"}))
    assert refused["success"] is False


async def test_pydantic_ai_tool_in_an_agent_run(sqlite: MemoryBackend) -> None:
    """A whole agent run on pydantic-ai's scripted model: it calls the tool, then answers."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    answers: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        (tool,) = info.function_tools
        assert tool.name == "memory"
        assert tool.parameters_json_schema == tool_parameters(bound_user=True)
        returned = [
            part.content
            for message in messages
            for part in message.parts
            if part.part_kind == "tool-return"
        ]
        if not returned:
            arguments = {"action": "store", "key": "pet", "value": "a grey cat"}
            return ModelResponse(parts=[ToolCallPart("memory", arguments)])
        answers.extend(str(content) for content in returned)
        return ModelResponse(parts=[TextPart("noted")])

    agent = Agent(FunctionModel(script), tools=[pydantic_ai_tool(sqlite, user_id="alice")])
    result = await agent.run("I have a grey cat")
    assert result.output == "noted"
    (answer,) = answers
    assert json.loads(answer)["success"]
    assert await sqlite.list_keys("alice") == ["pet"]


VALUES: dict[str, Any] = {
    "user_id": "alice",
    "key": "pet",
    "value": "Alice has a grey cat",
    "metadata": '{"source": "chat"}',
    "text": "which cat does she have?",
    "ttl": 3600,
    "where": '{"source": "chat"}',
    "limit": 5,
    "offset": 0,
    "items": [
        {"key": "pet", "value": "Alice has a grey cat", "metadata": None, "ttl": None},
        {"key": "job", "value": "a nurse", "metadata": '{"n": 2}', "ttl": 60},
    ],
    "keys": ["job"],
    "size": 20,
    "repetitions": 3,
}


def strict_arguments(action: str, *, bound_user: bool, admin: bool = False) -> dict[str, Any]:
    """What a model obeying the strict schema writes: every field, null where unused."""
    from asyncmem.tool import _ACTION_OPTIONAL

    schema = tool_parameters(strict=True, bound_user=bound_user, admin=admin)
    used = {*ACTIONS[action], *_ACTION_OPTIONAL.get(action, ())}
    arguments = {
        name: (action if name == "action" else VALUES[name] if name in used else None)
        for name in schema["properties"]
    }
    jsonschema.validate(arguments, schema)
    return arguments


@pytest.mark.parametrize("bound_user", [False, True])
async def test_strict_arguments_for_every_action_run(
    sqlite: MemoryBackend, bound_user: bool
) -> None:
    """Replay every action as a strict model writes it, in an order where each one works."""
    user = {"user_id": "alice"} if bound_user else {}
    admin = not bound_user
    order = ["info", "store", "retrieve", "query", "list", "history", "store_many"]
    order += ["delete_many", "delete", "forget", "purge", "evaluate"]
    assert set(order) == set(ACTIONS)
    for action in order:
        if bound_user and action in ADMIN_ACTIONS:
            # Not in a bound tool's schema; a model that sends one anyway is refused.
            answer = json.loads(await run_memory_tool(sqlite, {"action": action}, **user))
            assert answer["success"] is False
            assert "operator action" in answer["error"]
            jsonschema.validate(answer, answer_schema(action))
            continue
        arguments = strict_arguments(action, bound_user=bound_user, admin=admin)
        answer = json.loads(
            await run_memory_tool(sqlite, json.dumps(arguments), admin=admin, **user)
        )
        assert answer["success"], (action, answer)
        jsonschema.validate(answer, answer_schema(action))
        if action == "store":
            entry = await sqlite.retrieve("alice", "pet")
            assert entry is not None
            assert entry.metadata == {"source": "chat"}
            assert entry.expires_at is not None
        if action == "query":
            assert [hit["key"] for hit in answer["results"]] == ["pet"]
        if action == "store_many":
            job = await sqlite.retrieve("alice", "job")
            assert job is not None
            assert job.metadata == {"n": 2}
        if action == "delete_many":
            assert answer["deleted_count"] == 1
    assert await sqlite.list_keys("alice") == []


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"action": "store", "user_id": "a", "key": "k", "value": "v", "metadata": "{"}, "JSON"),
        ({"action": "store", "user_id": "a", "key": "k", "value": "v", "metadata": "[1]"}, "type"),
        ({"action": "list", "user_id": "a", "where": "not json"}, "'where' is not valid JSON"),
        (
            {"action": "store_many", "user_id": "a", "items": [{"key": "k", "metadata": None}]},
            "'value'",
        ),
    ],
)
async def test_bad_json_text_gets_a_message(
    sqlite: MemoryBackend, arguments: dict[str, Any], expected: str
) -> None:
    answer = json.loads(await run_memory_tool(sqlite, arguments))
    assert answer["success"] is False
    assert expected in answer["error"]
    assert await sqlite.list_keys("a") == []


async def test_empty_json_text_counts_as_left_out(sqlite: MemoryBackend) -> None:
    arguments = {"action": "store", "user_id": "a", "key": "k", "value": "v", "metadata": " "}
    assert json.loads(await run_memory_tool(sqlite, arguments))["success"]
    entry = await sqlite.retrieve("a", "k")
    assert entry is not None
    assert entry.metadata == {}
