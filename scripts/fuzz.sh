#!/usr/bin/env bash
# fuzz.sh - builds the libFuzzer binaries (clang, ASan+UBSan, the whole library instrumented;
# build folder build-fuzz/) and runs each fuzz target for a bounded time from its committed
# seed corpus and dictionary. Stops at the first crash, leak, sanitizer report or broken
# invariant, with the input that caused it under build-fuzz/fuzz-artifacts/.
#
#   scripts/fuzz.sh [TARGET...]     targets: safetensors xml ini index uri (default: all)
#   FUZZ_TIME=seconds per target (default 30)   FUZZ_RUNS=N: N executions per target instead
#   FUZZ_BUILD=folder (default build-fuzz)      JOBS=N build jobs (default 2)
#
# Prints one line per target: "fuzz: T: N execs in S s (R/s), corpus C inputs, no crash".
# New inputs found go to FUZZ_BUILD/fuzz-corpus/T (kept between runs, never committed); the
# committed seeds (tests/fuzz/corpus, tests/data/malformed) are only read. A crash input worth
# keeping goes into the committed corpus with the fix, so `make test` replays it for ever.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FUZZ_BUILD:-build-fuzz}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors xml ini index uri)

if ! command -v clang >/dev/null 2>&1; then
  echo "fuzz: clang is missing (scripts/deps.sh installs it)" >&2
  exit 1
fi
CC=clang cmake -S . -B "$build" -DS3D_FUZZ=ON -DS3D_WERROR=ON >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target fuzzers >/dev/null

seeds() {
  case $1 in
    safetensors) echo tests/data/malformed tests/fuzz/corpus/safetensors ;;
    *) echo "tests/fuzz/corpus/$1" ;;
  esac
}

if [ -n "${FUZZ_RUNS:-}" ]; then
  limit=(-runs="$FUZZ_RUNS")
else
  limit=(-max_total_time="${FUZZ_TIME:-30}")
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/fuzz-artifacts"
for t in "${targets[@]}"; do
  bin="$build/tests/bin/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no target \"$t\"" >&2; exit 1; }
  work="$build/fuzz-corpus/$t"
  log="$build/fuzz-artifacts/$t.log"
  mkdir -p "$work"
  # shellcheck disable=SC2046
  if ! "$bin" "${limit[@]}" -dict="tests/fuzz/dict/$t.dict" -timeout=10 -rss_limit_mb=1536 \
       -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" \
       "$work" $(seeds "$t") >"$log" 2>&1; then
    echo "fuzz: $t: FAILED (log $log)" >&2
    grep -E -A30 'ERROR:|runtime error|invariant broken|Test unit written' "$log" | head -n 60 >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
  corpus=$(find "$work" -type f | wc -l)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  echo "fuzz: $t: $execs execs in ${secs:-?} s ($rate/s), corpus $corpus new inputs, no crash"
done
