#!/usr/bin/env bash
# gpu-check.sh [BUNDLE] - the one command a lent GPU machine runs (no compiler, no package
# registry, no network, no Ceph; minutes of device time). Everything it runs comes from the
# bundle that `make gpu-bundle` built on the CPU machine (default ./gpu-bundle):
#   0. glibc: the machine's against the newest GLIBC_ version the bundle needs (MANIFEST), one
#      line; an older glibc is refused at once (exit 3) rather than failing step by step;
#   1. the machine: GPU, driver, torch, nvidia-fs, the scratch disk;
#   2. the C tests of the device layer on the real driver (tests/bin: test_gpu_*, the CUDA-rule
#      tests against the fake driver);
#   3. a stdlib S3 origin (gpu/s3origin.py) on a real disk, and its read side in C
#      (gpu/s3origin_get, sendfile) on the same objects for the S3 -> GPU rates;
#   4. bench_gpu: pool H2D/D2H, file->GPU by cuFile, by O_DIRECT and buffered through the pool,
#      GPU->file, S3->GPU vs S3->host (again with cuFile's compatibility mode forced when
#      nvidia-fs makes GDS real);
#   5. gpu/gpu_check.py with PyTorch on cuda:0: byte-exact saves/loads (S3 and files),
#      load_into, save_async, stream ordering with side streams, fork after host-only work,
#      expandable segments, and the rates for a GPU_CHECK_GIB checkpoint.
# Writes $OUT/gpu-check.log, $OUT/gpu-check.json (PyTorch checks) and $OUT/summary.json (every
# step's status); exits non-zero when any check failed. Well under 5 minutes on an H200 host.
#
#   GPU_CHECK_GIB=4          checkpoint and file size for the rates (GiB)
#   GPU_CHECK_EMULATE=1      no GPU: the emulated device and host tensors (validates the bundle
#                            and this script on a CPU machine; .ci/run does it)
#   GPU_CHECK_SCRATCH=DIR    scratch folder (default: the first of /var/tmp, $PWD that is not
#                            tmpfs)
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$(cd "${1:-gpu-bundle}" 2>/dev/null && pwd) ||
  { echo "gpu-check: no bundle at ${1:-gpu-bundle}: run make gpu-bundle first" >&2; exit 2; }
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
exec > >(tee "$out/gpu-check.log") 2>&1

# Before anything else: can this machine's glibc run the bundle at all? The native set needs
# MANIFEST's newest GLIBC_ version; where the host's is older (or GPU_CHECK_GLIBC228=1), the
# set built for glibc 2.28 in g228/ (a whole bundle of its own) runs instead.
manifest_need() {
  sed -n 's/^newest glibc symbol version required: GLIBC_//p' "$1/MANIFEST" 2>/dev/null
}
older() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" != "$1" ]; }  # $2 < $1
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
need=$(manifest_need "$bundle")
set_name="native set"
glibc_refused() {
  echo "glibc: $*: refusing to run the bundle"
  printf '{"emulate": false, "seconds": 0, "failed": 1, "steps": [{"step": "glibc", "status": "fail", "detail": "%s"}]}\n' \
    "$*" >"$out/summary.json"
  exit 3
}
if [ -n "${GPU_CHECK_GLIBC228:-}" ] || { [ -n "$need" ] && [ -n "$have" ] && older "$need" "$have"; }; then
  if [ -f "$bundle/g228/MANIFEST" ]; then
    native_need=$need
    bundle=$bundle/g228
    need=$(manifest_need "$bundle")
    set_name="glibc 2.28 set (g228/${GPU_CHECK_GLIBC228:+, forced by GPU_CHECK_GLIBC228}${native_need:+; the native one needs $native_need})"
  fi
fi
if [ -z "$need" ] || [ -z "$have" ]; then
  glibc_refused "cannot tell (host glibc ${have:-unknown}, bundle needs ${need:-unknown}: no MANIFEST line)"
elif older "$need" "$have"; then
  glibc_refused "host glibc $have is older than the $need the bundle needs (build it where glibc <= $have)"
fi
echo "glibc: host $have, the $set_name needs $need or newer: ok"
emulate=${GPU_CHECK_EMULATE:-}
if [ -n "$emulate" ]; then gib=${GPU_CHECK_GIB:-0.25}; else gib=${GPU_CHECK_GIB:-4}; fi
t_start=$(date +%s)
say() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - t_start ))"; }
steps=("{\"step\": \"glibc\", \"status\": \"ok\", \"detail\": \"host $have, ${set_name%% (*} needs $need\"}")
step() {
  local d=${3:-}
  steps+=("{\"step\": \"$1\", \"status\": \"$2\", \"detail\": \"${d//\"/\'}\"}")
}

