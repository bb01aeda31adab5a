#!/usr/bin/env bash
# aarch64.sh - the aarch64 wheel (make test-wheel-aarch64): built by
# S3D_WHEEL_ARCH=aarch64 scripts/build-wheel.sh, held to the same file checks as the x86-64
# one (tests/wheel/check-file.sh), then its own binaries run under qemu-aarch64 with Debian's
# aarch64 glibc (there is no aarch64 Python here, so the Python tests do not run):
#   - the CLI loads the wheel's libs3direct.so and prints the version;
#   - TLS through the static libcurl + OpenSSL: a loopback https server with a self-signed
#     certificate is reached when S3D_DEFAULT_CA_BUNDLE (what the console script passes from
#     certifi) names that certificate, and refused when it names another CA file;
#   - with a server (scripts/with-rgw.sh): a 3 MB file up and down through S3 comes back the
#     same, its CRC-32C (the armv8 path) verified against the one stored on upload.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
sysroot=/usr/aarch64-linux-gnu
command -v qemu-aarch64 >/dev/null 2>&1 && [ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || {
  echo "test-wheel-aarch64: needs qemu-aarch64 and $sysroot (apt-get install qemu-user" \
    "libc6-arm64-cross)" >&2
  exit 1
}
work=$(mktemp -d /tmp/s3d-wheelarm.XXXXXX)
srv=
cleanup() {
  [ -z "$srv" ] || kill "$srv" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
S3D_WHEEL_ARCH=aarch64 "$repo/scripts/build-wheel.sh" "$work/dist" >"$work/build-wheel.log"
cat "$work/build-wheel.log"
whl=$(tail -n 1 "$work/build-wheel.log")
"$repo/tests/wheel/check-file.sh" "$whl"

mkdir "$work/w"
python3 -m zipfile -e "$whl" "$work/w"
cli=$work/w/s3direct/_lib/s3direct
chmod +x "$cli"
run() { env -u S3D_DEFAULT_CA_BUNDLE -u SSL_CERT_FILE -u AWS_CA_BUNDLE "$@"; }
q=(qemu-aarch64 -L "$sysroot" "$cli")
fail=0
v=$(run "${q[@]}" --version)
echo "ok   $v (under qemu-aarch64)"

# TLS: the server answers every request 404; reaching it means the handshake passed.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" \
  2>/dev/null
python3 - "$work" >"$work/port" <<'PY' &
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_HEAD(self):
        self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1] + "/cert.pem", sys.argv[1] + "/key.pem")
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
srv=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
url=https://127.0.0.1:$(cat "$work/port")
tls() {  # tls CA_FILE: the CLI's stderr for a HEAD to the https server
  run env AWS_ACCESS_KEY_ID=AK AWS_SECRET_ACCESS_KEY=SK AWS_CONFIG_FILE=/nonexistent \
    S3D_DEFAULT_CA_BUNDLE="$1" "${q[@]}" --endpoint-url "$url" stat s3://bucket/key 2>&1 || true
}
said=$(tls "$work/cert.pem")
if grep -q 'HTTP 404' <<<"$said"; then
  echo "ok   TLS handshake with the certificate's CA (HTTP 404 from the server)"
else
  echo "FAIL TLS with the certificate's CA: $(tail -n 1 <<<"$said")"; fail=1
fi
other=$(python3 -c 'import certifi; print(certifi.where())' 2>/dev/null ||
        echo /etc/ssl/certs/ca-certificates.crt)
said=$(tls "$other")
if grep -q 'HTTP 404' <<<"$said"; then
  echo "FAIL TLS with another CA file passed"; fail=1
else
  echo "ok   TLS refused with another CA file: $(tail -n 1 <<<"$said")"
fi

# S3 round trip, CRC-32C checked on the way down.
if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
  b=s3d-arm-$$
  head -c 3000000 /dev/urandom >"$work/in.bin"
  run "${q[@]}" mb "s3://$b" >/dev/null
  run "${q[@]}" cp "$work/in.bin" "s3://$b/in.bin" >/dev/null
  run env S3D_LOG=debug "${q[@]}" cp "s3://$b/in.bin" "$work/out.bin" 2>"$work/get.log" >/dev/null
  if cmp -s "$work/in.bin" "$work/out.bin" && grep -q 'CRC32C .* verified' "$work/get.log"; then
    echo "ok   3,000,000 bytes up and down through S3, the same, CRC-32C verified"
  else
    echo "FAIL S3 round trip: $(grep -i crc "$work/get.log" | tail -n 1)"; fail=1
  fi
  run "${q[@]}" rm "s3://$b/in.bin" >/dev/null
  run "${q[@]}" rb "s3://$b" >/dev/null
else
  echo "skip the S3 round trip: no server (run under scripts/with-rgw.sh)"
fi
[ "$fail" = 0 ] && echo "test-wheel-aarch64: ok"
exit "$fail"
