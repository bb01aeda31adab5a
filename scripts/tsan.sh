#!/usr/bin/env bash
# tsan.sh - make tsan: builds the library and the C tests with clang's ThreadSanitizer
# (build folder build-tsan/), runs the C tests, then the threaded Python stress with the TSan
# build of the library loaded into Python. Any TSan report fails the run.
#
#   scripts/tsan.sh          against the S3 server in AWS_ENDPOINT_URL (make tsan starts one)
#   TSAN_BUILD=folder (default build-tsan)      JOBS=N build jobs (default 2)
#
# What runs, and why not everything (CI has 30 minutes in all):
# - every C test but test_big_1g and test_ckpt_rss: those two move 1 GiB and a large
#   checkpoint through the same threads test_roundtrip and test_ckpt_s3 run, and take about
#   45 s each under TSan; test_st_memory skips itself (RSS means nothing under TSan).
# - tests/py/test_threads_shared_client.py: 32 threads sharing one Client, saving and loading
#   their own keys while the credentials are refreshed and the log callback is set;
#   tests/py/test_client_lifetime.py: close() during save_async, load and writers on other
#   threads, each scenario 100 times, in children that run under TSan as well.
# Python runs as build-tsan/tests/tsan/python-tsan, the interpreter with TSan's runtime linked
# in (tests/tsan/python_tsan.c says why not LD_PRELOAD). Suppressions, for races inside
# CPython or PyTorch only: tests/tsan/suppressions.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TSAN_BUILD:-build-tsan}
if ! command -v clang >/dev/null 2>&1; then
  echo "tsan: clang is missing (scripts/deps.sh installs it)" >&2
  exit 1
fi
py=$(python3 -c 'import sys; print(sys.executable)')
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DS3D_TSAN=ON -DS3D_WERROR=ON \
    -DS3D_PYTHON="$py" >/dev/null
cmake --build "$build" -j "${JOBS:-2}" >/dev/null

# halt_on_error: the first report ends the process with exitcode 66, which fails the test.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/tests/tsan/suppressions.txt"
rm -rf "$build/tests/logs"  # the grep below reads this run's logs only
rc=0
S3D_NO_PYTEST=1 S3D_TEST_EXCLUDE="test_big_1g test_ckpt_rss" tests/run-tests.sh "$build" || rc=1
log="$build/tests/logs/pytest-tsan.log"
S3D_BUILD_DIR="$build" "$build/tests/tsan/python-tsan" -m pytest -q -rs -p no:cacheprovider \
    tests/py/test_threads_shared_client.py tests/py/test_client_lifetime.py 2>&1 |
    tee "$log" | tail -n 20
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
# A report from a child whose exit status nobody checks (a CLI run, a subprocess) still counts.
if grep -l 'WARNING: ThreadSanitizer' "$build"/tests/logs/*.log; then
  echo "tsan: ThreadSanitizer reports in the logs above" >&2
  rc=1
fi
[ $rc -eq 0 ] && echo "tsan: no ThreadSanitizer report"
exit $rc
