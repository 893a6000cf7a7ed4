#!/usr/bin/env python3
"""Helpers of bench/overhead: parse load-generator output, summarise, write docs/BENCHMARKS.md.

  overhead_report.py parse oha|wrk FILE [--tag k=v ...]   one JSON line for one load run
  overhead_report.py tag [--tag k=v ...] < JSON            add tags to a JSON line (ttfb.py's)
  overhead_report.py brief < JSON                          one human line for the progress log
  overhead_report.py report RESULTS META DOC               summary to stdout; DOC updated
                                                           (DOC "-": print the section only)

Only the standard library.
"""

import json
import re
import statistics
import sys

SECTION = "## Overhead (bench/overhead)"
BEGIN = "<!-- bench/overhead:begin (generated; edit outside the markers) -->"
END = "<!-- bench/overhead:end -->"

# Goals (docs/CONTRACT.md, and the peers' figures in docs/BENCHMARKS.md).
GOAL_ADDED_P99_US = 200.0
ANCHOR_ADDED_P99_US = 100.0
GOAL_TP_RATIO = 0.5
GOAL_TTFB_ADDED_MS = 0.2
GOAL_RSS_MIB = 30.0


def tags(args):
    out = {}
    for a in args:
        k, _, v = a.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def parse_tags(argv):
    t = []
    i = 0
    rest = []
    while i < len(argv):
        if argv[i] == "--tag":
            t.append(argv[i + 1])
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    return rest, tags(t)


def parse_oha(text):
    d = json.loads(text)
    lp = d.get("latencyPercentiles") or {}
    codes = d.get("statusCodeDistribution") or {}
    errs = d.get("errorDistribution") or {}
    ok = int(codes.get("200", 0))
    return {
        "rps": d["summary"]["requestsPerSec"],
        "p50_us": (lp.get("p50") or float("nan")) * 1e6,
        "p99_us": (lp.get("p99") or float("nan")) * 1e6,
        "ok": ok,
        "non200": sum(int(v) for k, v in codes.items() if k != "200"),
        # A run stopped by -z aborts the requests in flight; that is not an error.
        "errors": sum(int(v) for k, v in errs.items() if "deadline" not in k),
    }


def _dur_us(s):
    m = re.match(r"([\d.]+)(us|ms|s)$", s)
    if not m:
        return float("nan")
    v = float(m.group(1))
    return v * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]


