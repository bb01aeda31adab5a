#!/usr/bin/env bash
# run.sh BUILD_DIR OUT_DIR - the side-by-side comparison with the peers (issue 13), part of
# `make bench`: installs the peers into bench/.venv-peers (setup.sh) and runs run.py against
# the S3 server of the environment. Knobs: PEERS_GIB (default 2), PEERS_ROUNDS (3),
# PEERS_TOOLS / PEERS_WORKLOADS (comma lists; by default all, the DCP storages in a second run
# labelled LABEL-dcp).
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: run.sh BUILD_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$(dirname "$here")")
py=$("$here/setup.sh")
args=(--cli "$build/tools/s3direct" --out "$out" --gib "${PEERS_GIB:-2}"
      --rounds "${PEERS_ROUNDS:-3}")
[ -n "${PEERS_TOOLS:-}" ] && args+=(--tools "$PEERS_TOOLS")
[ -n "${PEERS_WORKLOADS:-}" ] && args+=(--workloads "$PEERS_WORKLOADS")
# s3direct from this build, not from an installed copy.
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export S3D_BUILD_DIR=$build
label=${PEERS_LABEL:-http}
if [ -n "${PEERS_TOOLS:-}" ]; then
  exec "$py" "$here/run.py" "${args[@]}" --label "$label"
fi
# Two runs: the tools that read single objects, then the torch.distributed.checkpoint storages
# (LABEL-dcp) with their own source checkpoints (the server keeps everything in RAM: both sets
# at once would not fit on this machine).
rc=0
"$py" "$here/run.py" "${args[@]}" --label "$label" || rc=1
"$py" "$here/run.py" "${args[@]}" --label "$label-dcp" --dcp || rc=1
exit $rc
