#!/usr/bin/env python3
"""Where one request's time goes, hop by hop: client, proxy (the gateway or nginx), mock.

    hops.py client PORT BODY_FILE N [CONNS [GAP_MS]]
        N requests of BODY_FILE, one after the other (the body read whole, stream or not),
        GAP_MS apart (2), on CONNS kept-alive connections (1) taken in turn: with many, each
        connection has been idle CONNS requests long when its turn comes, as an agent's
        connection is. The sequence the trace is read for.
    hops.py parse TRACE PROXY_COMM [SKIP]
        reads `perf script -F comm,pid,tid,time,event,trace` of the raw_syscalls tracepoints,
        recorded system-wide while `client` ran, and prints the median of each hop (µs) and
        the 90th percentile of the whole chain, the first SKIP requests' chains left out (0;
        with many connections, the first request of each, which the proxy accepts).

A request's chain, from the system calls that carry it: the client's send; the proxy's receive
of it and its send upstream (the request leg); the mock's receive and answer; the proxy's
receive of the answer and its first send to the client (the answer leg); the client's receive
of it. A hop between two processes is the wake-up of the second, which a system-wide trace of
system calls, unlike strace, times without stopping anyone. The proxy is told by its thread
names (nginx, switchyard-N), the mock by tokio's (tokio-rt-worker), the client by python's.
Only the standard library: it runs on a fresh machine.
"""

import http.client
import re
import socket
import statistics
import sys
import time

# x86-64 system call numbers: what reads a socket and what writes one.
RECV = {0, 19, 45, 47}  # read, readv, recvfrom, recvmsg
SEND = {1, 20, 44, 46}  # write, writev, sendto, sendmsg
LINE = re.compile(
    r"^\s*(\S+)\s+(\d+)/(\d+)\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit): NR (\d+)(?: = (-?\d+))?"
)
STEPS = [
    ("client", "send"),
    ("proxy", "recv"),
    ("proxy", "send"),
    ("mock", "recv"),
    ("mock", "send"),
    ("proxy", "recv"),
    ("proxy", "send"),
    ("client", "recv"),
]
HOPS = [
    "client send -> proxy receives (its wake-up)",
    "proxy: request read -> sent upstream",
    "proxy sent -> mock receives",
    "mock: request read -> answer sent",
    "mock sent -> proxy receives",
    "proxy: answer read -> first write to client",
    "proxy wrote -> client receives",
    "client send -> its first receive (all the hops)",
]
TAIL = "client send -> its first receive, p90"


def client(port, body_file, n, conns=1, gap_ms=2.0):
    with open(body_file, "rb") as f:
        body = f.read()
    fields = {"content-type": "application/json"}
    pool = []
    for _ in range(conns):
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pool.append(conn)
    for i in range(n):
        conn = pool[i % conns]
        conn.request("POST", "/v1/chat/completions", body=body, headers=fields)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            sys.exit(f"answered {resp.status}")
        time.sleep(gap_ms / 1000)


def events(path, proxy_comm):
    """(time, who, send|recv) of the chain's processes, in the trace's order."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            comm, _pid, _tid, t, kind, nr, ret = m.groups()
            if comm.startswith("python"):
                who = "client"
            elif comm.startswith(proxy_comm):
                who = "proxy"
            elif comm.startswith("tokio-rt"):
                who = "mock"
            else:
                continue
            nr = int(nr)
            if kind == "enter" and nr in SEND:
                out.append((float(t), who, "send"))
            elif kind == "exit" and nr in RECV and ret is not None and int(ret) > 0:
                out.append((float(t), who, "recv"))
    return out


def chains(evs):
    """Each request's hop times (µs): the chain's steps found in order from a client send."""
    found = []
    i = 0
    while i < len(evs):
        if evs[i][1:] != STEPS[0]:
            i += 1
            continue
        times = [evs[i][0]]
        j = i + 1
        while j < len(evs) and len(times) < len(STEPS):
            if evs[j][1:] == STEPS[len(times)]:
                times.append(evs[j][0])
            j += 1
        if len(times) == len(STEPS):
            hops = [(b - a) * 1e6 for a, b in zip(times, times[1:])]
            found.append(hops + [(times[-1] - times[0]) * 1e6])
        i = j
    return found


def parse(path, proxy_comm, skip=0):
    found = chains(events(path, proxy_comm))[skip:]
    if not found:
        sys.exit("no request's chain found in the trace")
    print(f"chains {len(found)}")
    for k, name in enumerate(HOPS):
        print(f"{name}\t{statistics.median(c[k] for c in found):.1f}")
    # The tail of the whole chain: the fixed-rate goals' p99 is of this, over many connections.
    print(f"{TAIL}\t{statistics.quantiles((c[-1] for c in found), n=10)[-1]:.1f}")


def main():
    if 5 <= len(sys.argv) <= 7 and sys.argv[1] == "client":
        extra = [int(sys.argv[5])] if len(sys.argv) > 5 else []
        extra += [float(sys.argv[6])] if len(sys.argv) > 6 else []
        client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), *extra)
    elif 4 <= len(sys.argv) <= 5 and sys.argv[1] == "parse":
        parse(sys.argv[2], sys.argv[3], *[int(a) for a in sys.argv[4:]])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