def parse_wrk(text):
    pct = dict(re.findall(r"^\s+(\d+)%\s+(\S+)$", text, re.M))
    total = re.search(r"(\d+) requests in", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    n = int(total.group(1)) if total else 0
    bad = int(non2xx.group(1)) if non2xx else 0
    return {
        "rps": float(rps.group(1)) if rps else float("nan"),
        "p50_us": _dur_us(pct.get("50", "")),
        "p99_us": _dur_us(pct.get("99", "")),
        "ok": n - bad,
        "non200": bad,
        "errors": sum(int(x) for x in sock.groups()) if sock else 0,
    }


def brief(r):
    case, side = r.get("case"), r.get("side")
    head = f"  {case:5} {side:8}"
    if case == "ttfb":
        return (f"{head} first chunk p50 {r['first_p50_ms']*1e3:7.0f} us  p99 {r['first_p99_ms']*1e3:7.0f} us"
                f"  whole stream p50 {r['total_p50_ms']:.2f} ms  (n={r['n']}, errors={r['errors']})")
    bad = ""
    if r.get("non200") or r.get("errors"):
        bad = f"  !! non-200: {r['non200']}, errors: {r['errors']}"
    return (f"{head} {r['rps']:9.0f} req/s  p50 {r['p50_us']:7.0f} us  p99 {r['p99_us']:7.0f} us"
            f"  (ok={r['ok']}){bad}")


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def fmt_us(x):
    return "n/a" if x != x else f"{x:,.0f} µs"


def fmt_ms(x):
    return "n/a" if x != x else f"{x:.2f} ms"


def fmt_rps(x):
    return "n/a" if x != x else f"{x:,.0f}"


def fmt_signed_us(x):
    return "n/a" if x != x else f"{x:+,.0f} µs"


def verdict(ok):
    return "met" if ok else "**missed**"


def report(results_path, meta_path, doc):
    rows = [json.loads(line) for line in open(results_path) if line.strip()]
    meta = json.load(open(meta_path))

    def vals(case, side, key):
        return [r[key] for r in rows if r.get("case") == case and r.get("side") == side and key in r]

    def m(case, side, key):
        return med(vals(case, side, key))

    def paired(case, key, op):
        # Per round, gateway against the direct run made just before or after it; then the median.
        out = []
        for r in rows:
            if r.get("case") == case and r.get("side") == "gateway" and key in r:
                d = [x for x in rows if x.get("case") == case and x.get("side") == "direct"
                     and x.get("round") == r.get("round") and key in x]
                if d:
                    out.append(op(r[key], d[0][key]))
        return med(out)

    def added(case, key):
        return paired(case, key, lambda g, d: g - d)

    def ratio(case, key):
        return paired(case, key, lambda g, d: g / d if d else float("nan"))

    have_latq = any(r.get("case") == "latq" for r in rows)
    clk = meta.get("clk_tck", 100)

    def cpu_per_req(case, side, who):
        per = []
        for r in rows:
            if r.get("case") == case and r.get("side") == side and r.get("ok"):
                per.append(r[f"{who}_cpu_ticks"] / clk * 1e6 / r["ok"])
        return med(per)

    lat = {}
    for case in ["lat1", "latq"] if have_latq else ["lat1"]:
        d50, g50 = m(case, "direct", "p50_us"), m(case, "gateway", "p50_us")
        d99, g99 = m(case, "direct", "p99_us"), m(case, "gateway", "p99_us")
        lat[case] = (d50, g50, d99, g99)
    tp = {c: (m(f"tp{c}", "direct", "rps"), m(f"tp{c}", "gateway", "rps")) for c in (64, 32)}
    tt = {k: (m("ttfb", "direct", k), m("ttfb", "gateway", k))
          for k in ("first_p50_ms", "first_p99_ms", "total_p50_ms", "total_p99_ms")}
    # Time to first token: older result files (before ttfb.py reported it) have none.
    have_token = all("token_p50_ms" in r for r in rows if r["case"] == "ttfb")
    gw_mib = meta["gw_hwm_kb"] / 1024
    mock_mib = meta["mock_hwm_kb"] / 1024
    idle_mib = meta["gw_rss_idle_kb"] / 1024
    bad_runs = [r for r in rows if r.get("non200") or r.get("errors")]

    L = []
    L.append(BEGIN)
    L.append("")
    L.append(f"Measured {meta['date']} on {meta['machine']}; commit `{meta['commit']}`; "
             f"{meta['rustc']}; load from {meta['loadgen_version']}.")
    if meta.get("loadgen_note"):
        L.append(f"Note: {meta['loadgen_note']}")
    L.append("")
    L.append("Mock upstream (`switchyard mock`, plan `{\"latency_ms\": 0}`, 12-word answer) and gateway "
             "(release build, one route with one target, audit off, default log level) on 127.0.0.1. "
             "The load generator, the mock and the gateway share the same cores, so \"direct\" has the "
             "CPU to itself while the gateway path splits it three ways. "
             f"Medians of {meta['runs']} interleaved rounds (direct and gateway back to back in every "
             "round, the order alternating); \"added\" and \"gateway / direct\" are the medians of the "
             "per-round differences and ratios, so they need not equal the difference of the two medians. "
             "Request body: "
             f"`{meta['body']}` (streamed: the same with `\"stream\":true`).")
    L.append("")
    L.append("| | direct to mock | through switchyard | added | gateway / direct |")
    L.append("|---|---|---|---|---|")
    d50, g50, d99, g99 = lat["lat1"]
    L.append(f"| latency, concurrency 1, closed loop: p50 | {fmt_us(d50)} | {fmt_us(g50)} | "
             f"{fmt_signed_us(added('lat1', 'p50_us'))} | {ratio('lat1', 'p50_us'):.2f}× |")
    L.append(f"| latency, concurrency 1, closed loop: p99 | {fmt_us(d99)} | {fmt_us(g99)} | "
             f"**{fmt_signed_us(added('lat1', 'p99_us'))}** | {ratio('lat1', 'p99_us'):.2f}× |")
    if have_latq:
        d50, g50, d99, g99 = lat["latq"]
        q = meta["lat_qps"]
        L.append(f"| latency, concurrency 1 at {q} req/s: p50 | {fmt_us(d50)} | {fmt_us(g50)} | "
                 f"{fmt_signed_us(added('latq', 'p50_us'))} | {ratio('latq', 'p50_us'):.2f}× |")
        L.append(f"| latency, concurrency 1 at {q} req/s: p99 | {fmt_us(d99)} | {fmt_us(g99)} | "
                 f"{fmt_signed_us(added('latq', 'p99_us'))} | {ratio('latq', 'p99_us'):.2f}× |")
    for c in (64, 32):
        d, g = tp[c]
        L.append(f"| max req/s, {c} connections | {fmt_rps(d)} | {fmt_rps(g)} | | **{ratio(f'tp{c}', 'rps'):.2f}×** |")
    for c in (64,):
        dd, gg = m(f"tp{c}", "direct", "p99_us"), m(f"tp{c}", "gateway", "p99_us")
        L.append(f"| p99 latency under load, {c} connections | {fmt_us(dd)} | {fmt_us(gg)} | "
                 f"{fmt_signed_us(added(f'tp{c}', 'p99_us'))} | {ratio(f'tp{c}', 'p99_us'):.2f}× |")
    d, g = tt["first_p50_ms"]
    L.append(f"| streaming: time to first chunk, p50 | {fmt_ms(d)} | {fmt_ms(g)} | "
             f"**{added('ttfb', 'first_p50_ms'):+.2f} ms** | {ratio('ttfb', 'first_p50_ms'):.2f}× |")
    d, g = tt["first_p99_ms"]
    L.append(f"| streaming: time to first chunk, p99 | {fmt_ms(d)} | {fmt_ms(g)} | "
             f"{added('ttfb', 'first_p99_ms'):+.2f} ms | {ratio('ttfb', 'first_p99_ms'):.2f}× |")
    if have_token:
        d, g = m("ttfb", "direct", "token_p50_ms"), m("ttfb", "gateway", "token_p50_ms")
        L.append(f"| streaming: time to first token (first chunk with text), p50 | {fmt_ms(d)} | "
                 f"{fmt_ms(g)} | {added('ttfb', 'token_p50_ms'):+.2f} ms | "
                 f"{ratio('ttfb', 'token_p50_ms'):.2f}× |")
    d, g = tt["total_p50_ms"]
    L.append(f"| streaming: whole 12-chunk stream, p50 | {fmt_ms(d)} | {fmt_ms(g)} | "
             f"{added('ttfb', 'total_p50_ms'):+.2f} ms | {ratio('ttfb', 'total_p50_ms'):.2f}× |")
    L.append(f"| peak RSS (VmHWM) over the whole run | {mock_mib:.1f} MiB (the mock) | **{gw_mib:.1f} MiB** "
             f"(idle after start: {idle_mib:.1f} MiB) | | |")
    dcpu, gcpu = cpu_per_req("tp64", "direct", "mock"), cpu_per_req("tp64", "gateway", "gw")
    L.append(f"| CPU per request at 64 connections | {dcpu:.0f} µs (the mock) | {gcpu:.0f} µs (the gateway alone) | | |")
    L.append("")

    added99 = added("lat1", "p99_us")
    ttfb_added = added("ttfb", "first_p50_ms")
    L.append("| goal | target | got | |")
    L.append("|---|---|---|---|")
    L.append(f"| added p99 latency at concurrency 1 | under {GOAL_ADDED_P99_US:.0f} µs "
             f"(peers: within {ANCHOR_ADDED_P99_US:.0f} µs) | {fmt_signed_us(added99)} | "
             f"{verdict(added99 < GOAL_ADDED_P99_US)} (peers: {verdict(added99 <= ANCHOR_ADDED_P99_US)}) |")
    for c in (64, 32):
        rr = ratio(f"tp{c}", "rps")
        L.append(f"| throughput, {c} connections | at least {GOAL_TP_RATIO:.1f}× direct | {rr:.2f}× | "
                 f"{verdict(rr >= GOAL_TP_RATIO)} |")
    L.append(f"| streaming, added time to first chunk (p50) | within +{GOAL_TTFB_ADDED_MS} ms | "
             f"{ttfb_added:+.2f} ms | {verdict(ttfb_added <= GOAL_TTFB_ADDED_MS)} |")
    L.append(f"| peak memory | under {GOAL_RSS_MIB:.0f} MiB | {gw_mib:.1f} MiB | {verdict(gw_mib < GOAL_RSS_MIB)} |")
    L.append("")
    if bad_runs:
        L.append(f"**Warning:** {len(bad_runs)} run(s) had non-200 answers or errors: "
                 + ", ".join(f"{r['case']}/{r['side']}/round {r['round']}" for r in bad_runs) + ".")
        L.append("")
    if meta.get("gw_warnings"):
        L.append(f"The gateway logged {meta['gw_warnings']} warning/error line(s) during the run.")
        L.append("")

    L.append("<details><summary>Every run</summary>")
    L.append("")
    L.append("| case | side | round | req/s | p50 | p99 | first chunk p50 / p99 | peak RSS |")
    L.append("|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (["lat1", "latq", "tp64", "tp32", "ttfb"].index(r["case"]),
                                         r["side"], r["round"])):
        if r["case"] == "ttfb":
            L.append(f"| ttfb | {r['side']} | {r['round']} | | | | "
                     f"{r['first_p50_ms']:.3f} / {r['first_p99_ms']:.3f} ms (n={r['n']}) | |")
        else:
            hwm = r["gw_hwm_kb"] if r["side"] == "gateway" else r["mock_hwm_kb"]
            L.append(f"| {r['case']} | {r['side']} | {r['round']} | {fmt_rps(r['rps'])} | "
                     f"{fmt_us(r['p50_us'])} | {fmt_us(r['p99_us'])} | | {hwm / 1024:.1f} MiB |")
    L.append("")
    L.append("</details>")
    L.append("")
    L.append("Commands (ports are picked at run time; `$D` is `http://MOCK/v1/chat/completions`, "
             "`$G` is `http://GATEWAY/v1/chat/completions`, `body.json` the body above):")
    L.append("")
    L.append("```sh")
    prefix = f"NICE={meta['nice']} " if meta.get("nice") else ""
    L.append(f"{prefix}bench/overhead      # all of it: build, mock, gateway, measurements, this section")
    L.append("switchyard mock --port 0 --name bench          # prints its address")
    L.append("curl -X PUT -d '{\"latency_ms\": 0}' http://MOCK/mock/plan")
    L.append("switchyard serve -c gateway.toml               # the minimal config: one route, audit off")
    if meta["loadgen"] == "oha":
        common = "-m POST -T application/json -D body.json"
        L.append(f"oha --no-tui --output-format json -c 1 -z {meta['lat_secs']}s {common} $D   # and $G")
        L.append(f"oha --no-tui --output-format json -c 1 -z {meta['latq_secs']}s -q {meta['lat_qps']} {common} $D   # and $G")
        L.append(f"oha --no-tui --output-format json -c 64 -z {meta['tp_secs']}s {common} $D   # and $G; also -c 32")
    else:
        L.append(f"wrk -t 1 -c 1 -d {meta['lat_secs']}s --latency -s post.lua $D   # and $G")
        L.append(f"wrk -t 2 -c 64 -d {meta['tp_secs']}s --latency -s post.lua $D   # and $G; also -c 32")
    L.append(f"bench/ttfb.py $D stream.json {meta['ttfb_n']} 50 {meta['ttfb_max_secs']}   # and $G: "
             "first `data:` line, one keep-alive connection")
    L.append("grep VmHWM /proc/$GATEWAY_PID/status")
    L.append("```")
    L.append(f"Measuring took {meta['elapsed_s']} s. 1-minute load average before / after: "
             f"{meta.get('load_before', '?')} / {meta.get('load_after', '?')} (the benchmark itself keeps "
             "both cores busy, so only the figure before says whether other work was running)."
             + (f" Mock, gateway and load generator ran at nice {meta['nice']}." if meta.get("nice") else ""))
    L.append("")
    L.append(END)
    body = "\n".join(L) + "\n"

    # Console summary: the same tables.
    sys.stdout.write("\n" + "\n".join(l for l in L if not l.startswith("<")) + "\n")

    if doc == "-":
        return
    try:
        text = open(doc).read()
    except FileNotFoundError:
        text = "# Benchmarks\n\n"
    if BEGIN in text and END in text:
        a = text.index(BEGIN)
        b = text.index(END) + len(END) + 1
        text = text[:a] + body + text[b:]
    elif SECTION in text:
        a = text.index(SECTION) + len(SECTION)
        nxt = text.find("\n## ", a)
        b = len(text) if nxt < 0 else nxt + 1
        text = text[:a] + "\n\n" + body + "\n" + text[b:]
    else:
        if not text.endswith("\n"):
            text += "\n"
        text += f"\n{SECTION}\n\n" + body
    import os
    os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
    with open(doc, "w") as f:
        f.write(text)
    sys.stderr.write(f"[overhead] wrote {doc}\n")


def main():
    argv, t = parse_tags(sys.argv[1:])
    cmd = argv[0]
    if cmd == "parse":
        kind, path = argv[1], argv[2]
        text = open(path).read()
        r = parse_oha(text) if kind == "oha" else parse_wrk(text)
        r.update(t)
        print(json.dumps(r))
    elif cmd == "tag":
        r = json.loads(sys.stdin.read())
        r.update(t)
        print(json.dumps(r))
    elif cmd == "brief":
        print(brief(json.loads(sys.stdin.read())))
    elif cmd == "report":
        report(argv[1], argv[2], argv[3])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
