"""Drive switchyard with the official OpenAI Python SDK, given only a base URL.

Usage: openai_client.py BASE_URL MODEL BROKEN_MODEL CONTINUED_MODEL
(BROKEN_MODEL: a stream that breaks mid-way with nowhere to continue; CONTINUED_MODEL: one that
breaks mid-way and is continued on a backup)
Prints one JSON object: the non-streamed and streamed answers and the gateway headers seen.
"""
import json
import sys

from openai import OpenAI

base_url, model, broken_model, continued_model = sys.argv[1:5]
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

continued = client.chat.completions.create(model=continued_model, messages=messages, stream=True)
continued_parts, continued_ids, continued_finish = [], set(), None
for chunk in continued:
    continued_ids.add(chunk.id)
    if chunk.choices:
        continued_parts.append(chunk.choices[0].delta.content or "")
        continued_finish = chunk.choices[0].finish_reason or continued_finish

print(json.dumps({
    "continued_text": "".join(continued_parts),
    "continued_ids": len(continued_ids),
    "continued_finish": continued_finish,
    "text": completion.choices[0].message.content,
    "model": completion.model,
    "target": raw.headers.get("x-switchyard-target"),
    "attempts": raw.headers.get("x-switchyard-attempts"),
    "stream_text": "".join(parts),
    "stream_finish": finish,
    "broken_stream_error": broken,
}))
