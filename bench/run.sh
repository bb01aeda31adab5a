#!/usr/bin/env bash
# run.sh BUILD_DIR - `make bench`: GET and PUT of one large object, s3direct next to parallel
# curl, `aws s3 cp` and boto3, against the S3 server of the environment (AWS_ENDPOINT_URL and
# keys, as scripts/with-rgw.sh sets them) and GET against a private nginx serving the same
# bytes from a file (scripts/nginx-origin.sh). Prints a Markdown table (median GB/s with min
# and max, client CPU-seconds per GB) and the targets with PASS/MISS. Never part of the tests.
#
#   BENCH_RUNS=3        runs per client (the median is reported)
#   BENCH_SIZE=1G       object size (numfmt --from=iec: 256M, 1G, ...)
#   BENCH_NGINX_PORT=8090
#   BENCH_SKIP="aws boto3"   clients to leave out (s3direct-mem s3direct-null s3direct-file
#                       s3direct-put-mem s3direct-put-file curl8 aws boto3), e.g. for a quick run
#   BENCH_KEEP=DIR      also copy the raw results (results.tsv) and the table into DIR
#   BENCH_TIMEOUT=300   seconds before one client invocation is killed (counted as failed)
#   BENCH_CKPT_MIB=2048 size of the checkpoint for the tensor-pipeline section (BENCH_SKIP=ckpt
#                       leaves it out)
#   BENCH_ONLY="sweep peers path ranks incremental stream"  only the sweep (bench/sweep/),
#                       the peers side by side (bench/peers/), the simulated paths
#                       (bench/path/), many ranks loading one checkpoint (bench/ranks/),
#                       incremental saves (bench/incremental/) and/or tensors as they arrive
#                       (bench/stream/), in the order given; all six also run at the end of
#                       the full run. BENCH_ONLY=fsspec: s3direct.fs next to s3fs
#                       (bench/fsspec/), only when asked for
#                       (BENCH_SKIP="sweep peers path ranks incremental stream" leaves them out)
#
# How each client is measured:
#   s3direct-mem / -put-mem  bench/s3d_bench.c (s3direct-bench): the public API to and from a
#                 buffer touched in advance; wall and CPU time of each transfer in-process.
#   s3direct-null / -file    the CLI as a process: `cp` to /dev/null (stdout) and to a file
#                 on /dev/shm, `cp` of that file for PUT; wall time and the process's CPU.
#   curl8         8 `curl -r` processes in parallel into /dev/null (signed with --aws-sigv4
#                 for the S3 server, unsigned for nginx); CPU of all of them.
#   aws           `aws s3 cp` (default settings) to/from /dev/shm, as a process.
#   boto3         download_file / upload_file, default TransferConfig, timed in-process
#                 (interpreter start and imports not counted).
# Objects the run creates are deleted at the end; with radosgw-admin and CEPH_CONF at hand the
# server's garbage collection is run as well, because the memstore OSD keeps overwritten and
# deleted objects in RAM until it is.
set -uo pipefail
build=$(cd "${1:?usage: bench/run.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
runs=${BENCH_RUNS:-3}
size_arg=${BENCH_SIZE:-1G}
port=${BENCH_NGINX_PORT:-8090}
skip=" ${BENCH_SKIP:-} "
tmo=${BENCH_TIMEOUT:-300}
bytes=$(numfmt --from=iec "$size_arg") || { echo "bench: bad BENCH_SIZE $size_arg" >&2; exit 2; }
cli=$build/tools/s3direct
sbench=$build/tools/s3direct-bench
: "${AWS_ENDPOINT_URL:?bench: no S3 server in the environment (run it as: make bench)}"
rgw=$AWS_ENDPOINT_URL
for t in "$cli" "$sbench"; do
  [ -x "$t" ] || { echo "bench: $t is missing: build first (make build)" >&2; exit 1; }
done

work=$(mktemp -d /dev/shm/s3direct-bench.XXXXXX)
bucket=s3d-bench-$$-$(date +%s)
key=bench/object.bin
results=$work/results.tsv
: >"$results"
nginx_up=0

gc() {
  # Frees what overwrites and deletes left in the memstore OSD (it waits hours otherwise).
  if command -v radosgw-admin >/dev/null && [ -n "${CEPH_CONF:-}" ]; then
    timeout 120 radosgw-admin -c "$CEPH_CONF" gc process --include-all >/dev/null 2>&1 || true
  fi
}
cleanup() {
  [ $nginx_up -eq 1 ] && "$root/scripts/nginx-origin.sh" stop "$port"
  [ -n "${tls_dir:-}" ] && "$here/peers/tls-front.sh" stop "$tls_dir" >/dev/null 2>&1
  AWS_ENDPOINT_URL=$rgw aws s3 rb "s3://$bucket" --force >/dev/null 2>&1
  gc
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

skipped() { [[ "$skip" == *" $1 "* ]]; }
say() { printf '%s\n' "$*" >&2; }

# record SCENARIO TOOL SECONDS CPU
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$bytes" >>"$results"
  if [ "$3" = FAIL ]; then
    say "  $(printf '%-10s %-18s' "$1" "$2") FAILED"
  else
    say "  $(printf '%-10s %-18s %6.3f GB/s  %5.2f CPU-s/GB' "$1" "$2" \
      "$(echo "$bytes / 1000000000 / $3" | bc -l)" "$(echo "$4 * 1000000000 / $bytes" | bc -l)")"
  fi
}

# timed SCENARIO TOOL CMD... : runs CMD $runs times as a process; wall clock from the shell,
# CPU (user+sys of CMD and its children) from /usr/bin/time. Removes $work/dl.bin after each.
timed() {
  local scen=$1 tool=$2 i t0 t1 u s
  shift 2
  skipped "$tool" && return 0
  for ((i = 0; i < runs; i++)); do
    rm -f "$work/dl.bin"
    t0=$EPOCHREALTIME
    if /usr/bin/time -f '%U %S' -o "$work/time" timeout -k 5 "$tmo" "$@" \
      >"$work/out" 2>"$work/err"; then
      t1=$EPOCHREALTIME
      read -r u s < <(tail -n 1 "$work/time")
      record "$scen" "$tool" "$(echo "$t1 - $t0" | bc -l)" "$(echo "$u + $s" | bc -l)"
    else
      record "$scen" "$tool" FAIL 0
      tail -n 3 "$work/err" | sed 's/^/    | /' >&2
    fi
    rm -f "$work/dl.bin"
    [ -n "${after_run:-}" ] && $after_run
  done
  return 0
}

# inproc SCENARIO TOOL CMD... : CMD (given "--runs N" appended) runs the transfers itself and
# prints "run I seconds S cpu C bytes B" per run. With $after_run set, CMD runs once per run
# (--runs 1) and $after_run between.
inproc() {
  local scen=$1 tool=$2 n=0 i w s c
  shift 2
  skipped "$tool" && return 0
  : >"$work/out"
  if [ -n "${after_run:-}" ]; then
    for ((i = 0; i < runs; i++)); do
      timeout -k 5 "$tmo" "$@" --runs 1 >>"$work/out" 2>"$work/err"
      $after_run
    done
  else
    timeout -k 5 "$tmo" "$@" --runs "$runs" >"$work/out" 2>"$work/err"
  fi
  while read -r w _ _ s _ c _; do
    [ "$w" = run ] || continue
    record "$scen" "$tool" "$s" "$c"
    n=$((n + 1))
  done <"$work/out"
  if [ $n -lt "$runs" ]; then
    for ((; n < runs; n++)); do record "$scen" "$tool" FAIL 0; done
    tail -n 3 "$work/err" | sed 's/^/    | /' >&2
  fi
  return 0
}

# The peers side by side (issue 13): s3direct's tensor workloads next to s3torchconnector,
# runai-model-streamer, tensorizer, boto3, s3fs and parallel curl, each in its own process,
# over http and then over https (nginx terminating TLS in front of the same server). Writes
# rows-*.json, table-*.md and charts into $peers_out. BENCH_SKIP=peers leaves it out.
peers_out=${BENCH_KEEP:-$work}/peers
tls_dir=$work/tls-front
tls_port=${BENCH_TLS_PORT:-8443}
# Each protocol's run starts on a freshly started server of ours (one scripts/with-rgw.sh
# started at $RGW_BASE; a server elsewhere is left alone): the memstore OSD's allocator keeps
# much of what deleted objects freed (6.3 GB held with an empty store after the http runs of
# 2026-12-03 12:55), and the https run on top of that met the OOM killer (OSD at 15 GB).
fresh_server() {
  [ -n "${RGW_BASE:-}" ] && [ -f "$RGW_BASE/env" ] &&
    [ "${CEPH_CONF:-}" = "$RGW_BASE/ceph.conf" ] || return 0
  say "bench: restarting the S3 server at $RGW_BASE with an empty store"
  "$root/scripts/stop-rgw.sh" --purge >/dev/null 2>&1
  if ! RGW_SKIP_APT=1 "$root/scripts/start-rgw.sh" >"$work/rgw-restart.log" 2>&1; then
    cat "$work/rgw-restart.log" >&2
    return 1
  fi
}
# PEERS_PROTOCOLS="http https" (default): which of the two runs to make.
run_peers() {
  local rc=0 protos=" ${PEERS_PROTOCOLS:-http https} "
  if [[ "$protos" == *" http "* ]]; then
    fresh_server || return 1
    say "Peers side by side over http ($rgw), results in $peers_out"
    "$here/peers/run.sh" "$build" "$peers_out" || rc=1
    gc
  fi
  if [[ "$protos" != *" https "* ]]; then
    return $rc
  fi
  fresh_server || return 1
  if "$here/peers/tls-front.sh" start "$rgw" "$tls_port" "$tls_dir"; then
    say "Peers side by side over https (nginx TLS on :$tls_port in front of $rgw)"
    # botocore >= 1.36 sends aws-chunked bodies with a trailing checksum over https, which RGW
    # 16 refuses (MissingContentLength): when_required is what users of such servers set.
    AWS_REQUEST_CHECKSUM_CALCULATION=when_required \
    AWS_ENDPOINT_URL=https://127.0.0.1:$tls_port AWS_CA_BUNDLE=$tls_dir/cert.pem \
      SSL_CERT_FILE=$tls_dir/cert.pem CURL_CA_BUNDLE=$tls_dir/cert.pem \
      REQUESTS_CA_BUNDLE=$tls_dir/cert.pem PEERS_LABEL=https \
      "$here/peers/run.sh" "$build" "$peers_out" || rc=1
    "$here/peers/tls-front.sh" stop "$tls_dir"
  else
    say "bench: nginx TLS front could not be started; https peers skipped"
  fi
  gc
  return $rc
}
# The sweep of s3direct's own cost (issue 13, section 3): checkpoint size, tensor count,
# concurrency and part size, each point in its own process; rows, table and charts into
# $sweep_out. BENCH_SKIP=sweep leaves it out.
sweep_out=${BENCH_KEEP:-$work}/sweep
run_sweep() {
  local rc=0
  say "Sweep of s3direct's cost (size, tensor count, concurrency, part size), results in $sweep_out"
  "$here/sweep/run.sh" "$build" "$sweep_out" || rc=1
  gc
  return $rc
}
# The path part (issue 19): s3direct at its defaults and at fixed concurrencies next to the
# peers at their defaults, through bench/pathsim.c on simulated paths (PATH_PATHS, default
# 12M:15,40M:5,loopback: rate per connection : delay in ms) and on loopback; rows, table and
# chart into $path_out. PATH_GIB (0.5), PATH_ROUNDS (3), PATH_TOOLS, PATH_WORKLOADS.
path_out=${BENCH_KEEP:-$work}/path
run_path() {
  local py
  fresh_server || return 1
  py=$("$here/peers/setup.sh") || return 1
  say "Path benchmark (simulated paths through $build/bench/s3d-pathsim), results in $path_out"
  PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} S3D_BUILD_DIR=$build \
    "$py" "$here/path/run.py" --cli "$build/tools/s3direct" --pathsim "$build/bench/s3d-pathsim" \
    --out "$path_out" --gib "${PATH_GIB:-0.5}" --rounds "${PATH_ROUNDS:-3}" \
    --paths "${PATH_PATHS:-12M:15,40M:5,loopback}" \
    ${PATH_TOOLS:+--tools "$PATH_TOOLS"} ${PATH_WORKLOADS:+--workloads "$PATH_WORKLOADS"}
  local rc=$?
  gc
  return $rc
}
# The ranks part (issue 22): W gloo ranks loading one checkpoint, each on its own or once for
# the group (load(group=)), through s3d-pathsim as a counting relay; RANKS_GIB (1),
# RANKS_WORLDS (1,2,4,8), RANKS_ROUNDS (2). Rows, table and chart into $ranks_out.
ranks_out=${BENCH_KEEP:-$work}/ranks
run_ranks() {
  local rc=0 py
  fresh_server || return 1
  py=$("$here/peers/setup.sh") || return 1  # a Python with torch and matplotlib
  say "Ranks benchmark (one checkpoint, 1-8 gloo ranks), results in $ranks_out"
  PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} S3D_BUILD_DIR=$build \
    "$py" "$here/ranks/run.py" --pathsim "$build/bench/s3d-pathsim" --out "$ranks_out" \
    --gib "${RANKS_GIB:-1}" --worlds "${RANKS_WORLDS:-1,2,4,8}" --rounds "${RANKS_ROUNDS:-2}" \
    || rc=1
  gc
  return $rc
}
# The incremental part (issue 33): save(state, uri, base=previous) next to a full save and
# s3torchconnector's writer, 0/1/10/50/100 % of a llama state's tensors changed and a LoRA
# step, on loopback and through s3d-pathsim; INCR_SIZE (2G), INCR_DTYPE (bf16), INCR_ROUNDS
# (3), INCR_PATHS (12M:15,loopback), INCR_CASES, INCR_TOOLS. Table, rows and chart into
# $incr_out (docs/bench unless INCR_OUT is set).
incr_out=${INCR_OUT:-$root/docs/bench}
run_incremental() {
  local rc=0 py
  fresh_server || return 1
  py=$("$here/peers/setup.sh") || return 1  # s3torchconnector and matplotlib
  say "Incremental saves (base=, issue 33), results in $incr_out"
  PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} S3D_BUILD_DIR=$build \
    "$py" "$here/incremental/run.py" --pathsim "$build/bench/s3d-pathsim" --out "$incr_out" \
    --size "${INCR_SIZE:-2G}" --dtype "${INCR_DTYPE:-bf16}" --rounds "${INCR_ROUNDS:-3}" \
    --paths "${INCR_PATHS:-12M:15,loopback}" \
    ${INCR_CASES:+--cases "$INCR_CASES"} ${INCR_TOOLS:+--tools "$INCR_TOOLS"} || rc=1
  gc
  return $rc
}
# The stream part (issue 36): s3direct.stream() with a pass per tensor as it arrives against
# load-then-pass, next to runai-model-streamer's streamer and safetensors' safe_open after a
# boto3 download, on loopback and through s3d-pathsim; STREAM_GIB (2), STREAM_ROUNDS (3),
# STREAM_PATHS (12M:15,loopback), STREAM_TOOLS. Rows, table and chart into $stream_out.
stream_out=${BENCH_KEEP:-$work}/stream
run_stream() {
  local rc=0 py
  fresh_server || return 1
  py=$("$here/peers/setup.sh") || return 1  # runai-model-streamer and matplotlib
  say "Stream benchmark (tensors as they arrive, issue 36), results in $stream_out"
  PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} S3D_BUILD_DIR=$build \
    "$py" "$here/stream/run.py" --cli "$build/tools/s3direct" \
    --pathsim "$build/bench/s3d-pathsim" --out "$stream_out" --gib "${STREAM_GIB:-2}" \
    --rounds "${STREAM_ROUNDS:-3}" --paths "${STREAM_PATHS:-12M:15,loopback}" \
    ${STREAM_TOOLS:+--tools "$STREAM_TOOLS"} || rc=1
  gc
  return $rc
}
# The fsspec part (issue 37): s3direct.fs next to s3fs on the same objects (cat, read, get,
# put, write, pandas parquet), fresh processes, FSSPEC_MIB (512), FSSPEC_ROUNDS (3), FSSPEC_OPS.
# Only with BENCH_ONLY=fsspec. Rows and table into $fsspec_out.
fsspec_out=${BENCH_KEEP:-$work}/fsspec
run_fsspec() {
  local rc=0
  fresh_server || return 1
  say "fsspec benchmark (s3direct.fs and s3fs, issue 37), results in $fsspec_out"
  PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} S3D_BUILD_DIR=$build \
    python3 "$here/fsspec/run.py" --out "$fsspec_out" --mib "${FSSPEC_MIB:-512}" \
    --rounds "${FSSPEC_ROUNDS:-3}" ${FSSPEC_OPS:+--ops "$FSSPEC_OPS"} || rc=1
  gc
  return $rc
}
# BENCH_ONLY="sweep", "peers", "path", "ranks", "incremental", "stream", "fsspec" or several:
# only those parts, in that order.
if [ -n "${BENCH_ONLY:-}" ]; then
  rc=0
  for part in $BENCH_ONLY; do
    case $part in
      sweep) run_sweep || rc=1 ;;
      peers) run_peers || rc=1 ;;
      path) run_path || rc=1 ;;
      ranks) run_ranks || rc=1 ;;
      incremental) run_incremental || rc=1 ;;
      stream) run_stream || rc=1 ;;
      fsspec) run_fsspec || rc=1 ;;
      *) say "bench: BENCH_ONLY=$part: not a part (sweep, peers, path, ranks, incremental," \
          "stream, fsspec)"
        exit 2 ;;
    esac
  done
  exit $rc
