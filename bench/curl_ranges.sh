#!/usr/bin/env bash
# curl_ranges.sh URL SIZE [N] - downloads SIZE bytes of URL as N (default 8) parallel ranged
# GETs, one curl process each, into /dev/null: the baseline a parallel client must match.
# With CURL_SIGV4_KEY and CURL_SIGV4_SECRET set, requests are signed (SigV4, us-east-1 or
# $CURL_SIGV4_REGION); otherwise unsigned. Exit status non-zero if any range failed.
set -uo pipefail
url=${1:?usage: curl_ranges.sh URL SIZE [N]}
size=${2:?usage: curl_ranges.sh URL SIZE [N]}
n=${3:-8}
auth=()
if [ -n "${CURL_SIGV4_KEY:-}" ]; then
  # curl 7.88 signs no payload hash on its own; RGW and AWS require the header.
  auth=(--aws-sigv4 "aws:amz:${CURL_SIGV4_REGION:-us-east-1}:s3"
        --user "$CURL_SIGV4_KEY:$CURL_SIGV4_SECRET" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
fi
chunk=$(( (size + n - 1) / n ))
pids=()
for ((i = 0; i < n; i++)); do
  start=$((i * chunk))
  [ "$start" -ge "$size" ] && break
  end=$((start + chunk - 1))
  [ "$end" -ge "$size" ] && end=$((size - 1))
  curl -s -f "${auth[@]}" -r "$start-$end" -o /dev/null "$url" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
