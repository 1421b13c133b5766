"""The helpers' return values at each SDK's call site: checked by ``mypy --strict``, never run.

tests/test_sdk_types.py type-checks this file; a helper whose return type stops matching the
SDK's own parameter types fails there.
"""

from __future__ import annotations

from typing import TypedDict

import anthropic
import openai
from agents import Agent
from anthropic.types import ToolParam
from langchain_core.tools import BaseTool
from langgraph.graph import StateGraph
from langgraph.store.base import BaseStore
from openai.types.chat import ChatCompletionToolUnionParam
from openai.types.responses import ToolParam as ResponsesToolParam
from pydantic_ai import Agent as PydanticAgent

from asyncmem import MemoryBackend
from asyncmem.langgraph import AsyncmemStore
from asyncmem.tool import (
    anthropic_tool,
    langchain_tool,
    openai_agents_tool,
    openai_tool,
    pydantic_ai_tool,
)


def chat_completions(client: openai.OpenAI) -> None:
    client.chat.completions.create(
        model="gpt-5",
        messages=[{"role": "user", "content": "hi"}],
        tools=[openai_tool(), openai_tool(strict=False, bound_user=True)],
    )
    tools: list[ChatCompletionToolUnionParam] = [openai_tool(api="chat", admin=True)]
    del tools


async def responses(client: openai.AsyncOpenAI) -> None:
    await client.responses.create(
        model="gpt-5",
        input="hi",
        tools=[openai_tool(api="responses"), openai_tool(api="responses", strict=False)],
    )
    tools: list[ResponsesToolParam] = [openai_tool(api="responses", bound_user=True)]
    del tools


def messages(client: anthropic.Anthropic) -> None:
    client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        tools=[anthropic_tool(), anthropic_tool(bound_user=True)],
    )
    tools: list[ToolParam] = [anthropic_tool(admin=True)]
    del tools


def agents_sdk(memory: MemoryBackend) -> Agent[None]:
    return Agent(name="assistant", tools=[openai_agents_tool(memory, user_id="alice")])


def langchain(memory: MemoryBackend) -> list[BaseTool]:
    return [langchain_tool(memory, user_id="alice")]


def pydantic_ai(memory: MemoryBackend) -> PydanticAgent[None, str]:
    return PydanticAgent("test", tools=[pydantic_ai_tool(memory, user_id="alice")])


class State(TypedDict):
    question: str


def langgraph(memory: MemoryBackend, builder: StateGraph[State]) -> BaseStore:
    store = AsyncmemStore(memory, ttl={"default_ttl": 60.0, "refresh_on_read": True})
    builder.compile(store=store)
    return store
