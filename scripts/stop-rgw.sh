#!/bin/bash
# stop-rgw.sh - stop the daemons started by start-rgw.sh (by recorded PID only).
#   --purge   also delete the state dir
BASE=${RGW_BASE:-/tmp/s3direct-rgw}
[ -d "$BASE/pids" ] || { echo "nothing to stop in $BASE"; exit 0; }
# stop in reverse dependency order: rgw, osd, mgr, mon
for name in rgw.gw osd.0 mgr.x mon.a; do
  f=$BASE/pids/$name.pid
  [ -e "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { echo "$name ($pid) ignored SIGTERM, sending SIGKILL"; kill -KILL "$pid"; }
    echo "stopped $name ($pid)"
  fi
  rm -f "$f"
done
[ "${1:-}" = "--purge" ] && rm -rf "$BASE" && echo "purged $BASE"
exit 0
