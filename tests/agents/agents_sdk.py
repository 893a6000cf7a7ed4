"""The OpenAI Agents SDK with its chat-completions model, pointed at the gateway by base URL
only, runs a function-tool loop. Prints a JSON summary for tests/agents_sdk.rs.

Usage: agents_sdk.py BASE_URL MODEL
"""
import asyncio
import json
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

calls = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


async def main(base_url: str, model: str) -> None:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="sk-unused", max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        tools=[get_weather],
    )
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
    print(json.dumps({"final": result.final_output, "tool_calls": calls}))


asyncio.run(main(sys.argv[1], sys.argv[2]))