fi

say "bench: $size_arg object ($bytes bytes), $runs runs per client, server $rgw, work in $work"
say "bench: load before the run: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the numbers)"
head -c "$bytes" /dev/urandom >"$work/src.bin" || exit 1
aws s3 mb "s3://$bucket" >/dev/null || { say "bench: cannot create bucket $bucket"; exit 1; }
aws s3 cp --quiet "$work/src.bin" "s3://$bucket/$key" || { say "bench: setup upload failed"; exit 1; }

# One untimed download, compared byte for byte: a fast wrong answer is no result.
if "$cli" cp -q --no-progress "s3://$bucket/$key" "$work/dl.bin" 2>"$work/err" &&
   cmp -s "$work/src.bin" "$work/dl.bin"; then
  say "bench: s3direct download verified (identical bytes)"
else
  say "bench: s3direct download did not return the uploaded bytes: $(tail -n 1 "$work/err")"
fi
rm -f "$work/dl.bin"

export CURL_SIGV4_REGION=${AWS_DEFAULT_REGION:-us-east-1}
get_phase() { # SCENARIO ENDPOINT SIGNED
  local scen=$1 ep=$2 signed=$3
  AWS_ENDPOINT_URL=$ep inproc "$scen" s3direct-mem "$sbench" get "$bucket" "$key"
  timed "$scen" s3direct-null "$cli" cp -q --no-progress --endpoint-url "$ep" \
    "s3://$bucket/$key" /dev/null
  timed "$scen" s3direct-file "$cli" cp -q --no-progress --endpoint-url "$ep" \
    "s3://$bucket/$key" "$work/dl.bin"
  if [ "$signed" = 1 ]; then
    CURL_SIGV4_KEY=$AWS_ACCESS_KEY_ID CURL_SIGV4_SECRET=$AWS_SECRET_ACCESS_KEY \
      timed "$scen" curl8 "$here/curl_ranges.sh" "$ep/$bucket/$key" "$bytes" 8
  else
    timed "$scen" curl8 "$here/curl_ranges.sh" "$ep/$bucket/$key" "$bytes" 8
  fi
  timed "$scen" aws aws s3 cp --quiet --endpoint-url "$ep" "s3://$bucket/$key" "$work/dl.bin"
  inproc "$scen" boto3 python3 "$here/boto3_xfer.py" get "$bucket" "$key" "$work/dl.bin" \
    --endpoint-url "$ep"
}

