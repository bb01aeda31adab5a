#!/bin/bash
# Adapted from the shared server scripts; the project keeps its own copy so that it does not
# depend on anything outside the repository at run time.
# start-rgw.sh - throwaway single-node Ceph (1 mon, 1 memstore OSD, no mgr by default)
# + RADOS Gateway (beast) on loopback, from Debian 12 packages only. Run as root.
# No systemd, no cephadm, no docker.  All state under $RGW_BASE (wiped on every start).
#
# Env knobs:
#   RGW_BASE   state dir              (default /tmp/rgw/cluster)
#   RGW_PORT   beast HTTP port        (default 8000)
#   RGW_MON_V2_PORT / RGW_MON_V1_PORT  mon ports (default 3300 / 6789); change them
#              together with RGW_BASE and RGW_PORT to run several instances side by side
#   RGW_ACCESS / RGW_SECRET   S3 keys (default fixed test keys below)
#   RGW_MEMSTORE_BYTES        RAM the memstore OSD may fill (default 8 GiB)
#   RGW_WITH_MGR=1            also start a ceph-mgr (not needed for S3)
#   RGW_SKIP_APT=1            skip the apt-get step
set -euo pipefail

BASE=${RGW_BASE:-/tmp/s3direct-rgw}
PORT=${RGW_PORT:-8000}
MON2=${RGW_MON_V2_PORT:-3300}
MON1=${RGW_MON_V1_PORT:-6789}
MONADDR="[v2:127.0.0.1:$MON2,v1:127.0.0.1:$MON1]"
ACCESS=${RGW_ACCESS:-TESTACCESSKEY0000001}
SECRET=${RGW_SECRET:-testsecretkey0000000000000000000000000001}
MEMBYTES=${RGW_MEMSTORE_BYTES:-8589934592}
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[%3d.%03ds] %s\n' $((ms/1000)) $((ms%1000)) "$*"; }

# ---- 1. packages ---------------------------------------------------------------
if [ -z "${RGW_SKIP_APT:-}" ]; then
  need=""
  for p in ceph-mon ceph-osd radosgw ceph-common curl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
  done
  [ -n "${RGW_WITH_MGR:-}" ] && { dpkg-query -W -f='${Status}' ceph-mgr 2>/dev/null | grep -q 'install ok installed' || need="$need ceph-mgr"; }
  if [ -n "$need" ]; then
    echo "apt-get install:$need"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $need >/dev/null
  fi
fi
T0=$(date +%s%N)   # time the cluster bring-up separately from apt

