#!/usr/bin/env python3
"""Time to first chunk of a streamed chat completion, over one keep-alive connection.

Sends N sequential streamed requests to URL and, for each, measures from just before the request
is written until the first `data:` line arrives (time to first chunk), until the first chunk
with text content arrives (time to first token: an OpenAI stream opens with a role-only chunk)
and until the stream ends (time to last byte). Prints one JSON object with p50/p90/p99 of both, in milliseconds.

Usage: ttfb.py URL BODY_FILE N [WARMUP] [MAX_SECONDS]
Stops early after MAX_SECONDS (default 30) of measuring, so a slow path cannot stall a benchmark.
Only the standard library: it runs on a fresh machine.
"""

import http.client
import json
import socket
import sys
import time
import urllib.parse


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    k = (len(sorted_vals) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def has_content(line):
    """Whether an SSE `data:` line is a chunk carrying text (not the role-only first chunk):
    an OpenAI chunk with content, an Anthropic `text_delta`, a Responses API text delta."""
    try:
        chunk = json.loads(line[5:])
        if chunk.get("type") == "content_block_delta":
            return bool(chunk["delta"].get("text"))
        if chunk.get("type") == "response.output_text.delta":
            return bool(chunk.get("delta"))
        return bool(chunk["choices"][0]["delta"].get("content"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False


def main():
    url = urllib.parse.urlsplit(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        body = f.read()
    n = int(sys.argv[3])
    warmup = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    max_secs = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    # Extra request headers, `name: value` each (the Anthropic dialect's `anthropic-version`).
    for extra in sys.argv[6:]:
        name, _, value = extra.partition(":")
        headers[name.strip()] = value.strip()
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.connect()
    # The client side does not delay its own small writes.
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    first, token, total = [], [], []
    errors = 0
    started = None
    for i in range(warmup + n):
        if i == warmup:
            started = time.perf_counter()
        elif started is not None and time.perf_counter() - started > max_secs:
            break
        t0 = time.perf_counter()
        conn.request("POST", url.path, body=body, headers=headers)
        resp = conn.getresponse()
        t_first = t_token = None
        if resp.status == 200:
            while t_token is None:
                line = resp.readline()
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                if t_first is None:
                    t_first = time.perf_counter()
                if has_content(line):
                    t_token = time.perf_counter()
        resp.read()  # drain the rest so the connection can be reused
        t_end = time.perf_counter()
        if resp.status != 200 or t_first is None or t_token is None:
            errors += 1
            continue
        if i >= warmup:
            first.append((t_first - t0) * 1000.0)
            token.append((t_token - t0) * 1000.0)
            total.append((t_end - t0) * 1000.0)
    first.sort()
    token.sort()
    total.sort()
    print(
        json.dumps(
            {
                "n": len(first),
                "capped": len(first) < n,
                "errors": errors,
                "first_p50_ms": pct(first, 50),
                "first_p90_ms": pct(first, 90),
                "first_p99_ms": pct(first, 99),
                "token_p50_ms": pct(token, 50),
                "token_p99_ms": pct(token, 99),
                "total_p50_ms": pct(total, 50),
                "total_p99_ms": pct(total, 99),
            }
        )
    )


if __name__ == "__main__":
    main()
