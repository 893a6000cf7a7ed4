#!/usr/bin/env python3
"""Keeps CONCURRENCY streamed chat completions open against URL for SECONDS, each on a
connection of its own (a new TCP connection per stream: connection churn too), and prints one
JSON object: streams completed, failed, and bytes read. Only the standard library.

Usage: soak_client.py URL CONCURRENCY SECONDS
"""

import asyncio
import json
import sys
import time
import urllib.parse

BODY = json.dumps(
    {
        "model": "bench",
        "stream": True,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": 512,
    }
).encode()


async def one_stream(host, port, path, stats):
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
    ).encode() + BODY
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request)
        await writer.drain()
        data = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            data += chunk
        writer.close()
        stats["bytes"] += len(data)
        if data.startswith(b"HTTP/1.1 200") and b"[DONE]" in data:
            stats["completed"] += 1
        else:
            stats["failed"] += 1
    except OSError:
        stats["failed"] += 1


async def worker(host, port, path, deadline, stats):
    while time.monotonic() < deadline:
        await one_stream(host, port, path, stats)


async def main(url, concurrency, seconds):
    u = urllib.parse.urlparse(url)
    deadline = time.monotonic() + seconds
    stats = {"completed": 0, "failed": 0, "bytes": 0}
    await asyncio.gather(
        *(worker(u.hostname, u.port, u.path, deadline, stats) for _ in range(concurrency))
    )
    print(json.dumps(stats))


asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
