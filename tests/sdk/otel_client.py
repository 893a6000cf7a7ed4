"""An agent turn traced with the OpenTelemetry Python SDK around the OpenAI SDK: the turn's
span is the current span when the chat call is made, and its context goes to the gateway as
the W3C `traceparent` (the SDK's global propagator). Prints the span's ids and the answer."""

import json
import sys

import openai
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

base_url = sys.argv[1]
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("agent")
client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)

with tracer.start_as_current_span("agent.turn") as span:
    headers = {}
    propagate.inject(headers)
    answer = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "plan the next step"}],
        extra_headers=headers,
    )
context = span.get_span_context()
print(
    json.dumps(
        {
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
            "traceparent": headers.get("traceparent"),
            "text": answer.choices[0].message.content,
        }
    )
)
