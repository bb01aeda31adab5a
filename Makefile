# Entry points. `make demo` and `make test` work on a fresh machine: they install what is
# missing (scripts/deps.sh), build, start a local S3 server and run.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?= -DS3D_WERROR=ON

.PHONY: all deps build test test-unit demo bench sanitize fuzz format-check typecheck install \
        clean gpu-check gpu-bundle gpu-check-glibc228 werror-release tsan analyze test-aarch64 \
        wheel-aarch64 test-wheel-aarch64

all: build

deps:
	@scripts/deps.sh

build:
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Every test: C unit and integration tests (each its own process) and the Python tests,
# against a Ceph RGW started for the run.
test: deps build
	@scripts/with-rgw.sh tests/run-tests.sh $(BUILD)

# Tests that need no server (integration tests skip themselves).
test-unit: build
	@env -u AWS_ENDPOINT_URL tests/run-tests.sh $(BUILD)

# Everything (library, CLI, tests) built at -O3 (Release) with -Werror by gcc and by clang:
# the optimiser's flow analysis warns (maybe-uninitialized) where the default -O2 build does
# not. About 10 s each here.
werror-release:
	@cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DS3D_WERROR=ON >/dev/null
	@cmake --build build-release -j $(JOBS) >/dev/null
	@cmake -S . -B build-release-clang -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release \
	    -DS3D_WERROR=ON >/dev/null
	@cmake --build build-release-clang -j $(JOBS) >/dev/null

# The same tests built with AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize:
	@cmake -S . -B build-asan -DS3D_SANITIZE=ON -DS3D_WERROR=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@ASAN_OPTIONS=detect_leaks=1 S3D_NO_PYTEST=1 scripts/with-rgw.sh tests/run-tests.sh build-asan

# ThreadSanitizer (clang, build-tsan/): the C tests and the threaded Python stress, against a
# Ceph RGW; any report fails. What runs and why: scripts/tsan.sh.
tsan:
	@scripts/with-rgw.sh scripts/tsan.sh

# clang's static analyzer (scan-build) over src/ and tools/: zero warnings (scripts/analyze.sh).
analyze:
	@scripts/analyze.sh

# The fuzz targets as libFuzzer binaries (clang, ASan+UBSan, build-fuzz/), each run for
# FUZZ_TIME seconds (default 30) or FUZZ_RUNS executions; stops at the first crash.
fuzz:
	@scripts/fuzz.sh

# The manylinux_2_28 wheel (dist/s3direct-*.whl): zig cc for glibc 2.28, libcurl, OpenSSL and
# jansson built from Debian's source packages and linked in statically, auditwheel repair.
# See scripts/build-wheel.sh.
wheel:
	@scripts/build-wheel.sh dist

# The same wheel cross-built for aarch64 (dist/s3direct-*_aarch64.whl), and its check: the
# file checks, then its CLI under qemu-aarch64 (TLS, an S3 round trip). tests/wheel/aarch64.sh.
wheel-aarch64:
	@S3D_WHEEL_ARCH=aarch64 scripts/build-wheel.sh dist

test-wheel-aarch64: deps
	@scripts/with-rgw.sh tests/wheel/aarch64.sh

# The wheel installed into a fresh venv, and the Python tests run against that install (no
# build tree, no source package), against a Ceph RGW started for the run. See tests/wheel/run.sh.
# Also `pip install -e .` in a fresh venv (tests/wheel/editable.sh).
test-wheel: deps
	@tests/wheel/editable.sh
	@scripts/with-rgw.sh tests/wheel/run.sh

demo: deps build
	@scripts/with-rgw.sh bench/demo.sh $(BUILD)

# The peers part keeps one ~2 GB checkpoint in three formats plus one save at a time in the
# RAM-backed OSD, the sweep a 4 GiB checkpoint: 12 GiB of memstore unless a server is already
# running.
bench: deps build
	@RGW_MEMSTORE_BYTES=$${RGW_MEMSTORE_BYTES:-12884901888} scripts/with-rgw.sh bench/run.sh $(BUILD)

# The GPU proof: `make gpu-bundle` here (no CUDA needed; the glibc 2.28 set, at most 40 MiB),
# then scripts/gpu-check.sh on the GPU machine in one device call of at most
# GPU_CHECK_DEADLINE_S (540) seconds (docs/gpu-check.md). GPU_CHECK_EMULATE=1 make gpu-check
# runs it on CPU (about 15 s).
gpu-bundle: build
	@scripts/gpu-bundle.sh $(BUILD) gpu-bundle

gpu-check:
	@scripts/gpu-check.sh gpu-bundle

# The bundle is the glibc 2.28 set: symbol versions, libraries loaded, MANIFEST (no GPU).
gpu-check-glibc228:
	@tests/gpu/check-glibc228.sh gpu-bundle

# The library and its C unit tests cross-built for aarch64 (zig cc, glibc 2.28) and run under
# qemu-aarch64: the ARMv8 CRC-32C path among them. See scripts/test-aarch64.sh.
test-aarch64:
	@scripts/test-aarch64.sh

format-check:
	@clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

# The Python package under mypy --strict ([tool.mypy] in pyproject.toml).
typecheck:
	python3 -m mypy --strict python/s3direct
	python3 -m ruff check python/s3direct
	python3 -m ruff format --check python/s3direct

install: build
	@cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-wheel dist build-fuzz build-release build-release-clang \
	    build-tsan build-analyze
