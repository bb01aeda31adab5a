#!/usr/bin/env bash
# test-aarch64.sh - the library and its C unit tests cross-built for aarch64 (the Grace Hopper
# nodes) and run under qemu-user (make test-aarch64; issue 24). zig cc -target
# aarch64-linux-gnu.2.28 builds the static set of scripts/build-glibc228.sh for aarch64
# (build/g228-aarch64), then the unit tests against it (S3D_STATIC_DEPS, -Werror), which run
# under qemu-aarch64 with Debian's aarch64 glibc (libc6-arm64-cross) as the loader's root.
# The tests that need a server, a GPU or more skip themselves (77), as in `make test-unit`.
# qemu-aarch64's default CPU has ARMv8's CRC32 instructions, so test_crc32c checks the
# armv8 path of src/common/crc32c.c against the table.
# Needs: ziglang, dpkg-dev and a deb-src line (as build-glibc228.sh), qemu-user,
# libc6-arm64-cross (apt-get install qemu-user libc6-arm64-cross).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/g228-aarch64
sysroot=/usr/aarch64-linux-gnu
command -v qemu-aarch64 >/dev/null 2>&1 && [ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || {
  echo "test-aarch64: needs qemu-aarch64 and $sysroot (apt-get install qemu-user" \
    "libc6-arm64-cross)" >&2
  exit 1
}
t0=$(date +%s)
S3D_G228_ARCH=aarch64 scripts/build-glibc228.sh "$out" deps
g=$(cd "$out" && pwd)
b=$g/build
PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR=$g/prefix/lib/pkgconfig \
  cmake -S . -B "$b" -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_C_COMPILER="$g/bin/zcc" -DCMAKE_AR="$g/bin/zar" -DCMAKE_RANLIB="$g/bin/zranlib" \
  -DCMAKE_PREFIX_PATH="$g/prefix" -DOPENSSL_ROOT_DIR="$g/prefix" -DS3D_STATIC_DEPS=ON \
  -DS3D_WERROR=ON -DCMAKE_C_FLAGS= -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# The unit tests: every test_* of tests/unit/*.cmake (st_tool there is a helper, not a test).
tests=$(sed -n 's/^s3d_test(\(test_[a-z0-9_]*\) .*/\1/p' tests/unit/*.cmake)
cmake --build "$b" -j"$(nproc)" --target s3direct $tests >/dev/null
# Built but not run: they check what qemu-user does not emulate. Its madvise() returns
# success and does nothing (MADV_DONTFORK: test_pool's child must fault; MADV_POPULATE_WRITE:
# test_prefault counts resident pages), and it cannot execve an aarch64 program without
# binfmt_misc (test_cuda_fake and test_cufile_compat re-execute /proc/self/exe).
not_under_qemu=" test_pool test_prefault test_cuda_fake test_cufile_compat "
echo "test-aarch64: built in $(($(date +%s) - t0))s: $(file -bL "$b/libs3direct.so" | cut -d, -f1-2)"
pass=0 skip=0 fail=0 notrun=0
for t in $tests; do
  if [[ "$not_under_qemu" == *" $t "* ]]; then
    notrun=$((notrun + 1))
    continue
  fi
  set +e
  env -u AWS_ENDPOINT_URL timeout 600 qemu-aarch64 -L "$sysroot" "$b/tests/bin/$t" \
    >"$b/$t.log" 2>&1
  rc=$?
  set -e
  case $rc in
    0) pass=$((pass + 1)) ;;
    77) skip=$((skip + 1)) ;;
    *) fail=$((fail + 1)); echo "FAIL $t (exit $rc):"; tail -n 5 "$b/$t.log" ;;
  esac
done
grep -h '^implementation:' "$b/test_crc32c.log" | sed 's/^/test_crc32c /'
echo "test-aarch64: $pass passed, $fail failed, $skip skipped, $notrun not run under qemu" \
  "($(($(date +%s) - t0))s)"
[ "$fail" = 0 ]
