"""The official OpenAI Python SDK's Responses API against the gateway, by base URL only.
Prints one JSON object for tests/responses_sdk.rs.

Usage: openai_responses.py BASE_URL MODEL TOOL_MODEL CUT_MODEL (a route whose backup calls
tools, one whose primary cuts its streams after the first tokens)
"""
import json
import sys

import openai

base_url, model, tool_model, cut_model = sys.argv[1:5]
client = openai.OpenAI(base_url=base_url, api_key="sk-unused", max_retries=0)
out = {}

# Not streamed.
resp = client.responses.create(model=model, instructions="Be brief.", input="Count")
out["text"] = resp.output_text
out["id"] = resp.id
out["status"] = resp.status
out["usage"] = [resp.usage.input_tokens, resp.usage.output_tokens] if resp.usage else None

# Streamed: the typed events in order, and the final response.
kinds = []
deltas = []
with client.responses.stream(model=model, input="Count") as stream:
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    final = stream.get_final_response()
out["stream_text"] = "".join(deltas)
out["stream_final_text"] = final.output_text
out["stream_first"] = kinds[0] if kinds else None
out["stream_last"] = kinds[-1] if kinds else None
out["stream_id"] = final.id

# Streamed from a primary that breaks after its first tokens: continued elsewhere, seamlessly.
deltas = []
with client.responses.stream(model=cut_model, input="Count") as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    final = stream.get_final_response()
out["continued_text"] = "".join(deltas)
out["continued_final_text"] = final.output_text

# A function-tool loop: the call, its output sent back on the stored turn.
tools = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
first = client.responses.create(model=tool_model, input="Weather in Paris?", tools=tools)
calls = [item for item in first.output if item.type == "function_call"]
out["tool_calls"] = [(c.name, json.loads(c.arguments or "{}")) for c in calls]
if calls:
    second = client.responses.create(
        model=tool_model,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}],
        tools=tools,
    )
    out["after_tool"] = second.output_text

# JSON schema output (the mock answers its usual text; the test checks what reached it).
schema = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
structured = client.responses.create(
    model=model,
    input="Answer in JSON",
    text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
)
out["structured_status"] = structured.status

# The stored response reads back.
again = client.responses.retrieve(resp.id)
out["retrieved_text"] = again.output_text
items = client.responses.input_items.list(resp.id)
out["input_items"] = len(items.data)
client.responses.delete(resp.id)
try:
    client.responses.retrieve(resp.id)
    out["after_delete"] = "found"
except openai.NotFoundError:
    out["after_delete"] = "not found"

print(json.dumps(out))
