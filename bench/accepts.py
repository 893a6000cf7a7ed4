#!/usr/bin/env python3
"""What a new connection costs a proxy, from a system-wide trace of a fixed-rate run.

    accepts.py TRACE CLIENT_PID PROXY_PIDS MOCK_PID

TRACE is `perf script -F comm,pid,tid,cpu,time,event,trace` of the raw_syscalls and
sched_switch tracepoints, recorded while `oha -c CONNS -q RATE` ran against the proxy; oha
opens its connections as the run goes, each at its first request. PROXY_PIDS is
comma-separated (nginx's workers). Prints, as `name<TAB>value` lines (medians, µs):

- accept_wake_to_sleep: from the proxy thread's `epoll_wait` return before an `accept4` that
  took a connection to that thread's next switch away (the accept's work on the core where
  the client waits to send: the listener's wake-up lands there);
- accept_syscalls: the system calls that thread made after that `accept4`, before it slept;
- connect_to_send, connect_to_answer: from the client's `connect` to its request's send,
  and to the first bytes of the answer it receives;
- new_connections: how many were found.

Only the standard library: it runs on a fresh machine.
"""

import re
import statistics
import sys

from hops import RECV as RECV_NR, SEND as SEND_NR

LINE = re.compile(r"^\s*(\S+)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
CALL = re.compile(r"NR (\d+)(?: \(([0-9a-f]+), ([0-9a-f]+), ([0-9a-f]+))?(?: = (-?\d+))?")
# What reads and writes a socket (bench/hops.py's numbers), as the trace writes them.
RECV = {str(nr) for nr in RECV_NR}
SEND = {str(nr) for nr in SEND_NR}
CONNECT, ACCEPT4, EPOLL_WAIT = "42", "288", "232"


def read(path):
    """Each traced event: (time, pid, tid, name, rest)."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                _comm, pid, tid, _cpu, t, name, rest = m.groups()
                out.append((float(t), int(pid), int(tid), name, rest))
    return out


def accepts(evs, proxy):
    """(wake-to-sleep µs, system calls after it) of each accept4 that took a connection."""
    found = []
    for i, (t, pid, tid, name, rest) in enumerate(evs):
        if pid not in proxy or name != "raw_syscalls:sys_exit":
            continue
        m = CALL.match(rest)
        if not m or m.group(1) != ACCEPT4 or int(m.group(5)) < 0:
            continue
        k = i
        while k > 0 and not (
            evs[k][2] == tid
            and evs[k][3] == "raw_syscalls:sys_exit"
            and evs[k][4].startswith(f"NR {EPOLL_WAIT} ")
        ):
            k -= 1
        calls, j = 0, i
        while j < len(evs) and not (
            evs[j][3] == "sched:sched_switch" and f"prev_pid={tid} " in evs[j][4]
        ):
            calls += evs[j][2] == tid and evs[j][3] == "raw_syscalls:sys_enter"
            j += 1
        if j < len(evs) and i - k < 5000:
            found.append(((evs[j][0] - evs[k][0]) * 1e6, calls))
    return found


def connections(evs, client):
    """(connect-to-send µs, connect-to-answer µs) of each connection the client opened."""
    found = []
    for i, (t0, pid, _tid, name, rest) in enumerate(evs):
        if pid != client or name != "raw_syscalls:sys_enter" or not rest.startswith(f"NR {CONNECT} "):
            continue
        sent = None
        for t, p, _, n, r in evs[i + 1 :]:
            if t - t0 > 0.01:
                break
            if p != client:
                continue
            m = CALL.match(r)
            if not m:
                continue
            nr = m.group(1)
            # A request's send: a writev, or a write of more than the 8 bytes of an eventfd.
            if sent is None and n.endswith("enter") and nr in SEND:
                if nr != "1" or int(m.group(4), 16) > 8:
                    sent = t
            elif sent and n.endswith("exit") and nr in RECV and m.group(5) and int(m.group(5)) > 0:
                found.append(((sent - t0) * 1e6, (t - t0) * 1e6))
                break
    return found


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    evs = read(sys.argv[1])
    client, mock = int(sys.argv[2]), int(sys.argv[4])
    proxy = {int(p) for p in sys.argv[3].split(",") if p} - {mock, client}
    acc = accepts(evs, proxy)
    conns = connections(evs, client)
    if not acc or not conns:
        sys.exit("no new connection found in the trace")
    print(f"accept_wake_to_sleep\t{statistics.median(a for a, _ in acc):.1f}")
    print(f"accept_syscalls\t{statistics.median(c for _, c in acc):.1f}")
    print(f"connect_to_send\t{statistics.median(s for s, _ in conns):.1f}")
    print(f"connect_to_answer\t{statistics.median(a for _, a in conns):.1f}")
    print(f"new_connections\t{len(conns)}")


if __name__ == "__main__":
    main()
