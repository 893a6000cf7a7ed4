#!/usr/bin/env python3
"""N requests, each on a new connection: connect, send the request in one write, read the
answer (whole or streamed), close. Keep-alive is not refused (no `connection: close`), so the
proxy serves the request as it serves any first request of a connection.

    fresh.py PORT PATH BODY_FILE N [-H 'name: value']...

Exits non-zero when an answer is not 200. Only the standard library.
"""

import http.client
import socket
import sys


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    port, path, body_file, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    fields = [v for k, v in zip(sys.argv[5::2], sys.argv[6::2]) if k == "-H"]
    with open(body_file, "rb") as f:
        body = f.read()
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
    head += "".join(f"{field}\r\n" for field in fields)
    request = (head + f"content-length: {len(body)}\r\n\r\n").encode() + body
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        resp.read()
        sock.close()
        if resp.status != 200:
            sys.exit(f"answered {resp.status}")


if __name__ == "__main__":
    main()
