#!/usr/bin/env bash
# run-tests.sh - runs every C test binary (each its own process, with a timeout; exit 77 =
# skipped) and then the Python tests, and prints one summary line: "N passed, N failed,
# N skipped". Exits non-zero if anything failed.
#
#   tests/run-tests.sh BUILD_DIR [FILTER]     FILTER: substring of the test names to run
#   S3D_TEST_TIMEOUT=seconds (default 300)    S3D_NO_PYTEST=1 skips the Python tests
#   S3D_TEST_EXCLUDE="test_a test_b"          C tests not to run (make tsan leaves out two)
set -u
build=${1:?usage: run-tests.sh BUILD_DIR [FILTER]}
filter=${2:-}
timeout_s=${S3D_TEST_TIMEOUT:-300}
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/tests/bin"
logdir="$build/tests/logs"
mkdir -p "$logdir"
pass=0; fail=0; skip=0; failed=()

for t in "$bin"/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  [[ " ${S3D_TEST_EXCLUDE:-} " == *" $name "* ]] && continue
  start=$(date +%s.%N)
  timeout -k 10 "$timeout_s" "$t" >"$logdir/$name.log" 2>&1
  rc=$?
  dur=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
  case $rc in
    0)  pass=$((pass+1)); printf 'PASS  %-40s %6ss\n' "$name" "$dur" ;;
    77) skip=$((skip+1)); printf 'SKIP  %-40s %s\n' "$name" "$(grep -m1 '^SKIP' "$logdir/$name.log" | cut -c7-)" ;;
    124|137) fail=$((fail+1)); failed+=("$name"); printf 'FAIL  %-40s timed out after %ss\n' "$name" "$timeout_s" ;;
    *)  fail=$((fail+1)); failed+=("$name"); printf 'FAIL  %-40s exit %d\n' "$name" "$rc"
        sed 's/^/      | /' "$logdir/$name.log" | tail -n 20 ;;
  esac
done

if [ -z "${S3D_NO_PYTEST:-}" ] && [ -d "$here/py" ] && ls "$here"/py/test_*.py >/dev/null 2>&1; then
  junit="$logdir/pytest.xml"
  rm -f "$junit"
  pyfilter=()
  [ -n "$filter" ] && pyfilter=(-k "$filter")
  S3D_BUILD_DIR="$build" python3 -m pytest -q -rfEs "$here/py" --junitxml="$junit" \
      -p no:cacheprovider "${pyfilter[@]}" 2>&1 | tee "$logdir/pytest.log" | tail -n 40
  if [ -f "$junit" ]; then
    read -r pt pf pe ps < <(python3 - "$junit" "$logdir/pytest-failed.txt" <<'PY'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
suites = [r] if r.tag == "testsuite" else list(r)
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) for s in suites)
e = sum(int(s.get("errors", 0)) for s in suites)
s = sum(int(s.get("skipped", 0)) for s in suites)
print(t, f, e, s)
# name each failure (and its first message line) so a log tail shows what broke
with open(sys.argv[2], "w") as out:
    for case in r.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            msg = (bad.get("message") or "").splitlines()[:1]
            out.write("FAIL  %s::%s  %s\n" % (case.get("classname"), case.get("name"),
                                            msg[0][:200] if msg else ""))
PY
)
    pass=$((pass + pt - pf - pe - ps)); fail=$((fail + pf + pe)); skip=$((skip + ps))
    [ $((pf + pe)) -gt 0 ] && failed+=("pytest ($((pf + pe)))") && cat "$logdir/pytest-failed.txt"
  else
    fail=$((fail+1)); failed+=("pytest (did not run)")
  fi
fi

[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ $((pass + fail)) -gt 0 ]
