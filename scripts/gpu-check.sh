#!/usr/bin/env bash
# gpu-check.sh [BUNDLE] - the one command a lent GPU machine runs (no compiler, no package
# registry, no network, no Ceph; one device call of at most 600 s). Everything it runs comes
# from the bundle that `make gpu-bundle` built on the CPU machine (default ./gpu-bundle; the
# glibc 2.28 set, which runs on every host torch runs on). Steps, in this order, so that the
# figures that matter most come first:
#   glibc     the machine's against the newest GLIBC_ version the bundle needs (MANIFEST), one
#             line; an older glibc is refused at once (exit 3);
#   machine   GPU, driver, torch, nvidia-fs, the scratch disk; libraries: the CLI starts;
#   origin    a stdlib S3 origin (gpu/s3origin.py) and its read side in C (gpu/s3origin_get,
#             sendfile) on the same objects, on the scratch disk;
#   bench_s3  bench_gpu's S3 -> GPU and S3 -> host rows (read client warmed and its pool
#             pinned before the clock starts);
#   save_async_fence (GPU only) a long kernel queued right after save_async returns must not
#             delay its future (gpu_check.py --only save_async_fence);
#   gpu_check the PyTorch checks on cuda:0 and its rates, S3 ones first (gpu/gpu_check.py);
#   C tests   the device layer's C tests on the real driver (tests/bin), one step each;
#   bench_files  bench_gpu's pool and file rows, each saying which path ran;
#   bench_compat the file rows again with cuFile's compatibility mode forced (nvidia-fs only).
# One overall deadline, GPU_CHECK_DEADLINE_S (default 540 s from the start): each step's
# timeout is its own cap or what is left before the deadline (less a few seconds to write the
# summary), whichever is smaller; a step with too little left is recorded as "cut", and so is
# one its timeout stopped. $OUT/summary.json (every step so far, the one running, which were
# cut) is rewritten before and after every step, $OUT/bench.json gets one JSON line per bench
# row as it is measured and $OUT/gpu-check.json after every PyTorch check: a run killed from
# outside keeps what it measured. Exits non-zero when a step failed (a cut is not a failure).
#
#   GPU_CHECK_GIB=1          checkpoint and file size of the rates, GiB (1 by default; more
#                            is opt-in: mind the deadline)
#   GPU_CHECK_DEADLINE_S=540 seconds the whole run may take
#   GPU_CHECK_EMULATE=1      no GPU: the emulated device and host tensors (validates the bundle
#                            and this script on a CPU machine; .ci/run does it)
#   GPU_CHECK_SCRATCH=DIR    scratch folder (default: a new folder in the working folder, or
#                            in /var/tmp when that is tmpfs); TMPDIR points into it for every
#                            test, so no test writes to /tmp (tmpfs would quietly turn DIRECT
#                            rows into other ones)
set -uo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)
bundle=$(cd "${1:-gpu-bundle}" 2>/dev/null && pwd) ||
  { echo "gpu-check: no bundle at ${1:-gpu-bundle}: run make gpu-bundle first" >&2; exit 2; }
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
exec > >(tee "$out/gpu-check.log") 2>&1
emulate=${GPU_CHECK_EMULATE:-}
deadline_s=${GPU_CHECK_DEADLINE_S:-540}
reserve=5  # seconds kept for the last summary
if [ -n "$emulate" ]; then gib=${GPU_CHECK_GIB:-0.0625}; else gib=${GPU_CHECK_GIB:-1}; fi

