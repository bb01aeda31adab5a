#!/usr/bin/env bash
# nginx-origin.sh - a private nginx that serves a folder laid out as ROOT/BUCKET/KEY over plain
# HTTP, so that an S3 GET (path style: /BUCKET/KEY, signed or not) maps to a file. It answers
# GET, HEAD and Range requests with sendfile and ignores signatures: a fast, CPU-cheap origin
# for measuring the client side of downloads. Only GETs: no listing, no uploads.
#
#   nginx-origin.sh start ROOT [PORT]   (default port 8090) prints the endpoint URL
#   nginx-origin.sh stop [PORT]         stops the instance started for that port
#
# Config, pid file and logs live in ${NGINX_ORIGIN_BASE:-/tmp/s3direct-nginx}-PORT, removed by
# stop; the instance is stopped by its recorded pid only.
set -euo pipefail
cmd=${1:?usage: nginx-origin.sh start ROOT [PORT] | stop [PORT]}
case $cmd in
start)
  root=$(cd "${2:?usage: nginx-origin.sh start ROOT [PORT]}" && pwd)
  port=${3:-8090}
  ;;
stop) port=${2:-8090} ;;
*) echo "usage: nginx-origin.sh start ROOT [PORT] | stop [PORT]" >&2; exit 2 ;;
esac
dir=${NGINX_ORIGIN_BASE:-/tmp/s3direct-nginx}-$port
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

if [ "$cmd" = stop ]; then
  [ -f "$dir/nginx.pid" ] || exit 0
  pid=$(cat "$dir/nginx.pid")
  kill -QUIT "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -rf "$dir"
  exit 0
fi

[ -x "$nginx_bin" ] || { echo "nginx-origin: nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "nginx-origin: port $port is already in use" >&2
  exit 1
fi
mkdir -p "$dir/tmp"
cat >"$dir/nginx.conf" <<CONF
daemon on;
worker_processes 2;
user root;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  keepalive_timeout 60s;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  types { }
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$port;
    root $root;
    # S3 clients add query strings (x-id=GetObject, presigned parameters): files ignore them.
    location / { }
  }
}
CONF
"$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
for _ in $(seq 50); do
  curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/" && break
  sleep 0.1
done
echo "http://127.0.0.1:$port"