say "GET from the S3 server ($rgw)"
get_phase "GET rgw" "$rgw" 1

mkdir -p "$work/origin/$bucket/$(dirname "$key")"
ln "$work/src.bin" "$work/origin/$bucket/$key"
if nginx_url=$("$root/scripts/nginx-origin.sh" start "$work/origin" "$port"); then
  nginx_up=1
  say "GET from nginx ($nginx_url, the same bytes from a file)"
  get_phase "GET nginx" "$nginx_url" 0
  "$root/scripts/nginx-origin.sh" stop "$port"
  nginx_up=0
else
  say "bench: nginx could not be started; GET nginx skipped"
fi

# PUT: every client writes its own key; each overwrite leaves garbage in the memstore OSD, so
# the server's garbage collection runs after every run (untimed).
aws s3 rm --quiet "s3://$bucket/$key"
gc
# The shared development server may have been restarted meanwhile (its state is wiped then).
if ! aws s3api head-bucket --bucket "$bucket" >/dev/null 2>&1; then
  say "bench: bucket $bucket is gone (server restarted?); creating it again"
  aws s3 mb "s3://$bucket" >/dev/null || exit 1
fi
say "PUT to the S3 server ($rgw)"
after_run=gc
inproc "PUT rgw" s3direct-put-mem "$sbench" put "$bucket" bench/put-mem.bin --size "$bytes"
# The same with the payload left unsigned (s3 payload_signing_enabled = false, read from the
# config file as the AWS CLI reads it): the SHA-256 of every byte is the client's main PUT
# cost over plain http on this CPU, which has no SHA instructions.
printf '[default]\ns3 =\n  payload_signing_enabled = false\n' >"$work/unsigned.cfg"
AWS_CONFIG_FILE=$work/unsigned.cfg inproc "PUT rgw" s3direct-put-unsigned "$sbench" put \
  "$bucket" bench/put-unsigned.bin --size "$bytes"
