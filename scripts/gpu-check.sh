#!/usr/bin/env bash
# gpu-check.sh - the one script a lent GPU machine runs (no package registry, no Ceph, minutes
# of device time): builds without CUDA at build time, runs the GPU tests, then the GPU
# benchmark table (pool H2D/D2H, file->GPU by cuFile and by O_DIRECT through the pool,
# GPU->file, S3->GPU vs S3->host from a local HTTP origin). Whole run well under 5 minutes;
# every step has its own timeout. Output also goes to $OUT/gpu-check.log when $OUT is set.
#
#   scripts/gpu-check.sh [BUILD_DIR]       (default build-gpu)
#   GPU_CHECK_MIB=N     benchmark file size in MiB (default 1024)
#   GPU_CHECK_MINIMAL=1 skip the CMake build, use the minimal one
#
# Build: the full CMake build when its dependencies (libcurl, jansson, OpenSSL dev files) are
# there; otherwise a minimal gcc build of the device layer, pool and file I/O with the GPU
# tests and the benchmark without its S3 rows (they need the whole library).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
mib=${GPU_CHECK_MIB:-1024}
log=/dev/null
if [ -n "${OUT:-}" ] && [ -d "${OUT}" ]; then log=$OUT/gpu-check.log; fi
exec > >(tee "$log") 2>&1
t_start=$(date +%s)
say() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - t_start ))"; }

say "machine"
uname -srm
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
df -hT "${TMPDIR:-/tmp}" | tail -1
nproc

# libcufile: system library path, the CUDA toolkit, or the nvidia-cufile Python wheel.
if ! ldconfig -p 2>/dev/null | grep -q 'libcufile\.so\.0'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 - 2>/dev/null <<'PY'
import importlib
for name in ("nvidia.cufile", "nvidia.cu13", "nvidia.cu12"):
    try:
        m = importlib.import_module(name)
    except Exception:
        continue
    for p in getattr(m, "__path__", []):
        print(p + "/lib")
PY
); do
    if [ -e "$d/libcufile.so.0" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "libcufile.so.0 from $d"
      break
    fi
  done
fi
lsmod 2>/dev/null | grep -q nvidia_fs && echo "nvidia-fs loaded (GDS mode)" ||
  echo "nvidia-fs not loaded: cuFile can only run in compatibility mode"

say "build"
full=0
if [ -z "${GPU_CHECK_MINIMAL:-}" ] && pkg-config --exists libcurl jansson openssl 2>/dev/null; then
  if timeout 240 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.cmake.log" 2>&1 &&
     timeout 240 cmake --build "$build" -j"$(nproc)" --target test_gpu_device test_gpu_fileio \
       bench_gpu >"$build.make.log" 2>&1; then
    full=1
    echo "full CMake build in $build"
  else
    echo "CMake build failed (tail of the logs below); trying the minimal build"
    tail -n 15 "$build.cmake.log" "$build.make.log" 2>/dev/null
  fi
else
  echo "pkg-config finds no libcurl/jansson/openssl dev files: minimal build"
fi
if [ $full -eq 0 ]; then
  mkdir -p "$build/tests/bin"
  # The engine's cancel token lives in client.c (needs libcurl): a stand-in for these tests.
  cat >"$build/cancel_stub.c" <<'EOF'
#include "s3direct/client.h"
int s3d_cancel_requested(const struct s3d_cancel *cancel) { return 0; }
EOF
  srcs="src/common/alloc.c src/common/crc32c.c src/common/dynbuf.c src/common/error.c
        src/common/log.c src/common/version.c src/device/cuda_dl.c src/device/cufile_dl.c
        src/device/device.c src/device/device_host.c src/engine/pool.c src/engine/fileio.c
        tests/lib/testutil.c $build/cancel_stub.c"
  cflags="-std=c11 -O2 -g -D_GNU_SOURCE -DS3D_TESTING=1 -Iinclude -Isrc -Itests/lib -pthread"
  ok=1
  for t in test_gpu_device test_gpu_fileio; do
    timeout 120 gcc $cflags -o "$build/tests/bin/$t" "tests/gpu/$t.c" $srcs -ldl || ok=0
  done
  timeout 120 gcc $cflags -DS3D_BENCH_NO_S3 -o "$build/tests/bin/bench_gpu" tests/gpu/bench_gpu.c \
    $srcs -ldl || ok=0
  [ $ok -eq 1 ] && echo "minimal build in $build" || echo "minimal build FAILED"
fi

say "GPU tests"
S3D_NO_PYTEST=1 S3D_TEST_TIMEOUT=120 tests/run-tests.sh "$build" test_gpu_
tests_rc=$?

say "S3 origin"
origin_root=${TMPDIR:-/tmp}/s3d-gpu-origin
mkdir -p "$origin_root"
origin_pid=
endpoint=
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  endpoint=$(timeout 20 scripts/nginx-origin.sh start "$origin_root" 8097 2>/dev/null | tail -1)
  [ -n "$endpoint" ] && echo "origin: nginx (scripts/nginx-origin.sh) at $endpoint"
fi
if [ -z "$endpoint" ]; then
  # A small threaded HTTP/1.1 server: GET/HEAD of ROOT/BUCKET/KEY with Range, sendfile,
  # signatures ignored. Good enough as a throughput origin, not for correctness tests.
  python3 - "$origin_root" 8098 <<'PY' &
import os, re, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
root = sys.argv[1]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def _serve(self, body):
        path = os.path.normpath(os.path.join(root, self.path.split("?")[0].lstrip("/")))
        if not path.startswith(root) or not os.path.isfile(path):
            msg = b"<Error><Code>NoSuchKey</Code><Message></Message></Error>"
            self.send_response(404); self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg))); self.end_headers()
            if body: self.wfile.write(msg)
            return
        size = os.path.getsize(path); start, end = 0, size - 1; status = 200
        m = re.match(r"bytes=(\d*)-(\d*)$", self.headers.get("Range", ""))
        if m:
            if m.group(1): start = int(m.group(1)); end = int(m.group(2)) if m.group(2) else size - 1
            else: start = max(0, size - int(m.group(2)))
            end = min(end, size - 1); status = 206
            if start > end:
                self.send_response(416); self.send_header("Content-Length", "0"); self.end_headers(); return
        self.send_response(status)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", '"%x-%x"' % (size, int(os.path.getmtime(path))))
        self.send_header("Last-Modified", self.date_time_string(os.path.getmtime(path)))
        if status == 206: self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if body:
            with open(path, "rb") as f:
                self.connection.sendfile(f, start, end - start + 1)
    def do_GET(self): self._serve(True)
    def do_HEAD(self): self._serve(False)
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
PY
  origin_pid=$!
  sleep 1
  endpoint=http://127.0.0.1:8098
  echo "origin: python ThreadingHTTPServer (sendfile) at $endpoint, pid $origin_pid"
fi

say "benchmark (${mib} MiB)"
if [ $full -eq 1 ]; then
  timeout 180 "$build/tests/bin/bench_gpu" --mib "$mib" --origin-root "$origin_root" \
    --endpoint "$endpoint"
else
  timeout 180 "$build/tests/bin/bench_gpu" --mib "$mib"
fi
bench_rc=$?

[ -n "$origin_pid" ] && kill "$origin_pid" 2>/dev/null
[ -z "$origin_pid" ] && scripts/nginx-origin.sh stop 8097 >/dev/null 2>&1
say "done: tests rc=$tests_rc, bench rc=$bench_rc"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
