#!/usr/bin/env python3
"""Helpers of bench/overhead: parse load-generator output, summarise three sides (direct to the
mock, through nginx, through switchyard), write docs/BENCHMARKS.md.

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

# Goals (issue 23): latency added at fixed rates, throughput (as a ratio to direct) and streaming's
# added time to the first chunk are judged against nginx's in the same run; memory against this.
GOAL_RSS_MIB = 20.0


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


def fmt_signed_ms(x):
    return "n/a" if x != x else f"{x:+.2f} ms"


def fmt_x(x):
    return "n/a" if x != x else f"{x:.2f}×"


def fmt_mib(x):
    return "n/a" if x != x else f"{x:.1f} MiB"


def fmt_cpu(x):
    return "n/a" if x != x else f"{x:.0f} µs"


def verdict(got, target, ok):
    """"met" when ok(got, target); "n/a" when either is missing (NaN)."""
    if got != got or target != target:
        return "n/a"
    return "met" if ok(got, target) else "**missed**"


def report(results_path, meta_path, doc):
    rows = [json.loads(line) for line in open(results_path) if line.strip()]
    meta = json.load(open(meta_path))

    def vals(case, side, key):
        return [r[key] for r in rows if r.get("case") == case and r.get("side") == side and key in r]

    def m(case, side, key):
        return med(vals(case, side, key))

    def paired(case, side, key, op):
        # Per round, the side against the direct run of the same round; then the median.
        out = []
        for r in rows:
            if r.get("case") == case and r.get("side") == side and key in r:
                d = [x for x in rows if x.get("case") == case and x.get("side") == "direct"
                     and x.get("round") == r.get("round") and key in x]
                if d:
                    out.append(op(r[key], d[0][key]))
        return med(out)

    def added(case, side, key):
        return paired(case, side, key, lambda s, d: s - d)

    def ratio(case, side, key):
        return paired(case, side, key, lambda s, d: s / d if d else float("nan"))

    def versus(case, key, op, ahead, fmt):
        # Per round, the gateway against nginx in the same round; the median, and the rounds
        # in which the gateway was level or ahead.
        pairs = []
        for g in rows:
            if g.get("case") == case and g.get("side") == "gateway" and key in g:
                n = [x for x in rows if x.get("case") == case and x.get("side") == "nginx"
                     and x.get("round") == g.get("round") and key in x]
                if n:
                    pairs.append((g[key], n[0][key]))
        if not pairs:
            return "n/a"
        won = sum(1 for g, n in pairs if ahead(g, n))
        return f"{fmt(med([op(g, n) for g, n in pairs]))} (level or ahead in {won} of {len(pairs)})"

    clk = meta.get("clk_tck", 100)

    def cpu_per_req(case, side, who):
        per = []
        for r in rows:
            if r.get("case") == case and r.get("side") == side and r.get("ok") and f"{who}_cpu_ticks" in r:
                per.append(r[f"{who}_cpu_ticks"] / clk * 1e6 / r["ok"])
        return med(per)

    cases = {r.get("case") for r in rows}
    rates = [q for q in meta.get("rates", []) if f"q{q}" in cases]
    # Time to first token: older result files (before ttfb.py reported it) have none.
    have_token = all("token_p50_ms" in r for r in rows if r["case"] == "ttfb")
    gw_mib = meta["gw_hwm_kb"] / 1024
    mock_mib = meta["mock_hwm_kb"] / 1024
    idle_mib = meta["gw_rss_idle_kb"] / 1024
    ngx_mib = meta.get("ngx_hwm_kb", float("nan") * 1024) / 1024
    ngx_idle_mib = meta.get("ngx_rss_idle_kb", float("nan") * 1024) / 1024
    ngx_procs = f"{meta['nginx_workers'] + 1} processes summed" if "nginx_workers" in meta else "no nginx run"
    bad_runs = [r for r in rows if r.get("non200") or r.get("errors")]
    sides = ("nginx", "gateway")

    L = []
    L.append(BEGIN)
    L.append("")
    L.append(f"Measured {meta['date']} on {meta['machine']}; commit `{meta['commit']}`; "
             f"{meta['rustc']}; load from {meta['loadgen_version']}"
             + (f"; {meta['nginx_version']}." if meta.get("nginx_version") else "."))
    if meta.get("loadgen_note"):
        L.append(f"Note: {meta['loadgen_note']}")
    L.append("")
    L.append("Mock upstream (`switchyard mock`, plan `{\"latency_ms\": 0}`, 12-word answer), nginx "
             f"(Debian's package, {meta.get('nginx_workers', '?')} worker processes: `worker_processes auto`, "
             "one per core as the gateway has one server thread per core; a keep-alive reverse proxy, "
             "config below) and the gateway (" + meta.get("build", "release build") + ", one route "
             "with one target, audit off, "
             "default log level) on 127.0.0.1, nginx and the gateway in front of the same mock. "
             "The load generator, the mock and the proxy share the same cores, so \"direct\" has the "
             "CPU to itself while a proxied path splits it three ways. "
             f"Medians of {meta['runs']} interleaved rounds (direct, nginx and switchyard back to back "
             "in every round, the order rotating); \"added\" and \"/ direct\" are the medians of the "
             "per-round differences and ratios against the direct run of the same round, so they need "
             "not equal the difference of the medians. Request body: "
             f"`{meta['body']}` (streamed: the same with `\"stream\":true`).")
    L.append("")
    L.append("| | direct to mock | through nginx | through switchyard | added: nginx | added: switchyard "
             "| nginx / direct | switchyard / direct |")
    L.append("|---|---|---|---|---|---|---|---|")

    def lat_row(label, case, key, bold=False):
        d, n, g = m(case, "direct", key), m(case, "nginx", key), m(case, "gateway", key)
        an, ag = added(case, "nginx", key), added(case, "gateway", key)
        b = "**" if bold else ""
        L.append(f"| {label} | {fmt_us(d)} | {fmt_us(n)} | {fmt_us(g)} | {b}{fmt_signed_us(an)}{b} | "
                 f"{b}{fmt_signed_us(ag)}{b} | {fmt_x(ratio(case, 'nginx', key))} | "
                 f"{fmt_x(ratio(case, 'gateway', key))} |")

    def ms_row(label, key, bold=False):
        d, n, g = m("ttfb", "direct", key), m("ttfb", "nginx", key), m("ttfb", "gateway", key)
        b = "**" if bold else ""
        L.append(f"| {label} | {fmt_ms(d)} | {fmt_ms(n)} | {fmt_ms(g)} | "
                 f"{b}{fmt_signed_ms(added('ttfb', 'nginx', key))}{b} | "
                 f"{b}{fmt_signed_ms(added('ttfb', 'gateway', key))}{b} | "
                 f"{fmt_x(ratio('ttfb', 'nginx', key))} | {fmt_x(ratio('ttfb', 'gateway', key))} |")

    lat_row("latency, concurrency 1, closed loop: p50", "lat1", "p50_us")
    lat_row("latency, concurrency 1, closed loop: p99", "lat1", "p99_us")
    if "latq" in cases:
        q = meta["lat_qps"]
        lat_row(f"latency, concurrency 1 at {q} req/s: p50", "latq", "p50_us")
        lat_row(f"latency, concurrency 1 at {q} req/s: p99", "latq", "p99_us")
    for q in rates:
        c = meta.get("rate_conc", 64)
        lat_row(f"latency, {c} connections at {q} req/s: p50", f"q{q}", "p50_us", bold=True)
        lat_row(f"latency, {c} connections at {q} req/s: p99", f"q{q}", "p99_us", bold=True)
    for c in (64, 32):
        d, n, g = (m(f"tp{c}", s, "rps") for s in ("direct", "nginx", "gateway"))
        L.append(f"| max req/s, {c} connections | {fmt_rps(d)} | {fmt_rps(n)} | {fmt_rps(g)} | | | "
                 f"**{fmt_x(ratio(f'tp{c}', 'nginx', 'rps'))}** | **{fmt_x(ratio(f'tp{c}', 'gateway', 'rps'))}** |")
    lat_row("p99 latency under load, 64 connections", "tp64", "p99_us")
    ms_row("streaming: time to first chunk, p50", "first_p50_ms", bold=True)
    ms_row("streaming: time to first chunk, p99", "first_p99_ms")
    if have_token:
        ms_row("streaming: time to first token (first chunk with text), p50", "token_p50_ms")
    ms_row("streaming: whole 12-chunk stream, p50", "total_p50_ms")
    L.append(f"| peak RSS (VmHWM) over the whole run | {mock_mib:.1f} MiB (the mock) | "
             f"{fmt_mib(ngx_mib)} ({ngx_procs}, the pages they share counted in each; "
             f"idle after start: {fmt_mib(ngx_idle_mib)}) | "
             f"**{gw_mib:.1f} MiB** (idle after start: {idle_mib:.1f} MiB) | | | | |")
    dcpu = cpu_per_req("tp64", "direct", "mock")
    ncpu = cpu_per_req("tp64", "nginx", "ngx")
    gcpu = cpu_per_req("tp64", "gateway", "gw")
    L.append(f"| CPU per request at 64 connections | {fmt_cpu(dcpu)} (the mock) | {fmt_cpu(ncpu)} "
             f"(nginx alone) | {fmt_cpu(gcpu)} (the gateway alone) | | | | |")
    L.append("")

    L.append("Goals (issue 23: faster than a bare nginx in front of the same upstream, at the rates "
             "agents send):")
    L.append("")
    L.append("| goal | target | switchyard | nginx | | switchyard against nginx, round by round |")
    L.append("|---|---|---|---|---|---|")
    for q in rates:
        for key, name in (("p50_us", "p50"), ("p99_us", "p99")):
            ag, an = added(f"q{q}", "gateway", key), added(f"q{q}", "nginx", key)
            vs = versus(f"q{q}", key, lambda g, n: g - n, lambda g, n: g <= n, fmt_signed_us)
            L.append(f"| added {name} latency at {q} req/s ({meta.get('rate_conc', 64)} connections) | "
                     f"no higher than nginx's | {fmt_signed_us(ag)} | {fmt_signed_us(an)} | "
                     f"{verdict(ag, an, lambda a, b: a <= b)} | {vs} |")
    for c in (64, 32):
        rg, rn = ratio(f"tp{c}", "gateway", "rps"), ratio(f"tp{c}", "nginx", "rps")
        vs = versus(f"tp{c}", "rps", lambda g, n: g / n if n else float("nan"), lambda g, n: g >= n, fmt_x)
        L.append(f"| throughput, {c} connections (ratio to direct) | at least nginx's | {fmt_x(rg)} | "
                 f"{fmt_x(rn)} | {verdict(rg, rn, lambda a, b: a >= b)} | {vs} |")
    tg, tn = added("ttfb", "gateway", "first_p50_ms"), added("ttfb", "nginx", "first_p50_ms")
    vs = versus("ttfb", "first_p50_ms", lambda g, n: g - n, lambda g, n: g <= n, fmt_signed_ms)
    L.append(f"| streaming, added time to first chunk (p50) | at most nginx's | {fmt_signed_ms(tg)} | "
             f"{fmt_signed_ms(tn)} | {verdict(tg, tn, lambda a, b: a <= b)} | {vs} |")
    L.append(f"| peak RSS under load | at most {GOAL_RSS_MIB:.0f} MiB | {gw_mib:.1f} MiB | "
             f"{fmt_mib(ngx_mib)} ({ngx_procs}) | "
             f"{verdict(gw_mib, GOAL_RSS_MIB, lambda a, b: a <= b)} | |")
    L.append("")
    L.append("The verdict compares the two sides' medians, each side's figure taken against the "
             "direct run of its round. The last column compares the two proxies within each round "
             "(the direct run cancels out of a difference of two added latencies): the median over "
             "the rounds of the gateway's figure less nginx's (for throughput, the gateway's req/s "
             "over nginx's), and the rounds in which the gateway was level or ahead.")
    L.append("")
    if bad_runs:
        L.append(f"**Warning:** {len(bad_runs)} run(s) had non-200 answers or errors: "
                 + ", ".join(f"{r['case']}/{r['side']}/round {r['round']}" for r in bad_runs) + ".")
        L.append("")
    if meta.get("gw_warnings"):
        L.append(f"The gateway logged {meta['gw_warnings']} warning/error line(s) during the run.")
        L.append("")
    if meta.get("ngx_warnings"):
        L.append(f"nginx logged {meta['ngx_warnings']} warning/error line(s) during the run.")
        L.append("")

    order = ["lat1", "latq"] + [f"q{q}" for q in rates] + ["tp64", "tp32", "ttfb"]
    side_order = ["direct", "nginx", "gateway"]
    L.append("<details><summary>Every run</summary>")
    L.append("")
    L.append("| case | side | round | req/s | p50 | p99 | first chunk p50 / p99 | peak RSS |")
    L.append("|---|---|---|---|---|---|---|---|")
    for r in sorted((r for r in rows if r["case"] in order and r["side"] in side_order),
                    key=lambda r: (order.index(r["case"]), side_order.index(r["side"]), r["round"])):
        if r["case"] == "ttfb":
            L.append(f"| ttfb | {r['side']} | {r['round']} | | | | "
                     f"{r['first_p50_ms']:.3f} / {r['first_p99_ms']:.3f} ms (n={r['n']}) | |")
        else:
            hwm = {"gateway": r.get("gw_hwm_kb"), "nginx": r.get("ngx_hwm_kb")}.get(r["side"], r.get("mock_hwm_kb"))
            L.append(f"| {r['case']} | {r['side']} | {r['round']} | {fmt_rps(r['rps'])} | "
                     f"{fmt_us(r['p50_us'])} | {fmt_us(r['p99_us'])} | | "
                     f"{fmt_mib((hwm if hwm is not None else float('nan')) / 1024)} |")
    L.append("")
    L.append("</details>")
    L.append("")
    if meta.get("nginx_conf"):
        L.append("<details><summary>nginx's config</summary>")
        L.append("")
        L.append("```nginx")
        L.extend(meta["nginx_conf"].rstrip("\n").split("\n"))
        L.append("```")
        L.append("")
        L.append("</details>")
        L.append("")
    path = meta.get("api_path", "/v1/chat/completions")
    L.append(f"Commands (ports are picked at run time; `$D` is `http://MOCK{path}`, "
             f"`$N` is `http://NGINX{path}`, `$G` is `http://GATEWAY{path}`, "
             "`body.json` the body above):")
    L.append("")
    L.append("```sh")
    prefix = f"NICE={meta['nice']} " if meta.get("nice") else ""
    L.append(f"{prefix}bench/overhead      # all of it: build, mock, nginx, gateway, measurements, this section")
    L.append("switchyard mock --port 0 --name bench          # prints its address")
    L.append("curl -X PUT -d '{\"latency_ms\": 0}' http://MOCK/mock/plan")
    L.append("switchyard serve -c gateway.toml               # the minimal config: one route, audit off")
    L.append("nginx -p $DIR -e $DIR/logs/error.log -c $DIR/nginx.conf   # the config above")
    if meta["loadgen"] == "oha":
        common = "-m POST -T application/json -D body.json"
        L.append(f"oha --no-tui --output-format json -c 1 -z {meta['lat_secs']}s {common} $D   # and $N, $G")
        L.append(f"oha --no-tui --output-format json -c 1 -z {meta['latq_secs']}s -q {meta['lat_qps']} {common} $D   # and $N, $G")
        for q in rates:
            secs = meta.get("rate_secs", {}).get(str(q), "?")
            L.append(f"oha --no-tui --output-format json -c {meta.get('rate_conc', 64)} -z {secs}s -q {q} "
                     f"{common} $D   # and $N, $G")
        L.append(f"oha --no-tui --output-format json -c 64 -z {meta['tp_secs']}s {common} $D   # and $N, $G; also -c 32")
    else:
        L.append(f"wrk -t 1 -c 1 -d {meta['lat_secs']}s --latency -s post.lua $D   # and $N, $G")
        L.append(f"wrk -t 2 -c 64 -d {meta['tp_secs']}s --latency -s post.lua $D   # and $N, $G; also -c 32")
    L.append(f"bench/ttfb.py $D stream.json {meta['ttfb_n']} 50 {meta['ttfb_max_secs']}   # and $N, $G: "
             "first `data:` line, one keep-alive connection")
    L.append("grep VmHWM /proc/$GATEWAY_PID/status           # nginx: the master's and each worker's, summed")
    L.append("```")
    L.append(f"Measuring took {meta['elapsed_s']} s. 1-minute load average before / after: "
             f"{meta.get('load_before', '?')} / {meta.get('load_after', '?')} (the benchmark itself keeps "
             "both cores busy, so only the figure before says whether other work was running)."
             + (f" Mock, nginx, gateway and load generator ran at nice {meta['nice']}." if meta.get("nice") else ""))
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