# ---- 2. refuse to clobber a running instance, then wipe state ------------------
if [ -d "$BASE/pids" ]; then
  for f in "$BASE"/pids/*.pid; do
    [ -e "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then
      echo "already running ($f); run stop-rgw.sh first" >&2; exit 1
    fi
  done
fi
for p in "$PORT" "$MON2" "$MON1"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "port $p already in use" >&2; exit 1; fi
done
rm -rf "$BASE"
mkdir -p "$BASE"/{data/mon.a,data/osd.0,data/rgw.gw,data/mgr.x,log,run,pids}
# on any failure from here on, kill whatever this script already started
cleanup_on_fail() {
  echo "start-rgw.sh failed at line $1; stopping started daemons (logs: $BASE/log)" >&2
  local n f pid i
  for n in rgw.gw osd.0 mgr.x mon.a; do      # mon last, so the OSD can say goodbye quickly
    f=$BASE/pids/$n.pid; [ -e "$f" ] || continue; pid=$(cat "$f")
    kill "$pid" 2>/dev/null || continue
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
trap 'cleanup_on_fail $LINENO' ERR
# wait_for NAME PID TIMEOUT_S CMD...: poll CMD until it succeeds; fail fast if PID died
wait_for() {
  local name=$1 pid=$2 end=$(( $(date +%s) + $3 )); shift 3
  until "$@" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "$name (pid $pid) exited during startup; see $BASE/log" >&2; return 1; }
    [ "$(date +%s)" -lt "$end" ] || { echo "$name not ready in time; see $BASE/log" >&2; return 1; }
    sleep 0.3
  done
}
mon_up()  { timeout 5 ceph -c "$CONF" mon stat; }
osd_up()  { timeout 5 ceph -c "$CONF" osd stat | grep -q ' 1 up'; }
rgw_up()  { curl -fs --max-time 2 -o /dev/null "http://127.0.0.1:$PORT/"; }
FSID=$(cat /proc/sys/kernel/random/uuid)
CONF=$BASE/ceph.conf

cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon host = $MONADDR
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
run dir = $BASE/run
admin socket = $BASE/run/\$cluster-\$name.asok
log file = $BASE/log/\$cluster-\$name.log
pid file = $BASE/run/\$cluster-\$name.pid
keyring = $BASE/keyring
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
osd crush chooseleaf type = 0
mon allow pool delete = true
debug ms = 0

[mon]
# faster map updates (default 1s batching) -> quicker pool creation / OSD boot
paxos propose interval = 0.05
mon data = $BASE/data/mon.\$id
mon data avail warn = 1
mon data avail crit = 0

[osd]
osd data = $BASE/data/osd.\$id
osd objectstore = memstore
memstore device bytes = $MEMBYTES

[mgr]
mgr data = $BASE/data/mgr.\$id

[client.rgw.gw]
rgw data = $BASE/data/rgw.\$id
rgw frontends = beast endpoint=127.0.0.1:$PORT
# enables virtual-host style (bucket.localhost:$PORT) in addition to path style
rgw dns name = localhost
# Deleted objects (and aborted multipart parts) are freed by radosgw's garbage collector, by
# default 2 hours later; the OSD keeps data in RAM, so tests that write and delete gigabytes
# would fill it. Collect within seconds instead.
rgw gc obj min wait = 2
rgw gc processor period = 5
rgw gc processor max time = 5
# radosgw's built-in default is ms_mon_client_mode=secure, which cannot work with
# auth=none (mon connection fails: get_initial_auth_request returned -13)
ms mon client mode = crc
EOF
touch "$BASE/keyring"

# ---- 3. monitor ------------------------------------------------------------------
monmaptool --create --fsid "$FSID" --addv a "$MONADDR" "$BASE/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$BASE/monmap"
ceph-mon -c "$CONF" -i a -f >"$BASE/log/mon.a.out" 2>&1 &
echo $! >"$BASE/pids/mon.a.pid"
wait_for ceph-mon "$(cat "$BASE/pids/mon.a.pid")" 30 mon_up
log "mon up (pid $(cat "$BASE/pids/mon.a.pid"))"

# ---- 4. optional manager -----------------------------------------------------------
if [ -n "${RGW_WITH_MGR:-}" ]; then
  ceph-mgr -c "$CONF" -i x -f >"$BASE/log/mgr.x.out" 2>&1 &
  echo $! >"$BASE/pids/mgr.x.pid"
  log "mgr started (pid $!)"
fi

# ---- 5. one memstore OSD -----------------------------------------------------------
OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
OSD_ID=$(ceph -c "$CONF" osd new "$OSD_UUID")
ceph-osd -c "$CONF" -i "$OSD_ID" --mkfs --osd-uuid "$OSD_UUID" >"$BASE/log/osd.mkfs.out" 2>&1
ceph-osd -c "$CONF" -i "$OSD_ID" -f >"$BASE/log/osd.$OSD_ID.out" 2>&1 &
echo $! >"$BASE/pids/osd.$OSD_ID.pid"
wait_for ceph-osd "$(cat "$BASE/pids/osd.$OSD_ID.pid")" 60 osd_up
log "osd.$OSD_ID up (pid $(cat "$BASE/pids/osd.$OSD_ID.pid"))"

# ---- 6. radosgw pools (pre-created in one batch; otherwise radosgw creates them one by
#         one at startup and the index/data pools on the first CreateBucket, ~5 s) -------
for p in .rgw.root default.rgw.log default.rgw.control default.rgw.meta \
         default.rgw.buckets.index default.rgw.buckets.data default.rgw.buckets.non-ec; do
  echo "osd pool create $p 8 8"; echo "osd pool application enable $p rgw"
done | ceph -c "$CONF" >/dev/null 2>&1
log "pools created"

# ---- 7. radosgw ---------------------------------------------------------------------
radosgw -c "$CONF" -n client.rgw.gw -f >"$BASE/log/rgw.gw.out" 2>&1 &
echo $! >"$BASE/pids/rgw.gw.pid"
wait_for radosgw "$(cat "$BASE/pids/rgw.gw.pid")" 120 rgw_up
log "radosgw answering (pid $(cat "$BASE/pids/rgw.gw.pid"))"

# ---- 8. S3 user with fixed keys ------------------------------------------------------
radosgw-admin -c "$CONF" -n client.admin user create --uid=tester --display-name="S3 tester" \
  --access-key="$ACCESS" --secret-key="$SECRET" >"$BASE/log/user-create.json"
log "user created"

cat >"$BASE/env" <<EOF
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT
export AWS_ACCESS_KEY_ID=$ACCESS
export AWS_SECRET_ACCESS_KEY=$SECRET
export AWS_DEFAULT_REGION=us-east-1
export CEPH_CONF=$CONF
EOF
echo "S3 endpoint : http://127.0.0.1:$PORT  (path style; virtual-host style as http://BUCKET.localhost:$PORT; any region)"
echo "access key  : $ACCESS"
echo "secret key  : $SECRET"
echo "env file    : source $BASE/env"
echo "ceph conf   : $CONF   (ceph -c $CONF -s ; radosgw-admin -c $CONF ...)"
echo "pids        : $(cd "$BASE/pids" && for f in *.pid; do printf '%s=%s ' "${f%.pid}" "$(cat "$f")"; done)"
