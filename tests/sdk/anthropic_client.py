"""Drive switchyard's /v1/messages with the official Anthropic Python SDK, given only a base URL.

Usage: anthropic_client.py BASE_URL MODEL
Prints one JSON object: the non-streamed and streamed answers.
"""
import json
import sys

from anthropic import Anthropic

base_url, model = sys.argv[1], sys.argv[2]
client = Anthropic(base_url=base_url, api_key="sk-client-unused", max_retries=0)
messages = [{"role": "user", "content": "Say the canonical text."}]

raw = client.messages.with_raw_response.create(model=model, max_tokens=256, messages=messages)
message = raw.parse()

with client.messages.stream(model=model, max_tokens=256, messages=messages) as stream:
    streamed = "".join(stream.text_stream)
    final = stream.get_final_message()

print(json.dumps({
    "text": message.content[0].text,
    "stop_reason": message.stop_reason,
    "target": raw.headers.get("x-switchyard-target"),
    "stream_text": streamed,
    "stream_stop_reason": final.stop_reason,
    "stream_output_tokens": final.usage.output_tokens,
}))
