"""A thinking tool loop through switchyard's /v1/messages with the official Anthropic Python SDK.

Usage: anthropic_thinking.py BASE_URL MODEL
Turn 1 (thinking on, one tool) gets a thinking block and a tool call; turn 2 sends the
assistant's content back as the SDK gives it (the signed thinking block included) with the
tool's result. Done whole, then streamed. Prints one JSON object: per run, the thinking block
of turn 1 and the text of turn 2.
"""
import json
import sys

from anthropic import Anthropic

base_url, model = sys.argv[1], sys.argv[2]
client = Anthropic(base_url=base_url, api_key="sk-client-unused", max_retries=0)
thinking = {"type": "enabled", "budget_tokens": 1024}
tools = [{
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}]
question = [{"role": "user", "content": "What is the weather in Paris?"}]


def create(messages, stream):
    args = dict(model=model, max_tokens=2048, thinking=thinking, tools=tools, messages=messages)
    if not stream:
        return client.messages.create(**args)
    with client.messages.stream(**args) as events:
        return events.get_final_message()


def loop(stream):
    first = create(question, stream)
    block = next(b for b in first.content if b.type == "thinking")
    call = next(b for b in first.content if b.type == "tool_use")
    second = create(question + [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"},
        ]},
    ], stream)
    return {
        "thinking": {"thinking": block.thinking, "signature": block.signature},
        "stop_reason": first.stop_reason,
        "answer": "".join(b.text for b in second.content if b.type == "text"),
        "answer_stop_reason": second.stop_reason,
    }


print(json.dumps({"whole": loop(False), "streamed": loop(True)}))