# ---- the summary, rewritten before and after every step --------------------------------
steps=()
cut=()
fails=0
running=
json_esc() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '%s' "${s//$'\n'/ }"; }
summary() {
  local tmp=$out/summary.json.tmp c
  c=$(for n in "${cut[@]}"; do printf '"%s"\n' "$(json_esc "$n")"; done | paste -sd, -)
  {
    printf '{"emulate": %s, "deadline_s": %s, "seconds": %s, "failed": %s, ' \
      "$([ -n "$emulate" ] && echo true || echo false)" "$deadline_s" \
      "$(( $(date +%s) - t_start ))" "$fails"
    printf '"running": %s, "cut": [%s], "complete": %s, "steps": [' \
      "$([ -n "$running" ] && printf '"%s"' "$(json_esc "$running")" || echo null)" "$c" \
      "${1:-false}"
    (IFS=,; printf '%s' "${steps[*]}")
    printf ']}\n'
  } >"$tmp" && mv -f "$tmp" "$out/summary.json"
}
step() {  # step NAME STATUS [DETAIL] [SECONDS]
  steps+=("{\"step\": \"$(json_esc "$1")\", \"status\": \"$2\", \"detail\": \"$(json_esc "${3:-}")\", \"seconds\": ${4:-0}}")
  case $2 in fail) fails=$((fails + 1)) ;; cut) cut+=("$1") ;; esac
  running=
  summary
}
left() { echo $(( deadline_s - ($(date +%s) - t_start) - reserve )); }
say() { printf '\n== %s (%ss, %ss left)\n' "$*" "$(( $(date +%s) - t_start ))" "$(left)"; }
# run_step NAME CAP MIN CMD...: CMD under a timeout of min(CAP, what is left), its output in
# $OUT/NAME.log (and here too unless quiet=1); "cut" when less than MIN seconds are left or
# the timeout stopped it; 77 is a skip.
quiet=
run_step() {
  local name=$1 cap=$2 min=$3 l t0 rc
  shift 3
  l=$(left)
  if [ "$l" -lt "$min" ]; then
    echo "CUT   $name: ${l}s left of GPU_CHECK_DEADLINE_S=$deadline_s (needs ${min}s)"
    step "$name" cut "not started: ${l}s left"
    return 0
  fi
  [ "$l" -lt "$cap" ] && cap=$l
  running=$name
  summary
  t0=$(date +%s)
  if [ -n "$quiet" ]; then
    timeout -k 5 "$cap" "$@" >"$out/$name.log" 2>&1
    rc=$?
  else
    timeout -k 5 "$cap" "$@" 2>&1 | tee "$out/$name.log"
    rc=${PIPESTATUS[0]}
  fi
  local secs=$(( $(date +%s) - t0 ))
  case $rc in
    0) step "$name" ok "" "$secs" ;;
    77) step "$name" skip "$(grep -m1 '^SKIP' "$out/$name.log" 2>/dev/null | cut -c7-)" "$secs" ;;
    124|137) echo "CUT   $name: stopped by its ${cap}s timeout"
             step "$name" cut "stopped by its ${cap}s timeout" "$secs" ;;
    *) step "$name" fail "exit $rc" "$secs" ;;
  esac
  return 0
}

# ---- glibc, before anything else ---------------------------------------------------------
need=$(sed -n 's/^newest glibc symbol version required: GLIBC_//p' "$bundle/MANIFEST" 2>/dev/null)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
older() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" != "$1" ]; }  # $2 < $1
glibc_refused() {
  echo "glibc: $*: refusing to run the bundle"
  step glibc fail "$*"
  exit 3
}
if [ -z "$need" ] || [ -z "$have" ]; then
  glibc_refused "cannot tell (host glibc ${have:-unknown}, bundle needs ${need:-unknown}: no MANIFEST line)"
elif older "$need" "$have"; then
  glibc_refused "host glibc $have is older than the $need the bundle needs (build it where glibc <= $have)"
fi
echo "glibc: host $have, the bundle needs $need or newer: ok"
step glibc ok "host $have, bundle needs $need"

say "machine"
uname -srm
head -3 "$bundle/MANIFEST"
if [ -z "$emulate" ]; then
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
fi
timeout 60 python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
nproc
scratch=${GPU_CHECK_SCRATCH:-}
if [ -z "$scratch" ]; then
  for d in "$PWD" /var/tmp; do
    [ "$(stat -f -c %T "$d" 2>/dev/null)" != tmpfs ] && { scratch=$d/gpu-check-scratch.$$; break; }
  done
fi
scratch=${scratch:-/var/tmp/gpu-check-scratch.$$}
mkdir -p "$scratch/tmp"
export TMPDIR=$scratch/tmp
fstype=$(stat -f -c %T "$scratch")
echo "scratch: $scratch ($fstype, $(df -h "$scratch" | awk 'NR==2 {print $4}') free); TMPDIR=$TMPDIR"
nvfs=0
if lsmod 2>/dev/null | grep -q nvidia_fs; then
  nvfs=1; echo "nvidia-fs loaded: cuFile can run as real GDS"
else
  echo "nvidia-fs not loaded: cuFile can only run in compatibility mode"
fi
step machine ok "scratch on $fstype"

