#!/usr/bin/env python3
"""The code one request runs, from two callgrind profiles made with `--dump-instr=yes`.

Usage: footprint.py OUT_N1 OUT_N2 N1 N2 [TOP]

The two profiles are of the same process kind answering N1 and N2 requests (bench/instructions
makes them). An instruction whose count grew between them is one requests run, in the share of
requests its count grew by (at most all of them: a loop's body runs many times in one).
Printed, per request: the distinct instructions run (each counted once, however often it ran,
times that share), and likewise the 64-byte cache lines and the 4-KiB pages they lie in (each
in the share of requests that ran any of it). After an idle spell these are what a request
fetches cold: a server woken a few times a second pays for each line, not for each
instruction. With TOP, the functions with the most such lines (a line counted for the function
of its first instruction).

Only the standard library. The profile's positions are callgrind's compressed ones: an
absolute `0x...` address, `+N`/`-N` from the previous one, or `*` for the same; the cost line
after a `calls=` line is the call's inclusive cost and is not the caller's own.
"""

import collections
import re
import sys


def load(path):
    """Instruction counts by address, and the function each address was first seen in."""
    counts = collections.Counter()
    function_of = {}
    names = {}
    function = None
    last = 0
    after_call = False
    name_re = re.compile(r"\((\d+)\)(?: (.*))?")

    def name(text):
        m = name_re.match(text)
        if not m:
            return text
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), m.group(1))

    with open(path, errors="replace") as f:
        for line in f:
            c = line[0]
            if c.isdigit() or c in "+-*":
                fields = line.split()
                p = fields[0]
                if p[0] == "+":
                    addr = last + int(p[1:], 0)
                elif p[0] == "-":
                    addr = last - int(p[1:], 0)
                elif p[0] == "*":
                    addr = last
                else:
                    addr = int(p, 0)
                last = addr
                if after_call:
                    after_call = False
                    continue
                counts[addr] += int(fields[-1])
                function_of.setdefault(addr, function)
            elif line.startswith("calls="):
                after_call = True
            elif line.startswith("fn="):
                function = name(line[3:].strip())
            elif line.startswith("cfn="):
                name(line[4:].strip())
    return counts, function_of


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    before, _ = load(sys.argv[1])
    after, function_of = load(sys.argv[2])
    n = int(sys.argv[4]) - int(sys.argv[3])
    top = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    # The share of requests that ran each instruction (at most 1: a loop's body runs many
    # times in one request), and of each line and page (their most-run instruction's).
    share = {}
    for a, v in after.items():
        d = v - before.get(a, 0)
        if d > 0:
            share[a] = min(1.0, d / n)
    lines = collections.defaultdict(float)
    pages = collections.defaultdict(float)
    first = {}
    for a, s in share.items():
        lines[a >> 6] = max(lines[a >> 6], s)
        pages[a >> 12] = max(pages[a >> 12], s)
        if a >> 6 not in first or a < first[a >> 6]:
            first[a >> 6] = a
    print(
        f"{sum(share.values()):.0f} distinct instructions, {sum(lines.values()):.0f} cache lines "
        f"({sum(lines.values()) * 64 / 1024:.0f} KiB), {sum(pages.values()):.0f} pages of code "
        "per request"
    )
    if top:
        per = collections.Counter()
        for line, a in first.items():
            per[function_of.get(a) or "?"] += lines[line]
        for function, count in per.most_common(top):
            print(f"{count:6.0f}  {function[:150]}")


if __name__ == "__main__":
    main()
