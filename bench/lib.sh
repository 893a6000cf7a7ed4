# bench/lib.sh: what the end-to-end benches share (sourced, not run). The caller sets ROOT,
# WORK, PY, BIN and BUILD, defines `log` and `die`, and keeps the PIDS array that `cleanup`
# stops on exit.

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_http() { for _ in $(seq 100); do curl -fs -o /dev/null --max-time 1 "$1" && return 0; sleep 0.1; done; return 1; }

# Stop every process in PIDS (TERM, then KILL after 10 s); keep WORK when KEEP=1 or on failure.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    [[ $(type -t cleanup_more) == function ]] && cleanup_more
    if [[ ${KEEP:-0} == 1 || $rc != 0 ]]; then log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}

# oha on PATH (installed with cargo when missing); sets OHA_VERSION.
need_oha() {
    export PATH="$HOME/.cargo/bin:$PATH"
    if ! command -v oha >/dev/null; then
        log "installing oha (cargo install oha --locked) ..."
        cargo install oha --locked >"$WORK/oha-install.log" 2>&1 || die "oha could not be installed (see $WORK/oha-install.log)"
    fi
    OHA_VERSION=$(oha --version | head -n1)
}

# The release binary, built when BUILD=1.
need_binary() {
    if [[ $BUILD == 1 ]]; then
        log "cargo build --release ..."
        (cd "$ROOT" && cargo build --release --quiet --bin switchyard) || die "release build failed"
    fi
    [[ -x $BIN ]] || die "$BIN is missing (run with BUILD=1)"
}

# A zero-latency `switchyard mock`; sets MOCK_ADDR (host:port).
start_mock() {
    "$BIN" mock --port 0 --name bench >"$WORK/mock.out" 2>"$WORK/mock.err" &
    PIDS+=("$!")
    MOCK_ADDR=""
    for _ in $(seq 100); do
        MOCK_ADDR=$(sed -n 's|^mock .* listening on http://||p' "$WORK/mock.out")
        [[ -n $MOCK_ADDR ]] && break
        sleep 0.1
    done
    [[ -n $MOCK_ADDR ]] || die "the mock did not start: $(cat "$WORK/mock.err")"
}

# The gateway (BIN, at PRIO) in front of the mock at MOCK_ADDR with the benches' minimal config
# (one route, `bench`, to the mock's model `m`; audit off); sets GW_PORT and GW_PID.
start_gateway() {
    GW_PORT=$(free_port)
    cat >"$WORK/gateway.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"

[[providers]]
name = "mock"
kind = "openai"
base_url = "http://$MOCK_ADDR/v1"

[[routes]]
name = "bench"
targets = [{ provider = "mock", model = "m" }]

[audit]
store = "off"
TOML
    "${PRIO[@]}" "$BIN" serve -c "$WORK/gateway.toml" >"$WORK/gateway.out" 2>"$WORK/gateway.err" &
    GW_PID=$!
    PIDS+=("$GW_PID")
    wait_http "http://127.0.0.1:$GW_PORT/healthz" || die "the gateway did not start: $(tail -n 5 "$WORK/gateway.err")"
}

# A bare nginx (bench/nginx.sh's, at PRIO) in front of the mock at MOCK_ADDR; sets NGX_PORT and
# NGX_PID.
start_nginx() {
    NGX_PORT=$(free_port)
    nginx_conf "$WORK/nginx" "$NGX_PORT" "$MOCK_ADDR"
    "${PRIO[@]}" nginx -p "$WORK/nginx" -e "$WORK/nginx/logs/error.log" -c "$WORK/nginx/nginx.conf" \
        >"$WORK/nginx.out" 2>&1 &
    NGX_PID=$!
    PIDS+=("$NGX_PID")
    nginx_up "http://127.0.0.1:$NGX_PORT/" || die "nginx did not start: $(cat "$WORK/nginx.out")"
}

# PID... -> their utime+stime in clock ticks, summed.
ticks() {
    local t=0 pid
    for pid in "$@"; do t=$(( t + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) )); done
    echo "$t"
}

# The commit measured, marked when the sources have uncommitted changes.
commit_measured() {
    local commit dirty
    commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    dirty=$(git -C "$ROOT" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null | wc -l || echo 0)
    [[ $dirty != 0 ]] && commit="$commit (+ uncommitted changes)"
    echo "$commit"
}
