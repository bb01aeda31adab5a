#!/usr/bin/env bash
# tls-front.sh start UPSTREAM_URL PORT DIR | stop DIR - nginx terminating TLS on 127.0.0.1:PORT
# in front of the S3 server at UPSTREAM_URL (as tests/integ/test_tls.c does), with a
# self-signed certificate for 127.0.0.1 written to DIR/cert.pem: real endpoints are https, so
# the peers are measured over TLS as well. The instance is stopped by its recorded pid only.
set -euo pipefail
case ${1:-} in
start)
  up=${2:?usage: tls-front.sh start UPSTREAM_URL PORT DIR}
  port=${3:?usage: tls-front.sh start UPSTREAM_URL PORT DIR}
  dir=${4:?usage: tls-front.sh start UPSTREAM_URL PORT DIR}
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
  cat >"$dir/nginx.conf" <<CONF
pid $dir/nginx.pid;
error_log $dir/error.log;
events {}
http {
  access_log off;
  client_body_temp_path $dir;
  proxy_temp_path $dir;
  client_max_body_size 0;
  server {
    listen 127.0.0.1:$port ssl;
    ssl_certificate $dir/cert.pem;
    ssl_certificate_key $dir/key.pem;
    location / {
      proxy_pass ${up%/};
      proxy_set_header Host \$http_host;
      proxy_http_version 1.1;
      proxy_request_buffering off;
      proxy_buffering off;
      # With buffering off nginx reads the upstream response proxy_buffer_size bytes at a time
      # (one page by default) and sends each read as its own TLS record: 1 MiB halves both
      # nginx's CPU and the client's per GB here (s3direct cp of 512 MiB: 2.5 s -> 1.4 s,
      # client 2.1 -> 1.3 CPU-s/GB), as a real endpoint sending full 16 KiB records would.
      proxy_buffer_size 1m;
      proxy_buffers 4 1m;
      proxy_busy_buffers_size 2m;
    }
  }
}
CONF
  "$(command -v nginx || echo /usr/sbin/nginx)" -p "$dir" -c "$dir/nginx.conf"
  for _ in $(seq 50); do
    curl -s --cacert "$dir/cert.pem" -o /dev/null "https://127.0.0.1:$port/" && exit 0
    sleep 0.1
  done
  echo "tls-front: nginx did not answer on $port" >&2; exit 1
  ;;
stop)
  dir=${2:?usage: tls-front.sh stop DIR}
  [ -f "$dir/nginx.pid" ] || exit 0
  pid=$(cat "$dir/nginx.pid")
  kill -QUIT "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  ;;
*) echo "usage: tls-front.sh start UPSTREAM_URL PORT DIR | stop DIR" >&2; exit 2 ;;
esac
