#!/usr/bin/env bash
# setup.sh - installs the peer tools the side-by-side benchmark compares s3direct with, into the
# benchmark's own virtual environment (bench/.venv-peers, sharing the system's torch, boto3 and
# safetensors through --system-site-packages) so that they never leak into the test
# environment. Idempotent: a second run installs nothing. Prints the venv's python on stdout.
# s3fs pins an old aiobotocore/botocore; it goes into its own --target folder
# (bench/.peers-s3fs) that only the s3fs worker puts on sys.path, so that it cannot downgrade
# the botocore that boto3 and the other peers use.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$here/../.venv-peers
s3fs_dir=$here/../.peers-s3fs
peers=("s3torchconnector[dcp]==1.5.0" runai-model-streamer==0.17.1 runai-model-streamer-s3==0.17.1
       tensorizer==2.12.1 matplotlib)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv --system-site-packages "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import s3torchconnector.dcp, runai_model_streamer, tensorizer, matplotlib' \
    2>/dev/null; then
  echo "bench: installing peers into $venv: ${peers[*]}" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${peers[@]}" 2>&1 |
    grep -v '^WARNING: Location' >&2 || true
fi
if [ ! -d "$s3fs_dir/s3fs" ]; then
  echo "bench: installing s3fs into $s3fs_dir" >&2
  # (pip warns that the system's awscli wants another botocore: this folder is s3fs's alone)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --target "$s3fs_dir" s3fs \
    2>&1 | grep -v -e '^WARNING: Location' -e 'dependency' -e 'awscli' >&2 || true
fi
echo "$venv/bin/python"
