# Shared by the scripts that put gateway replicas behind nginx (fleet.sh, bridged-tasks.sh); not
# meant to be run itself.

# start_round_robin DIR PORT...: nginx on a free loopback port, round-robin (no stickiness) over
# the replicas on 127.0.0.1:PORT..., its config, pid and logs in DIR, never the system service.
# Answers carry X-Upstream (the replica that served them). Appends nginx's pid to PIDS and sets
# LB, the MCP endpoint through it.
start_round_robin() {
    local dir=$1 port servers=""
    shift
    for port in "$@"; do servers+="        server 127.0.0.1:$port;"$'\n'; done
    local listen
    listen=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat >"$dir/nginx.conf" <<NGINX
worker_processes 1;
pid $dir/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    upstream replicas {
$servers    }
    server {
        listen 127.0.0.1:$listen;
        location / {
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$http_host;
            proxy_buffering off;
            add_header X-Upstream \$upstream_addr always;
        }
    }
}
NGINX
    nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/nginx-error.log" -g 'daemon off;' &
    PIDS+=($!)
    LB="http://127.0.0.1:$listen/mcp"
}
