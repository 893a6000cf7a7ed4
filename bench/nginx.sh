# bench/nginx.sh: the bare nginx the benches measure beside the gateway (sourced, not run).

# nginx_conf DIR PORT UPSTREAM [one]: write DIR/nginx.conf, a keep-alive reverse proxy on
# 127.0.0.1:PORT to UPSTREAM (host:port), everything of its own under DIR. Its workers: one per
# core (`worker_processes auto`, the listener shared with SO_REUSEPORT), as the gateway runs one
# server thread per core; with `one`, a single process (`master_process off`), for callgrind.
# No cap on requests per connection either way (nginx's default closes a client connection
# after 1,000).
nginx_conf() {
    local dir=$1 port=$2 upstream=$3 processes="worker_processes auto;"
    [[ ${4:-} == one ]] && processes=$'master_process off;\nworker_processes 1;'
    mkdir -p "$dir/logs" "$dir/tmp"
    cat >"$dir/nginx.conf" <<CONF
daemon off;
$processes
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events {
    worker_connections 1024;
}
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    upstream mock {
        server $upstream;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port reuseport;
        location / {
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
CONF
}

# nginx_up URL: wait (up to 30 s) until URL answers at all, whatever its status (the mock has
# nothing at `/`, and says 404).
nginx_up() {
    for _ in $(seq 300); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$1" || true) != 000 ]] && return 0
        sleep 0.1
    done
    return 1
}
