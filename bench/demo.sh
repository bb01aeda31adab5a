#!/usr/bin/env bash
# demo.sh BUILD_DIR - `make demo`: what s3direct does, on the S3 server of the environment
# (scripts/with-rgw.sh provides one).
#
#   Part 1, bytes: a 1 GiB file of random data (on /dev/shm) is uploaded and downloaded with
#   the s3direct CLI, checked with sha256, and the same is done with `aws s3 cp` for scale.
#   Part 2, tensors: bench/demo_tensors.py when it exists (the PyTorch pipeline).
#
#   DEMO_SIZE=1G   size of the object (numfmt --from=iec)
# Everything the demo creates (bucket, objects, files) is removed at the end.
set -uo pipefail
build=$(cd "${1:?usage: bench/demo.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
size_arg=${DEMO_SIZE:-1G}
bytes=$(numfmt --from=iec "$size_arg") || { echo "demo: bad DEMO_SIZE $size_arg" >&2; exit 2; }
cli=$build/tools/s3direct
: "${AWS_ENDPOINT_URL:?demo: no S3 server in the environment (run it as: make demo)}"
[ -x "$cli" ] || { echo "demo: $cli is missing: build first (make build)" >&2; exit 1; }

work=$(mktemp -d /dev/shm/s3direct-demo.XXXXXX)
bucket=s3d-demo-$$-$(date +%s)
failed=0
cleanup() {
  "$cli" rm -q --recursive "s3://$bucket" >/dev/null 2>&1
  "$cli" rb -q "s3://$bucket" >/dev/null 2>&1 || aws s3 rb --force "s3://$bucket" >/dev/null 2>&1
  if command -v radosgw-admin >/dev/null && [ -n "${CEPH_CONF:-}" ]; then
    # the memstore server keeps deleted data in RAM until its garbage collection runs
    timeout 120 radosgw-admin -c "$CEPH_CONF" gc process --include-all >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }
# run_timed LABEL CMD... : runs CMD, prints its wall time and the rate for $bytes.
run_timed() {
  local label=$1 t0 t1 secs
  shift
  t0=$EPOCHREALTIME
  if ! "$@"; then
    echo "   $label: FAILED"
    failed=1
    return 1
  fi
  t1=$EPOCHREALTIME
  secs=$(echo "$t1 - $t0" | bc -l)
  printf '   %-34s %6.2f s  %6.3f GB/s\n' "$label" "$secs" "$(echo "$bytes / 1000000000 / $secs" | bc -l)"
  echo "$secs" >"$work/last.secs"
}

echo "s3direct demo: $("$cli" --version)"
echo "server: $AWS_ENDPOINT_URL   bucket: $bucket   object: $size_arg ($bytes bytes)"

# ---- part 1: bytes ----------------------------------------------------------------------
step "1. $size_arg of random data on /dev/shm"
head -c "$bytes" /dev/urandom >"$work/data.bin" || exit 1
sum=$(sha256sum "$work/data.bin" | cut -d' ' -f1)
echo "   sha256 $sum"

step "2. create the bucket"
"$cli" mb "s3://$bucket" || exit 1

step "3. upload and download with s3direct (parallel multipart PUT, parallel ranged GETs)"
run_timed "s3direct cp (upload)" "$cli" cp -q "$work/data.bin" "s3://$bucket/demo/data.bin"
"$cli" stat "s3://$bucket/demo/data.bin" | sed 's/^/   /'
run_timed "s3direct cp (download)" "$cli" cp -q "s3://$bucket/demo/data.bin" "$work/back.bin"

step "4. verify"
back=$(sha256sum "$work/back.bin" 2>/dev/null | cut -d' ' -f1)
if [ "$back" = "$sum" ]; then
  echo "   sha256 equal: the downloaded bytes are the uploaded bytes"
else
  echo "   sha256 DIFFERENT: ${back:-no file}"
  failed=1
fi
rm -f "$work/back.bin"

step "5. what is in the bucket"
"$cli" ls --recursive --human-readable --summarize "s3://$bucket/" | sed 's/^/   /'
"$cli" rm "s3://$bucket/demo/data.bin" | sed 's/^/   /'

step "6. the same bytes with aws s3 cp, for scale"
run_timed "aws s3 cp (upload)" aws s3 cp --quiet "$work/data.bin" "s3://$bucket/demo/aws.bin"
run_timed "aws s3 cp (download)" aws s3 cp --quiet "s3://$bucket/demo/aws.bin" "$work/back.bin"
rm -f "$work/back.bin" "$work/data.bin"
"$cli" rm -q "s3://$bucket/demo/aws.bin"

# ---- part 2: tensors (PyTorch -> safetensors on S3 -> back), written by the Python layer ---
if [ -f "$here/demo_tensors.py" ]; then
  step "7. tensors (bench/demo_tensors.py)"
  S3D_BUILD_DIR=$build S3D_DEMO_BUCKET=$bucket PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
    python3 "$here/demo_tensors.py" "$build" || failed=1
fi

echo
if [ $failed -eq 0 ]; then echo "demo: OK"; else echo "demo: FAILED"; fi
exit $failed