say "machine"
uname -srm
head -3 "$bundle/MANIFEST"
if [ -z "$emulate" ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
fi
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
nproc
scratch=${GPU_CHECK_SCRATCH:-}
if [ -z "$scratch" ]; then
  for d in /var/tmp "$PWD"; do
    [ "$(stat -f -c %T "$d" 2>/dev/null)" != tmpfs ] && { scratch=$d/s3d-gpu-check.$$; break; }
  done
fi
scratch=${scratch:-/var/tmp/s3d-gpu-check.$$}
mkdir -p "$scratch"
echo "scratch: $scratch ($(stat -f -c %T "$scratch"), $(df -h "$scratch" | awk 'NR==2 {print $4}') free)"
nvfs=0
if lsmod 2>/dev/null | grep -q nvidia_fs; then
  nvfs=1; echo "nvidia-fs loaded: cuFile can run as real GDS"
else
  echo "nvidia-fs not loaded: cuFile can only run in compatibility mode"
fi

say "libraries"
# The bundle's own libraries, and of its dependencies only those this machine lacks.
missing=$out/.deps
rm -rf "$missing" && mkdir -p "$missing"
known=$(ldconfig -p 2>/dev/null)
n=0
for f in "$bundle"/deps/*; do
  name=$(basename "$f")
  if ! grep -q "^[[:space:]]*$name " <<<"$known"; then ln -s "$f" "$missing/$name"; n=$((n + 1)); fi
done
echo "$n of $(ls "$bundle/deps" | wc -l) bundled libraries used (this machine lacks them)"
export LD_LIBRARY_PATH="$bundle/lib:$missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libcufile: system library path, the CUDA toolkit, or the nvidia-cufile Python wheel.
if ! grep -q 'libcufile\.so\.0' <<<"$known"; then
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

say "C tests"
fails=0
for t in "$bundle"/tests/bin/test_*; do
  name=$(basename "$t")
  timeout -k 5 120 "$t" >"$out/$name.log" 2>&1
  rc=$?
  case $rc in
    0) echo "PASS  $name"; step "$name" ok ;;
    77) echo "SKIP  $name: $(grep -m1 '^SKIP' "$out/$name.log" | cut -c7-)"; step "$name" skip ;;
    *) echo "FAIL  $name (exit $rc)"; tail -n 15 "$out/$name.log" | sed 's/^/      | /'
       step "$name" fail "exit $rc"; fails=$((fails + 1)) ;;
  esac
done

say "S3 origin"
python3 "$bundle/gpu/s3origin.py" "$scratch/origin" >"$out/origin.log" 2>&1 &
origin_pid=$!
endpoint=
for _ in $(seq 100); do
  endpoint=$(sed -n 's/^s3origin: //p' "$out/origin.log")
  [ -n "$endpoint" ] && break
  sleep 0.1
done
mkdir -p "$scratch/origin"
"$bundle/gpu/s3origin_get" "$scratch/origin" >"$out/origin-get.log" 2>&1 &
get_pid=$!
trap 'kill $origin_pid $get_pid 2>/dev/null; rm -rf "$scratch"' EXIT
if [ -z "$endpoint" ]; then
  echo "the origin did not start:"; cat "$out/origin.log"; step origin fail; fails=$((fails + 1))
else
  echo "origin at $endpoint (objects under $scratch/origin)"; step origin ok
fi
# The S3 -> GPU rates read from the C origin (sendfile), so that they measure the library.
get_endpoint=
for _ in $(seq 100); do
  get_endpoint=$(sed -n 's/^s3origin_get: //p' "$out/origin-get.log")
  [ -n "$get_endpoint" ] && break
  sleep 0.1
done
if [ -n "$get_endpoint" ]; then
  echo "read origin (C, sendfile) at $get_endpoint"; step origin_get ok
else
  echo "the C read origin did not start, rates against the Python one:"; cat "$out/origin-get.log"
  step origin_get fail; fails=$((fails + 1)); get_endpoint=$endpoint
fi

mib=$(python3 -c "print(int($gib * 1024))")
say "bench_gpu (${mib} MiB)"
bench_env=()
[ -n "$emulate" ] && bench_env=(S3D_BENCH_EMULATE=1)
if env "${bench_env[@]}" timeout -k 5 180 "$bundle/tests/bin/bench_gpu" --mib "$mib" \
    --dir "$scratch" --origin-root "$scratch/origin" --endpoint "$get_endpoint"; then
  step bench_gpu ok
else
  rc=$?; step bench_gpu "$([ $rc -eq 77 ] && echo skip || echo fail)" "exit $rc"
  [ $rc -ne 77 ] && fails=$((fails + 1))
fi
if [ $nvfs -eq 1 ] && [ -z "$emulate" ]; then
  say "bench_gpu with cuFile's compatibility mode forced (1024 MiB)"
  printf '{"properties": {"allow_compat_mode": true, "force_compat_mode": true}}\n' \
    >"$scratch/cufile-compat.json"
  CUFILE_ENV_PATH_JSON=$scratch/cufile-compat.json timeout -k 5 120 \
    "$bundle/tests/bin/bench_gpu" --mib 1024 --dir "$scratch" || step bench_gpu_compat fail
fi

say "PyTorch checks (gpu_check.py, ${gib} GiB rates)"
py_args=(--endpoint "$endpoint" --read-endpoint "$get_endpoint" --scratch "$scratch/py"
         --json "$out/gpu-check.json" --gib "$gib")
[ -n "$emulate" ] && py_args+=(--emulate)
if timeout -k 5 300 python3 "$bundle/gpu/gpu_check.py" "${py_args[@]}"; then
  step gpu_check ok
else
  step gpu_check fail "exit $?"; fails=$((fails + 1))
fi

say "done: $fails failed step(s)"
{
  printf '{"emulate": %s, "seconds": %s, "failed": %s, "steps": [' \
    "$([ -n "$emulate" ] && echo true || echo false)" "$(( $(date +%s) - t_start ))" "$fails"
  (IFS=,; printf '%s' "${steps[*]}")
  printf ']}\n'
} >"$out/summary.json"
[ $fails -eq 0 ]
