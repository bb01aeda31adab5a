#!/usr/bin/env bash
# check-file.sh WHEEL - the wheel file held to what issue 24 asks, before anything installs it
# (tests/wheel/run.sh, tests/wheel/aarch64.sh). Each check prints ok or FAIL; exit 1 if any
# failed:
#   - its platform tag is manylinux_2_28 or older (the oldest of compressed tags: what pip on
#     an old system matches; the legacy manylinux1/2010/2014 names count as 2.5/2.12/2.17);
#   - no ELF file in it needs a GLIBC_ symbol version above 2.28 (objdump -T);
#   - it carries at most 6 libraries in s3direct.libs/;
#   - it is at most 5 MB (5,000,000 bytes);
#   - libs3direct.so exports only s3d_* (nm -D): the static libcurl, OpenSSL and jansson in it
#     stay local, so they never interpose on the system's in the same process;
#   - the folders its OpenSSL has compiled in (OPENSSLDIR, ENGINESDIR, MODULESDIR, as
#     `openssl version -a` prints them) are root-owned system paths under /etc/ or /usr/, never
#     the build folder, where anyone who can write on a user's machine could plant an
#     openssl.cnf (issue 35, item 8; tests/py/test_cabundle.py checks none is read at all);
#   - its .dist-info/licenses/ holds LICENSE, NOTICE and THIRD_PARTY_LICENSES, the same bytes
#     as the checkout's (issue 37: the notices of the OpenSSL, libcurl and jansson it links);
#   - no S3D_TEST_* hook name is in libs3direct.so (issue 38: built without S3D_TEST_HOOKS).
set -euo pipefail
whl=$1
work=$(mktemp -d /tmp/s3d-wheelfile.XXXXXX)
trap 'rm -rf "$work"' EXIT

fail=0
check() {  # check OK_OR_NOT WHAT
  if [ "$1" = ok ]; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi
}
older_eq() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$2" ]; }  # $1 <= $2
# The tag's glibc: manylinux_X_Y_arch, or the legacy names (PEP 600). Of several compressed
# tags (a.b.c) the oldest is the floor pip on an old system matches.
floor=
for t in $(basename "$whl" .whl | sed 's/.*-//; s/\./ /g'); do
  case $t in
    manylinux_*) v=$(echo "$t" | sed -n 's/^manylinux_\([0-9]*\)_\([0-9]*\)_.*/\1.\2/p') ;;
    manylinux2014_*) v=2.17 ;;
    manylinux2010_*) v=2.12 ;;
    manylinux1_*) v=2.5 ;;
    *) v= ;;
  esac
  [ -n "$v" ] && { [ -z "$floor" ] || older_eq "$v" "$floor"; } && floor=$v
done
if [ -n "$floor" ] && older_eq "$floor" 2.28; then r=ok; else r=no; fi
check $r "tag $(basename "$whl" .whl | sed 's/.*-//'): glibc floor ${floor:-none} <= 2.28"
mkdir "$work/unzipped"
python3 -m zipfile -e "$whl" "$work/unzipped"
newest=
n_elf=0
while IFS= read -r f; do
  head -c4 "$f" | grep -q 'ELF' || continue
  n_elf=$((n_elf + 1))
  v=$(objdump -T "$f" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  older_eq "$v" 2.28 || echo "     ${f#"$work/unzipped/"} needs GLIBC_$v"
  [ -z "$v" ] || { [ -n "$newest" ] && older_eq "$v" "$newest"; } || newest=$v
done < <(find "$work/unzipped" -type f)
if [ "$n_elf" -gt 0 ] && older_eq "${newest:-0}" 2.28; then r=ok; else r=no; fi
check $r "$n_elf ELF files, the newest GLIBC_ version any needs: ${newest:-none} (<= 2.28)"
n_libs=$(find "$work/unzipped" -path '*/s3direct.libs/*' -type f | wc -l)
if [ "$n_libs" -le 6 ]; then r=ok; else r=no; fi
check $r "$n_libs carried libraries in s3direct.libs/ (<= 6)"
size=$(stat -c %s "$whl")
if [ "$size" -le 5000000 ]; then r=ok; else r=no; fi
check $r "size $size bytes (<= 5,000,000)"
so=$(find "$work/unzipped" -name libs3direct.so -type f | head -1)
exported=$(nm -D --defined-only "$so" | awk '$2 != "A" {print $3}' | sed 's/@.*//')
others=$(printf '%s\n' "$exported" | grep -v '^s3d_' | head -5 | tr '\n' ' ' || true)
if [ -n "$exported" ] && [ -z "$others" ]; then r=ok; else r=no; fi
check $r "libs3direct.so exports $(printf '%s\n' "$exported" | grep -c .) symbols, all s3d_*${others:+ (not: $others)}"
dirs=$(strings -a "$so" | grep -E '^(OPENSSLDIR|ENGINESDIR|MODULESDIR): "' || true)
bad=$(printf '%s\n' "$dirs" | grep -Ev '^[A-Z]+DIR: "/(etc|usr)/[^"]*"$' | tr '\n' ' ' || true)
if [ "$(printf '%s\n' "$dirs" | grep -c .)" = 3 ] && [ -z "$bad" ]; then r=ok; else r=no; fi
check $r "OpenSSL's compiled-in folders are system paths: $(printf '%s\n' "$dirs" | tr '\n' ' ')"
hooks=$(strings -a "$so" | grep -o 'S3D_TEST_[A-Z0-9_]*' | sort -u | tr '\n' ' ' || true)
if [ -z "$hooks" ]; then r=ok; else r=no; fi
check $r "no test hook in libs3direct.so (S3D_TEST_HOOKS off: src/common/env.h)${hooks:+ (found: $hooks)}"
repo=$(cd "$(dirname "$0")/../.." && pwd)
missing=
for f in LICENSE NOTICE THIRD_PARTY_LICENSES; do
  got=$(find "$work/unzipped" -path "*.dist-info/licenses/$f" -type f | head -1)
  { [ -n "$got" ] && cmp -s "$got" "$repo/$f"; } || missing+=" $f"
done
if [ -z "$missing" ]; then r=ok; else r=no; fi
check $r "licence files in .dist-info/licenses/: LICENSE NOTICE THIRD_PARTY_LICENSES${missing:+ (missing or different:$missing)}"
if [ "$fail" != 0 ]; then
  echo "check-file: $(basename "$whl") is not the wheel issue 24 asks for" >&2
  exit 1
fi

