"""The OpenAI Agents SDK, pointed at the gateway by base URL only, runs a function-tool loop
with its chat-completions model (API `chat`) or its default model, which speaks the Responses
API (API `responses`). Prints a JSON summary for tests/agents_sdk.rs.

Usage: agents_sdk.py BASE_URL MODEL [chat|responses]
"""
import asyncio
import json
import sys

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


async def main(base_url: str, model: str, api: str) -> None:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="sk-unused", max_retries=0)
    if api == "chat":
        chosen = OpenAIChatCompletionsModel(model=model, openai_client=client)
    else:
        # The SDK's default: a model name, served by its Responses API model.
        set_default_openai_client(client, use_for_tracing=False)
        chosen = model
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=chosen,
        tools=[get_weather],
    )
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
    print(json.dumps({"final": result.final_output, "tool_calls": calls}))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "chat"))