say "libraries"
# The bundle's own libraries, and of its dependencies only those this machine lacks (the
# glibc 2.28 set links libcurl, OpenSSL and jansson statically: deps/ is usually empty).
missing=$scratch/deps
mkdir -p "$missing"
known=$(ldconfig -p 2>/dev/null)
for f in "$bundle"/deps/*; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  grep -q "^[[:space:]]*$name " <<<"$known" || ln -s "$f" "$missing/$name"
done
export LD_LIBRARY_PATH="$bundle/lib:$missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libcufile: system library path, the CUDA toolkit, or the nvidia-cufile Python wheel.
if ! grep -q 'libcufile\.so\.0' <<<"$known"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(timeout 30 python3 - 2>/dev/null <<'PY'
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
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
      echo "libcufile.so.0 from $d"
      break
    fi
  done
fi
export S3D_LIBRARY=$bundle/lib/libs3direct.so
export PYTHONPATH=$bundle/python${PYTHONPATH:+:$PYTHONPATH}
export AWS_ACCESS_KEY_ID=gpucheck AWS_SECRET_ACCESS_KEY=gpucheck AWS_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
if "$bundle/bin/s3direct" --version; then step libraries ok; else
  step libraries fail "the CLI does not start"; fi

say "S3 origin"
mkdir -p "$scratch/origin"
python3 "$bundle/gpu/s3origin.py" "$scratch/origin" >"$out/origin.log" 2>&1 &
origin_pid=$!
"$bundle/gpu/s3origin_get" "$scratch/origin" >"$out/origin-get.log" 2>&1 &
get_pid=$!
trap 'kill $origin_pid $get_pid 2>/dev/null; rm -rf "$scratch"' EXIT
wait_line() {  # wait_line FILE PREFIX: the endpoint the origin printed, within 10 s
  local e=
  for _ in $(seq 100); do
    e=$(sed -n "s/^$2: //p" "$1")
    [ -n "$e" ] && break
    sleep 0.1
  done
  echo "$e"
}
endpoint=$(wait_line "$out/origin.log" s3origin)
get_endpoint=$(wait_line "$out/origin-get.log" s3origin_get)
if [ -z "$endpoint" ]; then
  echo "the origin did not start:"; cat "$out/origin.log"; step origin fail "did not start"
else
  echo "origin at $endpoint (objects under $scratch/origin)"; step origin ok
fi
# The S3 -> GPU rates read from the C origin (sendfile), so that they measure the library.
if [ -n "$get_endpoint" ]; then
  echo "read origin (C, sendfile) at $get_endpoint"; step origin_get ok
else
  echo "the C read origin did not start, rates against the Python one:"; cat "$out/origin-get.log"
  step origin_get fail "did not start"; get_endpoint=$endpoint
fi

mib=$(python3 -c "print(max(16, int($gib * 1024)))")
bench_env=()
[ -n "$emulate" ] && bench_env=(S3D_BENCH_EMULATE=1)
bench=(env "${bench_env[@]}" "$bundle/tests/bin/bench_gpu" --mib "$mib" --dir "$scratch"
       --json "$out/bench.json")
: >"$out/bench.json"

say "bench_s3: S3 -> GPU and S3 -> host (${mib} MiB)"
run_step bench_s3 150 20 "${bench[@]}" --rows s3 --origin-root "$scratch/origin" \
  --endpoint "$get_endpoint"

py_args=(--endpoint "$endpoint" --read-endpoint "$get_endpoint" --gib "$gib"
         --deadline "$(( t_start + deadline_s - reserve ))")
[ -n "$emulate" ] && py_args+=(--emulate)
if [ -z "$emulate" ]; then
  say "save_async fence (GPU)"
  run_step save_async_fence 90 30 python3 "$bundle/gpu/gpu_check.py" "${py_args[@]}" \
    --scratch "$scratch/py-fence" --json "$out/fence.json" --only save_async_fence
fi

say "PyTorch checks (gpu_check.py, ${gib} GiB rates)"
skip_fence=()
[ -z "$emulate" ] && skip_fence=(--skip save_async_fence)  # its own step above
run_step gpu_check 300 30 python3 "$bundle/gpu/gpu_check.py" "${py_args[@]}" \
  --scratch "$scratch/py" --json "$out/gpu-check.json" "${skip_fence[@]}"

say "C tests"
for t in "$bundle"/tests/bin/test_*; do
  name=$(basename "$t")
  quiet=1 run_step "$name" 120 15 "$t"
  case ${steps[-1]} in
    *'"status": "fail"'*) echo "FAIL  $name"; tail -n 15 "$out/$name.log" | sed 's/^/      | /' ;;
    *'"status": "ok"'*) echo "PASS  $name" ;;
    *'"status": "skip"'*) echo "SKIP  $name" ;;
  esac
done

say "bench_files: pool and file rows (${mib} MiB)"
run_step bench_files 150 20 "${bench[@]}" --rows file
if [ $nvfs -eq 1 ] && [ -z "$emulate" ]; then
  say "bench_compat: the file rows with cuFile's compatibility mode forced"
  printf '{"properties": {"allow_compat_mode": true, "force_compat_mode": true}}\n' \
    >"$scratch/cufile-compat.json"
  S3D_CUFILE_COMPAT=1 CUFILE_ENV_PATH_JSON=$scratch/cufile-compat.json \
    run_step bench_compat 120 20 "${bench[@]}" --rows file
fi

say "done: $fails failed step(s), ${#cut[@]} cut${cut[*]:+: ${cut[*]}}"
summary true
[ $fails -eq 0 ]
