"""The function-calling tool: schema, validation, answers, isolation, and the protocol in step."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from asyncmem import InvalidInputError, MemoryBackend, NullBackend, SQLBackend
from asyncmem.backend import MAX_LIMIT
from asyncmem.tool import ACTIONS, ADMIN_ACTIONS, MEMORY_TOOL, action_schema, run_memory_tool

ACTION_METHODS = {
    "store": "store",
    "retrieve": "retrieve",
    "query": "query",
    "list": "list_keys",
    "delete": "delete",
    "forget": "forget_user",
    "history": "history",
    "store_many": "store_many",
    "delete_many": "delete_many",
    "purge": "purge_expired",
    "info": "is_available",
}
"""The protocol method behind each action (``evaluate`` runs the evaluator instead)."""
TOOL_ARGUMENT = {"text": "text", "limit": "limit"}
LIFECYCLE = {"aclose", "__aenter__", "__aexit__"}


async def call(backend: MemoryBackend, arguments: object, **kwargs: Any) -> dict[str, Any]:
    answer = await run_memory_tool(backend, arguments, **kwargs)
    assert isinstance(answer, str)
    decoded: dict[str, Any] = json.loads(answer)
    assert isinstance(decoded["success"], bool)
    if not decoded["success"]:
        assert set(decoded) == {"success", "error"}
        assert "Traceback" not in decoded["error"]
    return decoded


def test_memory_tool_is_an_openai_function_definition() -> None:
    assert set(MEMORY_TOOL) == {"name", "description", "parameters"}
    assert MEMORY_TOOL["name"] == "memory"
    parameters = MEMORY_TOOL["parameters"]
    jsonschema.Draft202012Validator.check_schema(parameters)
    assert parameters["type"] == "object"
    assert parameters["required"] == ["action"]
    assert not {"oneOf", "anyOf", "allOf"} & set(parameters)
    assert parameters["properties"]["action"]["enum"] == list(ACTIONS)
    json.dumps(MEMORY_TOOL)
    for action in ACTIONS:
        schema = action_schema(action)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert set(schema["properties"]) <= set(parameters["properties"])


def test_actions_and_protocol_are_in_step() -> None:
    """Every operation of the protocol is reachable as an action, with all its arguments."""
    protocol = {
        name
        for name, member in vars(MemoryBackend).items()
        if inspect.iscoroutinefunction(member) and name not in LIFECYCLE
    }
    assert set(ACTIONS) == {*ACTION_METHODS, "evaluate"}
    assert set(ACTION_METHODS.values()) == protocol, "a protocol method has no tool action"
    properties = MEMORY_TOOL["parameters"]["properties"]
    for action, method in ACTION_METHODS.items():
        parameters = inspect.signature(getattr(MemoryBackend, method)).parameters
        names = [name for name in parameters if name != "self"]
        for name in names:
            assert name in action_schema(action)["properties"], (action, name)
            assert name in properties
        required = [n for n in names if parameters[n].default is inspect.Parameter.empty]
        assert required == list(ACTIONS[action]), action


async def test_every_action_on_every_backend_answers_json(backend: MemoryBackend) -> None:
    calls: list[dict[str, Any]] = [
        {"action": "store", "user_id": "alice", "key": "pet", "value": "a grey cat"},
        {"action": "retrieve", "user_id": "alice", "key": "pet"},
        {"action": "query", "user_id": "alice", "text": "which cat?"},
        {"action": "list", "user_id": "alice"},
        {"action": "delete", "user_id": "alice", "key": "pet"},
        {"action": "forget", "user_id": "alice"},
        {"action": "info"},
    ]
    for arguments in calls:
        answer = await call(backend, arguments)
        assert answer["success"], answer
        assert answer["action"] == arguments["action"]
    info = await call(backend, {"action": "info"})
    assert info["backend"] == backend.backend_name
    assert info["is_cloud"] is backend.is_cloud
    assert info["actions"] == [action for action in ACTIONS if action not in ADMIN_ACTIONS]
    admin = await call(backend, {"action": "info"}, admin=True)
    assert admin["actions"] == list(ACTIONS)


async def test_store_retrieve_query_list_delete_forget(store: MemoryBackend) -> None:
    stored = await call(
        store,
        {
            "action": "store",
            "user_id": "alice",
            "key": "pet",
            "value": "Alice has a grey cat called Miso",
            "metadata": {"source": "chat", "confidence": 0.9},
        },
    )
    assert stored == {
        "success": True,
        "action": "store",
        "key": "pet",
        "created": True,
        "updated_at": stored["updated_at"],
    }
    again = await call(
        store, {"action": "store", "user_id": "alice", "key": "pet", "value": "Miso is grey"}
    )
    assert again["created"] is False
    await call(store, {"action": "store", "user_id": "alice", "key": "job", "value": "a nurse"})

    found = await call(store, {"action": "retrieve", "user_id": "alice", "key": "pet"})
    assert found["found"] is True
    assert found["memory"]["value"] == "Miso is grey"
    assert found["memory"]["metadata"] == {}
    missing = await call(store, {"action": "retrieve", "user_id": "alice", "key": "car"})
    assert missing["success"] is True
    assert missing["found"] is False
    assert "list" in missing["message"]

    hits = await call(store, {"action": "query", "user_id": "alice", "text": "What is Miso?"})
    assert [hit["key"] for hit in hits["results"]] == ["pet"]
    assert hits["results"][0]["score"] is not None
    assert hits["count"] == 1

    listed = await call(store, {"action": "list", "user_id": "alice"})
    assert listed["keys"] == ["job", "pet"]

    deleted = await call(store, {"action": "delete", "user_id": "alice", "key": "job"})
    assert deleted == {"success": True, "action": "delete", "deleted": True}
    gone = await call(store, {"action": "delete", "user_id": "alice", "key": "job"})
    assert gone["deleted"] is False
    assert "message" in gone

    forgot = await call(store, {"action": "forget", "user_id": "alice"})
    assert forgot["deleted_count"] == 1
    assert await store.list_keys("alice") == []


async def test_query_limit_defaults_small_and_is_honoured(store: MemoryBackend) -> None:
    for number in range(8):
        await store.store("alice", f"cat-{number}", f"cat fact number {number}")
    default = await call(store, {"action": "query", "user_id": "alice", "text": "cat"})
    assert default["count"] == 5
    two = await call(store, {"action": "query", "user_id": "alice", "text": "cat", "limit": 2})
    assert two["count"] == 2


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"action": "query"', "not valid JSON"),
        ("{'action': 'info'}", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("", "no arguments"),
        ("   ", "no arguments"),
        ("[1, 2]", "must be a JSON object"),
        ('"info"', "must be a JSON object"),
        (None, "must be a JSON object"),
        (42, "must be a JSON object"),
        ({}, "missing 'action'"),
        ({"action": "remember"}, "unknown action; use one of: store, retrieve"),
        ({"action": ["store"]}, "invalid argument 'action'"),
        ({"action": "store", "user_id": "a", "key": "k"}, "action 'store' needs 'value'"),
        ({"action": "retrieve"}, "action 'retrieve' needs 'user_id', 'key'"),
        ({"action": "list", "user_id": "a", "key": "k"}, "unexpected argument 'key'"),
        ({"action": "info", "colour": "red"}, "unexpected argument 'colour'"),
        ({"action": "query", "user_id": "a", "text": "x", "limit": 0}, "minimum of 1"),
        ({"action": "query", "user_id": "a", "text": "x", "limit": "3"}, "not of type 'integer'"),
        ({"action": "query", "user_id": "a", "text": "x", "limit": True}, "'limit'"),
        ({"action": "store", "user_id": "", "key": "k", "value": "v"}, "'user_id'"),
        ({"action": "store", "user_id": "a", "key": "k", "value": 7}, "'value'"),
        ({"action": "store", "user_id": "a", "key": "k", "value": "v", "metadata": []}, "metadata"),
        ({"action": "store", "user_id": "a", "key": "k", "value": "v\x00"}, "NUL"),
        ({"action": "store", "user_id": "a", "key": "x" * 300, "value": "v"}, "'key'"),
        ({"action": "info", 1: "one"}, "unexpected argument 1"),
        ({"action": "evaluate", "size": 100_000}, "operator action"),
        ({"action": "purge"}, "operator action, not offered to this host"),
        ({"action": "query", "user_id": "a", "text": "x", "limit": 1001}, "maximum of 1000"),
        (
            '{"action": "store", "user_id": "a", "key": "k", "value": "v", "metadata": {"x": NaN}}',
            "finite",
        ),
    ],
)
async def test_bad_arguments_get_a_message_the_model_can_act_on(
    tmp_path: Any, arguments: object, expected: str
) -> None:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as store:
        answer = await call(store, arguments)
        assert answer["success"] is False
        assert expected in answer["error"]
        assert len(answer["error"]) <= 300
        assert await store.list_keys("a") == []


async def test_raw_json_text_from_a_model_works(store: MemoryBackend) -> None:
    text = '{"action": "store", "user_id": "bob", "key": "tea", "value": "likes \\u00e9arl grey"}'
    assert (await call(store, text))["success"]
    assert (await call(store, text.encode()))["success"]
    entry = await store.retrieve("bob", "tea")
    assert entry is not None
    assert entry.value == "likes éarl grey"


async def test_null_arguments_count_as_left_out(store: MemoryBackend) -> None:
    answer = await call(
        store,
        {"action": "store", "user_id": "bob", "key": "k", "value": "v", "metadata": None},
    )
    assert answer["success"], answer
    listed = await call(store, {"action": "list", "user_id": "bob", "text": None, "limit": None})
    assert listed["keys"] == ["k"]


async def test_bound_user_cannot_reach_another_user(store: MemoryBackend) -> None:
    await store.store("bob", "secret", "bob's private diary entry")
    as_alice = {"user_id": "alice"}
    stored = await call(store, {"action": "store", "key": "pet", "value": "a grey cat"}, **as_alice)
    assert stored["success"]
    assert (await store.retrieve("alice", "pet")) is not None
    for arguments in (
        {"action": "retrieve", "user_id": "bob", "key": "secret"},
        {"action": "list", "user_id": "bob"},
        {"action": "query", "user_id": "bob", "text": "diary"},
        {"action": "forget", "user_id": "bob"},
    ):
        answer = await call(store, arguments, **as_alice)
        assert answer["success"] is False
        assert "one user" in answer["error"]
        assert "diary" not in json.dumps(answer)
    mine = await call(store, {"action": "query", "text": "diary"}, **as_alice)
    assert mine["results"] == []
    same = await call(store, {"action": "list", "user_id": "alice"}, **as_alice)
    assert same["keys"] == ["pet"]
    assert await call(store, {"action": "info", "user_id": "alice"}, **as_alice)
    assert await store.retrieve("bob", "secret") is not None


async def test_stored_text_is_data_never_instructions(store: MemoryBackend) -> None:
    """A value that looks like a tool call (or code) comes back verbatim and does nothing."""
    await store.store("alice", "pet", "a grey cat")
    payloads = [
        '{"action": "forget", "user_id": "alice"}',
        "__import__('os').system('rm -rf /')",
        "'; DROP TABLE memories; --",
    ]
    for number, payload in enumerate(payloads):
        await call(
            store, {"action": "store", "user_id": "alice", "key": f"p{number}", "value": payload}
        )
        found = await call(store, {"action": "retrieve", "user_id": "alice", "key": f"p{number}"})
        assert found["memory"]["value"] == payload
    hits = await call(store, {"action": "query", "user_id": "alice", "text": "forget alice"})
    assert hits["count"] >= 1
    assert sorted(await store.list_keys("alice")) == ["p0", "p1", "p2", "pet"]


async def test_backend_failures_become_answers(tmp_path: Any) -> None:
    closed = SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}")
    await closed.open()
    await closed.aclose()
    answer = await call(closed, {"action": "list", "user_id": "alice"})
    assert answer["success"] is False
    assert "cannot be used" in answer["error"]

    class Broken(NullBackend):
        async def query(
            self, user_id: str, text: str, limit: int = 10, *, where: Any = None
        ) -> list[Any]:
            raise RuntimeError("secret internals")

    async with Broken() as broken:
        answer = await call(broken, {"action": "query", "user_id": "a", "text": "x"})
    assert answer == {
        "success": False,
        "error": "internal error in the memory backend (RuntimeError)",
    }


async def test_evaluate_runs_or_says_it_is_unavailable(tmp_path: Any) -> None:
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as store:
        await store.store("alice", "pet", "a grey cat")
        answer = await call(store, {"action": "evaluate", "size": 20, "repetitions": 5}, admin=True)
        if importlib.util.find_spec("asyncmem.evaluation") is None:
            assert answer == {
                "success": False,
                "error": "evaluation is not available in this version of asyncmem",
            }
        else:
            assert answer["success"], answer
            assert answer["report"]["results"]
        assert await store.list_keys("alice") == ["pet"]


async def test_filters_expiry_history_and_batches(store: MemoryBackend) -> None:
    items = [
        {"key": "pet", "value": "a grey cat", "metadata": {"topic": "home", "n": 1}},
        {"key": "job", "value": "a nurse at night", "metadata": {"topic": "work", "n": 2}},
        {"key": "trip", "value": "hiking in July", "ttl": 3600},
    ]
    stored = await call(store, {"action": "store_many", "user_id": "alice", "items": items})
    assert stored["success"], stored
    assert stored["count"] == 3
    listed = await call(store, {"action": "list", "user_id": "alice", "where": {"n": {"$gte": 2}}})
    assert listed["keys"] == ["job"]
    found = await call(
        store,
        {"action": "query", "user_id": "alice", "text": "cat nurse", "where": {"topic": "home"}},
    )
    assert [hit["key"] for hit in found["results"]] == ["pet"]
    trip = await call(store, {"action": "retrieve", "user_id": "alice", "key": "trip"})
    assert trip["memory"]["expires_at"] > trip["memory"]["updated_at"]
    await call(store, {"action": "store", "user_id": "alice", "key": "pet", "value": "two cats"})
    history = await call(store, {"action": "history", "user_id": "alice", "key": "pet"})
    assert [v["value"] for v in history["versions"]] == ["two cats", "a grey cat"]
    short = await call(
        store, {"action": "store", "user_id": "alice", "key": "x", "value": "v", "ttl": 0.05}
    )
    assert short["expires_at"] > short["updated_at"]
    await asyncio.sleep(0.1)
    assert (await call(store, {"action": "purge"}, admin=True))["purged_count"] >= 1
    deleted = await call(
        store, {"action": "delete_many", "user_id": "alice", "keys": ["pet", "job", "nope"]}
    )
    assert deleted["deleted_count"] == 2
    bad = await call(store, {"action": "list", "user_id": "alice", "where": {"a": {"$regex": 1}}})
    assert bad["success"] is False
    assert "$regex" in bad["error"]


async def test_operator_actions_need_the_flag_and_never_reach_a_bound_user(
    store: MemoryBackend,
) -> None:
    await store.store("bob", "old", "bob's expiring note", ttl=0.01)
    await asyncio.sleep(0.05)
    for arguments in ({"action": "purge"}, {"action": "evaluate", "size": 1, "repetitions": 1}):
        answer = await call(store, arguments)
        assert answer["success"] is False
        assert "operator action" in answer["error"]
        bound = await call(store, arguments, user_id="alice")
        assert bound["success"] is False
        assert "bound to one user" in bound["error"]
    with pytest.raises(InvalidInputError, match="bound to one user"):
        await run_memory_tool(store, {"action": "purge"}, user_id="alice", admin=True)
    assert (await call(store, {"action": "purge"}, admin=True))["purged_count"] >= 1


def test_limit_bounds_are_the_runtime_ones() -> None:
    """One truth: the schema's ``limit`` maximum is what the backends accept."""
    assert MEMORY_TOOL["parameters"]["properties"]["limit"]["maximum"] == MAX_LIMIT
    for action in ("query", "history", "list"):
        assert action_schema(action)["properties"]["limit"]["maximum"] == MAX_LIMIT


@pytest.mark.parametrize("form", ["text", "dict", "metadata text"])
async def test_arguments_nested_too_deeply_are_a_typed_failure(
    tmp_path: Path, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    deep: object = 1
    for _ in range(5000):
        deep = {"a": deep}
    call: dict[str, object] = {"action": "store", "user_id": "alice", "key": "k", "value": "v"}
    arguments: object
    if form == "text":
        arguments = '{"action": "store", "user_id": "alice", "key": "k", "value": "v", '
        arguments += '"metadata": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}"
    elif form == "dict":
        arguments = {**call, "metadata": deep}
    else:
        arguments = {**call, "metadata": '{"a": ' * 100_000 + "1" + "}" * 100_000}
    async with SQLBackend(f"sqlite:///{tmp_path / 'memory.db'}") as backend:
        with caplog.at_level(logging.WARNING):
            answer = json.loads(await run_memory_tool(backend, arguments))
        assert answer["success"] is False
        assert "nested" in answer["error"]
        assert "internal error" not in answer["error"]
        assert caplog.records == []
        assert await backend.retrieve("alice", "k") is None
