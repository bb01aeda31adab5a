#!/usr/bin/env bash
# gpu-bundle.sh [BUILD_DIR] [OUT_DIR] - everything the GPU proof runs on a lent GPU machine
# (no compiler, no package registry, no network, no Ceph), built here on the CPU machine into
# OUT_DIR (default gpu-bundle/, ignored by git; carried to the machine by the device tool).
# One set: the glibc 2.28 build (scripts/build-glibc228.sh: zig cc, libcurl with OpenSSL and
# jansson linked statically), which runs on every host the native build does and on older ones
# (torch's floor is glibc 2.28), so one bundle serves every host; at most 40 MiB, checked here
# (the device tool carries 64 MiB in all). S3D_GLIBC228=0 bundles BUILD_DIR (default build)
# as it is instead, with the shared libraries it loads in deps/: for tests on this machine.
#   lib/       libs3direct.so
#   bin/       the CLI
#   tests/bin/ the GPU tests and benchmark (test_gpu_*, bench_gpu) and the CUDA-rule tests
#   tests/fakecuda/ the stand-in libcuda/libcufile that test_cuda_fake and test_cuda_rules find
#              through their run path $ORIGIN/../fakecuda (no absolute path into this build)
#   python/    the s3direct package (pure Python over ctypes: any CPython 3.9+)
#   gpu/       s3origin.py (a stdlib S3 origin), s3origin_get (its read side in C, sendfile:
#              the origin of the S3 -> GPU rates) and gpu_check.py (the PyTorch checks)
#   deps/      every shared library those load, except glibc's own and the C library itself
#              (empty for the 2.28 set, which links its dependencies statically);
#              scripts/gpu-check.sh puts on the library path only those the GPU machine's
#              ldconfig does not know
#   LICENSE, NOTICE, THIRD_PARTY_LICENSES   s3direct's licence and the notices of what the
#              2.28 set links statically (as the wheel carries them)
#   licenses/  the Debian copyright file of each package a library in deps/ comes from, and
#              PACKAGES: which library came from which package (only with deps/)
#   MANIFEST   commit, build date, glibc symbol versions required, sizes and sha256 of files
# Then `scripts/gpu-check.sh` (which finds the bundle) is the one command to run there.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-gpu-bundle}
strip_bins=
if [ "${S3D_GLIBC228:-1}" != 0 ]; then
  t0=$(date +%s)
  scripts/build-glibc228.sh build/g228
  echo "gpu-bundle: the glibc 2.28 set built in $(( $(date +%s) - t0 ))s"
  build=build/g228/build
  strip_bins=1  # RelWithDebInfo: its debug info would double the bundle
fi
[ -f "$build/libs3direct.so" ] || { echo "gpu-bundle: build first (make build)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"/{lib,bin,tests/bin,tests/fakecuda,gpu,deps}
cp -L "$build/libs3direct.so" "$out/lib/"
cp "$build/tools/s3direct" "$out/bin/"
for t in test_gpu_device test_gpu_fileio bench_gpu test_cuda_rules test_cuda_fake \
         test_cuda_events test_device_emu; do
  [ -x "$build/tests/bin/$t" ] && cp "$build/tests/bin/$t" "$out/tests/bin/"
done
mkdir -p "$out/python"
cp -r python/s3direct "$out/python/s3direct"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$out/python/s3direct/_lib"
cp tests/gpu/s3origin.py tests/gpu/gpu_check.py "$build/tests/bin/s3origin_get" "$out/gpu/"
cp -P "$build"/tests/fakecuda/lib*.so* "$out/tests/fakecuda/"
# The tests' run paths are relative: an absolute one would point into this machine's build
# (the CLI's RUNPATH to the build folder is harmless there: gpu-check.sh sets the library path).
for f in "$out"/tests/bin/* "$out"/gpu/s3origin_get; do
  if readelf -d "$f" 2>/dev/null | grep -E '(RPATH|RUNPATH)' | grep -Eq '\[/|:/'; then
    echo "gpu-bundle: $f has an absolute run path: $(readelf -d "$f" | grep -E 'R(UN)?PATH')" >&2
    exit 1
  fi
done
cp tests/run-tests.sh "$out/tests/"
if [ -n "$strip_bins" ] || [ -n "${S3D_BUNDLE_STRIP:-}" ]; then
  for f in "$out"/lib/* "$out"/bin/* "$out"/tests/bin/* "$out"/gpu/s3origin_get \
           "$out"/tests/fakecuda/lib*.so.*; do
    [ -L "$f" ] || strip --strip-debug "$f"
  done
fi

deb_package() {  # deb_package PATH: the Debian package that installed the library at PATH
  local real p pkg
  real=$(readlink -f "$1")
  # dpkg knows each file by the path its package names, /lib/... or /usr/lib/... (merged /usr)
  for p in "$1" "$real" "${real#/usr}" "/usr${1#/usr}"; do
    pkg=$(dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1 || true)
    [ -z "$pkg" ] || { echo "$pkg"; return 0; }
  done
}

# Shared libraries: all that ldd resolves, but glibc's own (the GPU machine has its own).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so)'
for f in "$out"/lib/* "$out"/bin/* "$out"/tests/bin/* "$out"/gpu/s3origin_get; do
  ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  [[ "$name" == libs3direct.so* ]] && continue
  [[ "$path" == */tests/fakecuda/* ]] && continue
  cp -L "$path" "$out/deps/$name"
  # Its licence: the copyright file of the Debian package that installed it.
  pkg=$(deb_package "$path")
  if [ -z "$pkg" ] || [ ! -f "/usr/share/doc/$pkg/copyright" ]; then
    echo "gpu-bundle: no Debian copyright file for $path (package: ${pkg:-none})" >&2
    exit 1
  fi
  mkdir -p "$out/licenses"
  cp "/usr/share/doc/$pkg/copyright" "$out/licenses/$pkg.copyright"
  echo "$name $pkg" >>"$out/licenses/PACKAGES"
done

# The full texts those copyright files refer to (/usr/share/common-licenses/GPL-2, LGPL-2.1...).
if [ -d "$out/licenses" ]; then
  mkdir -p "$out/licenses/common-licenses"
  for f in /usr/share/common-licenses/*; do
    [ -f "$f" ] || continue
    grep -qE "/usr/share/common-licenses/$(basename "$f")([^A-Za-z0-9+-]|\.[^0-9]|$)" \
      "$out"/licenses/*.copyright && cp "$f" "$out/licenses/common-licenses/"
  done
fi
# Ours and the statically linked set's (what the 2.28 set links, as the wheel carries them).
cp LICENSE NOTICE THIRD_PARTY_LICENSES "$out/"

glibc=$(for f in "$out"/lib/* "$out"/bin/* "$out"/deps/* "$out"/tests/bin/* "$out"/tests/fakecuda/* \
           "$out"/gpu/s3origin_get; do objdump -T "$f" 2>/dev/null; done |
        grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "s3direct GPU bundle"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
  echo "newest glibc symbol version required: $glibc"
  echo "size: $(du -sh "$out" | cut -f1)"
  echo
  (cd "$out" && find . -type f ! -name MANIFEST | sort | xargs sha256sum)
} >"$out/MANIFEST"
size=$(du -sm "$out" | cut -f1)
echo "gpu-bundle: $out (${size} MiB, $(ls "$out/deps" | wc -l) libraries in deps/, needs $glibc)"
if [ "$size" -gt 40 ]; then
  echo "gpu-bundle: $out is ${size} MiB, over the 40 MiB the GPU check allows" >&2
  exit 1
fi
