#!/usr/bin/env python3
"""bench/agent_body.py: an agent's turn as a request body, for bench/instructions' BODY knob.

Usage: bench/agent_body.py DIALECT > turn.json   (DIALECT: openai, anthropic or responses)

What a coding agent sends each turn, in the shape of its dialect: a long system prompt (8 KB,
`instructions` for the Responses API), twelve earlier turns (a user message, a tool call and
its 1.5 KB result each), fifteen tools with JSON schemas; about 60 KB, escapes and all (line
breaks in the text, a call's arguments as a JSON string). The model is `bench`, as the
benchmark's route is named. The text is drawn from a fixed seed: the same bytes every run.
"""

import json
import random
import sys

WORDS = (
    "the of and to in is that for it with as was on be by this are from or an have not which "
    "you at his but they were her all she there would their we him been has when who will more "
    "no if out so said what up its about into than them can only other new some could time "
    "these two may then do first any my now such like our over man me even most made after "
    "also did many before must through back years where much your way well down should because "
    "each just those people take day good how long"
).split()


def text(rng, n):
    out, size = [], 0
    while size < n:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
        if rng.random() < 0.08:
            out[-1] += ".\n" if rng.random() < 0.3 else ","
    return " ".join(out)


def schema(rng):
    props = {
        f"param_{j}": {"type": rng.choice(["string", "integer", "boolean"]), "description": text(rng, 80)}
        for j in range(6)
    }
    props["options"] = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["fast", "slow", "auto"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        "additionalProperties": False,
    }
    return {"type": "object", "properties": props, "required": ["param_0", "param_1"], "additionalProperties": False}


def openai(rng):
    messages = [{"role": "system", "content": text(rng, 8000)}]
    for t in range(12):
        messages.append({"role": "user", "content": text(rng, 600)})
        call = f"call_{t:04d}abcdefgh"
        arguments = json.dumps({"param_0": text(rng, 60), "param_1": t, "options": {"mode": "auto", "limit": 10}})
        messages.append({
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call, "type": "function", "function": {"name": f"tool_{t % 15}", "arguments": arguments}}],
        })
        messages.append({"role": "tool", "tool_call_id": call, "content": text(rng, 1500)})
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": text(rng, 300), "parameters": schema(rng)}}
        for i in range(15)
    ]
    # The OpenAI SDKs put `messages` before `model`.
    return {"messages": messages, "model": "bench", "max_tokens": 32, "tools": tools}


def anthropic(rng):
    messages = []
    for t in range(12):
        messages.append({"role": "user", "content": [{"type": "text", "text": text(rng, 600)}]})
        call = f"toolu_{t:04d}abcdefgh"
        messages.append({
            "role": "assistant",
            "content": [
                {"type": "text", "text": text(rng, 100)},
                {"type": "tool_use", "id": call, "name": f"tool_{t % 15}",
                 "input": {"param_0": text(rng, 60), "param_1": t, "options": {"mode": "auto", "limit": 10}}},
            ],
        })
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": text(rng, 1500)}]})
    messages[0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    messages.append({"role": "user", "content": "next"})
    tools = [{"name": f"tool_{i}", "description": text(rng, 300), "input_schema": schema(rng)} for i in range(15)]
    system = [{"type": "text", "text": text(rng, 8000), "cache_control": {"type": "ephemeral"}}]
    return {"model": "bench", "max_tokens": 32, "system": system, "messages": messages, "tools": tools}


def responses(rng):
    items = []
    for t in range(12):
        items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text(rng, 600)}]})
        call = f"call_{t:04d}abcdefgh"
        arguments = json.dumps({"param_0": text(rng, 60), "param_1": t})
        items.append({"type": "function_call", "call_id": call, "name": f"tool_{t % 15}", "arguments": arguments})
        items.append({"type": "function_call_output", "call_id": call, "output": text(rng, 1500)})
    tools = [
        {"type": "function", "name": f"tool_{i}", "description": text(rng, 300), "strict": False, "parameters": schema(rng)}
        for i in range(15)
    ]
    return {
        "model": "bench", "instructions": text(rng, 8000), "input": items, "tools": tools,
        "tool_choice": "auto", "parallel_tool_calls": False, "store": False, "max_output_tokens": 32,
    }


def main():
    makers = {"openai": openai, "anthropic": anthropic, "responses": responses}
    if len(sys.argv) != 2 or sys.argv[1] not in makers:
        sys.exit("usage: bench/agent_body.py openai|anthropic|responses > turn.json")
    body = makers[sys.argv[1]](random.Random(7))
    sys.stdout.write(json.dumps(body, separators=(",", ":")))


if __name__ == "__main__":
    main()
