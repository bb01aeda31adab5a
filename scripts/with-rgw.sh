#!/usr/bin/env bash
# with-rgw.sh CMD [ARGS...] - runs CMD with a local Ceph RGW S3 server and its environment
# (AWS_ENDPOINT_URL, keys, region). Reuses a server already answering at $RGW_BASE; otherwise
# starts one (scripts/start-rgw.sh) and stops it when CMD ends. CMD's exit status is kept.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export RGW_BASE=${RGW_BASE:-/tmp/s3direct-rgw}
export RGW_PORT=${RGW_PORT:-8000}
started=0
if [ -f "$RGW_BASE/env" ] && curl -fs --max-time 2 -o /dev/null "http://127.0.0.1:$RGW_PORT/"; then
  echo "with-rgw: using the server already running at http://127.0.0.1:$RGW_PORT"
else
  if ! "$here/start-rgw.sh" >"${TMPDIR:-/tmp}/s3direct-rgw-start.log" 2>&1; then
    cat "${TMPDIR:-/tmp}/s3direct-rgw-start.log" >&2
    echo "with-rgw: could not start the S3 server" >&2
    exit 1
  fi
  grep -E '^\[|S3 endpoint' "${TMPDIR:-/tmp}/s3direct-rgw-start.log" | tail -n 2
  started=1
fi
# shellcheck disable=SC1091
. "$RGW_BASE/env"
"$@"
rc=$?
if [ $started -eq 1 ] && [ -z "${S3D_KEEP_RGW:-}" ]; then
  "$here/stop-rgw.sh" --purge >/dev/null 2>&1
fi
exit $rc
