#!/usr/bin/env bash
# check-glibc228.sh [BUNDLE] - the glibc 2.28 set of the GPU bundle (g228/, issue 20), no GPU:
#   1. every ELF file in it needs no GLIBC_ symbol version above 2.28 (objdump -T), and none
#      loads a library outside glibc but libs3direct.so and the fake CUDA driver;
#   2. the emulated gpu-check (GPU_CHECK_EMULATE=1) with the 2.28 set forced passes and says so.
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle=${1:-gpu-bundle}
g=$bundle/g228
[ -f "$g/MANIFEST" ] || { echo "check-glibc228: no $g/MANIFEST (make gpu-bundle)" >&2; exit 2; }
fail=0
n=0
while IFS= read -r f; do
  head -c4 "$f" | grep -q 'ELF' || continue
  n=$((n + 1))
  v=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  if [ -n "$v" ] && [ "$(printf '%s\n2.28\n' "$v" | sort -V | tail -1)" != 2.28 ]; then
    echo "FAIL $f needs GLIBC_$v"; fail=1
  fi
  extra=$(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' |
          grep -Ev '^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so|^libs3direct\.so|^libcuda\.so|^libcufile\.so' || true)
  [ -z "$extra" ] || { echo "FAIL $f loads $extra (not carried in g228/)"; fail=1; }
done < <(find "$g" -type f)
echo "check-glibc228: $n ELF files in $g, newest GLIBC_ needed: $(sed -n 's/^newest glibc symbol version required: //p' "$g/MANIFEST")"
out=${OUT:-$PWD/build/gpu-check-glibc228}
rm -rf "$out"
if GPU_CHECK_EMULATE=1 GPU_CHECK_GLIBC228=1 OUT=$out scripts/gpu-check.sh "$bundle" >/dev/null 2>&1; then
  echo "ok   emulated gpu-check on the 2.28 set"
else
  echo "FAIL emulated gpu-check on the 2.28 set ($out/gpu-check.log)"; fail=1
fi
grep -q '^glibc: .*glibc 2.28 set' "$out/gpu-check.log" ||
  { echo "FAIL gpu-check.log does not say it ran the 2.28 set"; fail=1; }
[ $fail = 0 ] && echo "check-glibc228: ok"
exit $fail