timed "PUT rgw" s3direct-put-file "$cli" cp -q --no-progress "$work/src.bin" \
  "s3://$bucket/bench/put-file.bin"
timed "PUT rgw" aws aws s3 cp --quiet "$work/src.bin" "s3://$bucket/bench/put-aws.bin"
inproc "PUT rgw" boto3 python3 "$here/boto3_xfer.py" put "$bucket" bench/put-boto3.bin \
  "$work/src.bin"
after_run=

# The tensor pipeline against the engine's own byte transfers, same bytes (2 GiB by default).
ckpt_out=$work/ckpt.md
if ! skipped ckpt && [ -x "$build/tools/s3direct-ckpt-bench" ]; then
  say "Checkpoint load/save against raw GET/PUT of the same bytes (${BENCH_CKPT_MIB:-2048} MiB)"
  # The PUT objects above would leave too little room in the RAM-backed OSD.
  aws s3 rm --quiet --recursive "s3://$bucket/bench/" >/dev/null 2>&1
  gc
  timeout -k 5 $((tmo * 4)) "$build/tools/s3direct-ckpt-bench" "$bucket" \
    "${BENCH_CKPT_MIB:-2048}" "$runs" >"$ckpt_out" 2>"$work/err" ||
    { say "bench: checkpoint bench failed: $(tail -n 1 "$work/err")"; : >"$ckpt_out"; }
fi

echo
python3 "$here/report.py" "$results" "$size_arg" | tee "$work/table.md"
if [ -s "$ckpt_out" ]; then
  echo
  tee -a "$work/table.md" <"$ckpt_out"
fi
if [ -n "${BENCH_KEEP:-}" ]; then
  mkdir -p "$BENCH_KEEP" && cp "$results" "$work/table.md" "$BENCH_KEEP/"
fi
aws s3 rb --force "s3://$bucket" >/dev/null 2>&1  # room in the RAM-backed OSD
gc
if ! skipped sweep; then
  echo
  run_sweep
fi
if ! skipped peers; then
  echo
  run_peers
fi
if ! skipped path; then
  echo
  run_path
fi
if ! skipped ranks; then
  echo
  run_ranks
fi
if ! skipped incremental; then
  echo
  run_incremental
fi
if ! skipped stream; then
  echo
  run_stream
fi
