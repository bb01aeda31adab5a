#!/usr/bin/env bash
# run.sh BUILD_DIR OUT_DIR - the sweep of s3direct's cost (issue 13, section 3), part of
# `make bench`: checkpoint size, tensor count, concurrency and part size, each point in its
# own process, against the S3 server of the environment. Uses the peers' venv (matplotlib).
# Knobs: SWEEP_REPS (2, concurrency and part size), SWEEP_SIZE_REPS (1, size and tensor
# count), SWEEP_DIMS (size,tensors,concurrency,part_size), SWEEP_SIZES
# (64M,256M,1G,2G,4G), SWEEP_TENSOR_BYTES (256M), SWEEP_KNOB_BYTES (1G).
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: run.sh BUILD_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$(dirname "$here")")
py=$("$here/../peers/setup.sh")
args=(--out "$out" --reps "${SWEEP_REPS:-2}" --size-reps "${SWEEP_SIZE_REPS:-1}")
[ -n "${SWEEP_DIMS:-}" ] && args+=(--dims "$SWEEP_DIMS")
[ -n "${SWEEP_SIZES:-}" ] && args+=(--sizes "$SWEEP_SIZES")
[ -n "${SWEEP_TENSOR_BYTES:-}" ] && args+=(--tensor-bytes "$SWEEP_TENSOR_BYTES")
[ -n "${SWEEP_KNOB_BYTES:-}" ] && args+=(--knob-bytes "$SWEEP_KNOB_BYTES")
# s3direct from this build, not from an installed copy.
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export S3D_BUILD_DIR=$build
exec "$py" "$here/run.py" "${args[@]}"
