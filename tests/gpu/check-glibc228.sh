#!/usr/bin/env bash
# check-glibc228.sh [BUNDLE] - the GPU bundle is the glibc 2.28 set (issues 20 and 39), no GPU:
# every ELF file in it needs no GLIBC_ symbol version above 2.28 (objdump -T) and loads no
# library outside glibc but libs3direct.so and the CUDA driver and cuFile (real or fake), and
# MANIFEST says so. The emulated gpu-check of the same bundle is `GPU_CHECK_EMULATE=1 make
# gpu-check` (.ci/run runs both; this one no longer runs it a second time).
set -uo pipefail
cd "$(dirname "$0")/../.."
g=${1:-gpu-bundle}
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
  [ -z "$extra" ] || { echo "FAIL $f loads $extra (not carried in the bundle)"; fail=1; }
done < <(find "$g" -type f)
need=$(sed -n 's/^newest glibc symbol version required: GLIBC_//p' "$g/MANIFEST")
echo "check-glibc228: $n ELF files in $g, newest GLIBC_ needed: ${need:-none}"
if [ -z "$need" ] || [ "$(printf '%s\n2.28\n' "$need" | sort -V | tail -1)" != 2.28 ]; then
  echo "FAIL MANIFEST: the bundle needs GLIBC_${need:-?}: not the 2.28 set (S3D_GLIBC228=0?)"
  fail=1
fi
[ "$(ls "$g/deps" 2>/dev/null | wc -l)" = 0 ] || { echo "FAIL deps/ is not empty"; fail=1; }
[ $fail = 0 ] && echo "check-glibc228: ok"
exit $fail
