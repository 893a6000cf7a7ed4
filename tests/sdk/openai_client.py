"""Drive switchyard with the official OpenAI Python SDK, given only a base URL.

Usage: openai_client.py BASE_URL MODEL BROKEN_MODEL (a route whose stream breaks mid-way)
Prints one JSON object: the non-streamed and streamed answers and the gateway headers seen.
"""
import json
import sys

from openai import OpenAI

base_url, model, broken_model = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base_url, api_key="sk-client-unused", max_retries=0)
messages = [{"role": "user", "content": "Say the canonical text."}]

raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
completion = raw.parse()

stream = client.chat.completions.create(model=model, messages=messages, stream=True)
parts, finish = [], None
for chunk in stream:
    if chunk.choices:
        parts.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish

broken = None
try:
    cut = client.chat.completions.create(model=broken_model, messages=messages, stream=True)
    for _ in cut:
        pass
except Exception as e:  # the SDK must raise on the gateway's error event
    broken = type(e).__name__ + ": " + str(e)

print(json.dumps({
    "text": completion.choices[0].message.content,
    "model": completion.model,
    "target": raw.headers.get("x-switchyard-target"),
    "attempts": raw.headers.get("x-switchyard-attempts"),
    "stream_text": "".join(parts),
    "stream_finish": finish,
    "broken_stream_error": broken,
}))
