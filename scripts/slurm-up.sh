#!/usr/bin/env bash
# slurm-up.sh - bring up a single-node Slurm 24.11 (Debian trixie packages) inside a
# debootstrap chroot, with slurmdbd+MariaDB accounting and slurmrestd serving
# /slurm/v0.0.4{0,1,2} and /slurmdb/v0.0.4{0,1,2}.
#
# Idempotent:
#   - creates the chroot (debootstrap + apt-get install inside it) only if it is missing,
#   - if everything is already running (PIDs in $STATE/pids valid) it only prints the info,
#   - if only part of it is running, it stops those parts (by PID) and starts all again.
# Host changes: installs the host package "debootstrap" (bookworm) if missing; mounts
# proc (and sysfs, read-only) into the chroot. Nothing from trixie touches the host root.
# Stop with slurm-down.sh (same directory), which stops only the PIDs recorded here.
# The real-Slurm tests (tests/real_slurm) use it; .ci/run calls it when CI=true.
#
# Environment knobs (all optional):
#   SLURM_CHROOT=/var/lib/slurm-chroot   SLURMRESTD_PORT=6820   SLURM_CLUSTER=testcluster
#   SLURM_TEST_USER=testuser (uid 2000)   SLURM_MIN_JOB_AGE=10   SLURM_TOKEN_LIFESPAN=604800
#   SLURM_CTLD_PORT=6817 SLURMD_PORT=6818 SLURMDBD_PORT=6819
#   SLURM_RESET=1  -> wipe slurmctld state + accounting DB before starting (job ids restart at 1)
set -euo pipefail

ROOT=${SLURM_CHROOT:-/var/lib/slurm-chroot}
RESTD_PORT=${SLURMRESTD_PORT:-6820}
CTLD_PORT=${SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${SLURMD_PORT:-6818}
DBD_PORT=${SLURMDBD_PORT:-6819}
CLUSTER=${SLURM_CLUSTER:-testcluster}
TUSER=${SLURM_TEST_USER:-testuser}
TUID=${SLURM_TEST_UID:-2000}
ACCOUNT=${SLURM_ACCOUNT:-testacct}
MIN_JOB_AGE=${SLURM_MIN_JOB_AGE:-10}
LIFESPAN=${SLURM_TOKEN_LIFESPAN:-604800}
STATE=$ROOT/.harness
PIDDIR=$STATE/pids
LOGDIR=$STATE/logs
SUITE=trixie
PKGS="munge slurmctld slurmd slurmrestd slurmdbd slurm-client slurm-wlm-jwt-plugin \
slurm-wlm-mysql-plugin mariadb-server curl ca-certificates jq procps python3"
# start order; stop order is the reverse
DAEMONS="munged mariadbd slurmdbd slurmctld slurmd slurmrestd slurmrestd-local"
STOP_ORDER="slurmrestd-local slurmrestd slurmd slurmctld slurmdbd mariadbd munged"

log() { printf '[slurm-up %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (it creates a chroot, mounts /proc and starts daemons)"
[ -r /etc/debian_version ] && command -v apt-get >/dev/null 2>&1 \
  || die "needs a Debian host (debootstrap and apt-get build the trixie chroot)"
T_START=$(date +%s)

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@"; }

# ---------------------------------------------------------------- PID helpers
. "$(dirname "$(readlink -f "$0")")/slurm-pids.sh"
stop_one() {
  local p
  p=$(pid_of "$1") && term_wait "$p" "$1"
  rm -f "$PIDDIR/$1.pid"
}

# run a daemon in the foreground inside the chroot, detached into its own session;
# the wrapper shell writes its own PID and then execs (env -> chroot -> daemon keep the PID)
start_daemon() {  # name userspec(or "") cmd...
  local n=$1 us=$2; shift 2
  local cr=(chroot); [ -n "$us" ] && cr+=(--userspec="$us")
  : > "$LOGDIR/$n.out"
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$PIDDIR/$n.pid" \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C ${SLURM_JWT_ENV:+SLURM_JWT=daemon} \
    "${cr[@]}" "$ROOT" "$@" >>"$LOGDIR/$n.out" 2>&1 </dev/null 9>&- &
  local i
  for i in $(seq 1 50); do pid_of "$n" >/dev/null && return 0; sleep 0.1; done
  log "$n did not start; last log lines:"; tail -20 "$LOGDIR/$n.out" >&2; return 1
}

wait_for() {  # description timeout_s command...
  local what=$1 t=$2; shift 2
  local end=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || { log "timeout waiting for $what"; return 1; }
    sleep 0.2
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

CURL="in_root curl"   # the chroot has curl; the host needs none
restd_get() {  # path -> http code
  $CURL -s -o /dev/null -w '%{http_code}' -H "X-SLURM-USER-NAME: $TUSER" \
    -H "X-SLURM-USER-TOKEN: $(cat "$STATE/token")" "http://127.0.0.1:$RESTD_PORT$1"
}
restd_ready() { [ "$(restd_get /slurm/v0.0.42/ping)" = 200 ] && [ "$(restd_get /slurmdb/v0.0.42/clusters)" = 200 ]; }

print_info() {
  cat <<EOF
Slurm 24.11 is up (chroot $ROOT).
  REST (TCP, JWT auth):   http://127.0.0.1:$RESTD_PORT   e.g. /slurm/v0.0.42/ping
     headers:             X-SLURM-USER-NAME: $TUSER
                          X-SLURM-USER-TOKEN: <contents of $STATE/token>
  REST (unix socket, rest_auth/local, no auth headers; every request acts as $TUSER):
                          $ROOT/run/slurmrestd/slurmrestd.socket
  partition: debug (default); urgent preempts it (requeue); shared runs many small jobs at once   cluster: $CLUSTER   account: $ACCOUNT   node: node1
  env file:  $STATE/env   (source it: SLURMRESTD_URL, SLURM_USER_NAME, SLURM_JWT, ...)
  new token: chroot $ROOT scontrol token username=$TUSER lifespan=3600
  CLI:       chroot $ROOT squeue | sacct | scontrol show job N
  job files: jobs see the chroot's filesystem; /tmp inside = $ROOT/tmp on the host
  stop:      $(dirname "$(readlink -f "$0")")/slurm-down.sh
EOF
}

mkdir -p "$ROOT"
ROOT=$(readlink -f "$ROOT"); STATE=$ROOT/.harness; PIDDIR=$STATE/pids; LOGDIR=$STATE/logs
mkdir -p "$STATE"
exec 9>"$STATE/lock"   # serialize concurrent slurm-up/slurm-down calls (daemons get fd 9 closed)
flock -w 300 9 || die "timed out waiting for $STATE/lock"
# ---------------------------------------------------------------- packages added since the chroot was made
if [ -e "$STATE/bootstrap.done" ] && [ ! -x "$ROOT/usr/bin/python3" ]; then
  log "apt-get install inside the chroot: python3 (@task.slurm_python's jobs run it)"
  in_root bash -c "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 && apt-get clean" \
    > "$STATE/apt-install.log" 2>&1 || { tail -30 "$STATE/apt-install.log" >&2; die "apt-get install in chroot failed"; }
fi
# ---------------------------------------------------------------- already running?
if [ -d "$PIDDIR" ]; then
  running=0; total=0
  for d in $DAEMONS; do total=$((total+1)); pid_of "$d" >/dev/null && running=$((running+1)); done
  if [ "$running" = "$total" ] && [ -s "$STATE/token" ] && [ -s "$STATE/env" ] && restd_ready && [ -z "${SLURM_RESET:-}" ]; then
    log "already running"; print_info; exit 0
  fi
  if [ "$running" -gt 0 ]; then
    log "partially running ($running/$total) or reset requested: stopping recorded daemons first"
    for d in $STOP_ORDER; do stop_one "$d"; done
  fi
fi

stray=$(chroot_procs | tr '\n' ' ')
[ -z "$stray" ] || die "processes not started by this script are running in $ROOT (PIDs: $stray); run slurm-down.sh first"

# ---------------------------------------------------------------- mounts
mount_fs() {
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  mountpoint -q "$ROOT/sys" || mount -t sysfs -o ro sysfs "$ROOT/sys"
}

# ---------------------------------------------------------------- create chroot
if [ ! -e "$STATE/bootstrap.done" ]; then
  T0=$(date +%s)
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap on the host"
    apt-get update -qq || log "apt-get update reported errors (continuing)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 || die "cannot install debootstrap"
  fi
  # a complete base system made earlier without our marker (e.g. by hand) is accepted as is
  if [ ! -e "$STATE/debootstrap.done" ] && [ -x "$ROOT/usr/bin/dpkg-query" ] &&
     [ "$(chroot "$ROOT" dpkg-query -W -f='${Status}' apt 2>/dev/null)" = "install ok installed" ]; then
    mkdir -p "$STATE"; touch "$STATE/debootstrap.done"
  fi
  if [ ! -e "$STATE/debootstrap.done" ]; then
    log "debootstrap --variant=minbase $SUITE $ROOT (default mirror)"
    debootstrap --variant=minbase "$SUITE" "$ROOT" > "/tmp/slurm-debootstrap.$$.log" 2>&1 \
      || { tail -30 "/tmp/slurm-debootstrap.$$.log" >&2; die "debootstrap failed"; }
    rm -f "/tmp/slurm-debootstrap.$$.log"
    mkdir -p "$STATE"; touch "$STATE/debootstrap.done"
  fi
  mount_fs
  # never let package scripts try to start services inside the chroot
  printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"; chmod +x "$ROOT/usr/sbin/policy-rc.d"
  log "apt-get install inside the chroot: $PKGS"
  in_root bash -c "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends $PKGS && apt-get clean" \
    > "$STATE/apt-install.log" 2>&1 || { tail -30 "$STATE/apt-install.log" >&2; die "apt-get install in chroot failed"; }
  in_root bash -c "id slurmrestd >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin slurmrestd
                   id $TUSER >/dev/null 2>&1 || useradd --uid $TUID --create-home --shell /bin/bash $TUSER"
  touch "$STATE/bootstrap.done"
  log "chroot created in $(( $(date +%s) - T0 ))s"
fi
mkdir -p "$PIDDIR" "$LOGDIR"
mount_fs

# ---------------------------------------------------------------- host-dependent config
for p in $CTLD_PORT $SLURMD_PORT $DBD_PORT $RESTD_PORT; do
  port_open "$p" && die "127.0.0.1:$p is already in use by another process (set SLURM*_PORT to move)"
done
HN=$(hostname -s)
NCPU=$(nproc)
MEM_MB=$(( $(awk '/^MemTotal:/{print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
printf '127.0.0.1 localhost\n127.0.0.1 %s\n::1 localhost ip6-localhost ip6-loopback\n' "$HN" > "$ROOT/etc/hosts"
echo "$HN" > "$ROOT/etc/hostname"

cat > "$ROOT/etc/slurm/slurm.conf" <<EOF
# generated by slurm-up.sh
ClusterName=$CLUSTER
SlurmctldHost=$HN(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/var/lib/slurm/jwt_hs256.key
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# no cgroups inside a chroot: linuxproc tracking, no task plugin, CgroupPlugin=disabled in cgroup.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
JobCompType=jobcomp/none
# keep job comments in accounting: the provider finds an earlier try's job by the key in its comment
AccountingStoreFlags=job_comment
# finished jobs leave the live queue ~MinJobAge..MinJobAge+10s after they end
MinJobAge=$MIN_JOB_AGE
KillWait=5
ReturnToService=2
# preemption by partition priority tier (only the "urgent" partition below outranks "debug")
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=node1 NodeAddr=127.0.0.1 NodeHostname=$HN CPUs=$NCPU RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=node1 Default=YES MaxTime=INFINITE State=UP
# a job in "urgent" (higher PriorityTier) preempts "debug" jobs on node1: requeued if they allow it, else cancelled
PartitionName=urgent Nodes=node1 MaxTime=INFINITE PriorityTier=10 State=UP
# many small jobs at once on the one node (up to 32 per CPU): the differential tests submit all their cases together
PartitionName=shared Nodes=node1 MaxTime=INFINITE OverSubscribe=FORCE:32 State=UP
EOF
echo 'CgroupPlugin=disabled' > "$ROOT/etc/slurm/cgroup.conf"
cat > "$ROOT/etc/slurm/slurmdbd.conf" <<EOF
# generated by slurm-up.sh
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/var/lib/slurm/jwt_hs256.key
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
EOF
cat > "$ROOT/etc/mysql/mariadb.conf.d/99-slurm.cnf" <<'EOF'
[mysqld]
# unix socket only (/run/mysqld/mysqld.sock inside the chroot), no TCP port on the host
skip-networking
innodb_buffer_pool_size=256M
innodb_lock_wait_timeout=900
EOF
in_root bash -c '
  set -e
  chown slurm:slurm /etc/slurm/slurmdbd.conf; chmod 600 /etc/slurm/slurmdbd.conf
  mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/slurm /run/munge /run/mysqld /run/slurmrestd
  chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm /run/slurm
  chown munge:munge /run/munge; chown mysql:mysql /run/mysqld
  chown '"$TUSER:$TUSER"' /run/slurmrestd
  rm -f /run/munge/* /run/mysqld/* /run/slurm/* /run/slurmrestd/*
  if [ ! -s /var/lib/slurm/jwt_hs256.key ]; then
    dd if=/dev/urandom of=/var/lib/slurm/jwt_hs256.key bs=32 count=1 status=none
  fi
  chown slurm:slurm /var/lib/slurm/jwt_hs256.key; chmod 600 /var/lib/slurm/jwt_hs256.key
'
if [ -n "${SLURM_RESET:-}" ]; then
  log "SLURM_RESET: wiping slurmctld state save and the accounting database"
  rm -rf "$ROOT/var/lib/slurm/slurmctld/"*
fi

# ---------------------------------------------------------------- start daemons
# on any failure from here on, stop whatever this run started (logs stay for debugging)
on_exit() {
  local rc=$?
  if [ "$rc" != 0 ]; then
    log "start failed (rc=$rc); see $LOGDIR/*.out and $ROOT/var/log/slurm/*.log; stopping what was started"
    for d in $STOP_ORDER; do stop_one "$d"; done
  fi
}
trap on_exit EXIT
T1=$(date +%s)
start_daemon munged munge:munge /usr/sbin/munged -F
wait_for "munged" 10 in_root munge -n

start_daemon mariadbd "" /usr/sbin/mariadbd --user=mysql
wait_for "mariadb" 60 in_root mariadb-admin ping
[ -n "${SLURM_RESET:-}" ] && in_root mariadb -e "DROP DATABASE IF EXISTS slurm_acct_db"
in_root mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

start_daemon slurmdbd slurm:slurm /usr/sbin/slurmdbd -D
wait_for "slurmdbd port $DBD_PORT" 60 port_open "$DBD_PORT"
wait_for "slurmdbd answering" 30 in_root sacctmgr -n list cluster
if ! in_root sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
  in_root sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi
if ! in_root sacctmgr -n -P list account format=account | grep -qx "$ACCOUNT"; then
  in_root sacctmgr -i add account "$ACCOUNT" Description=test Organization=test >/dev/null
fi
for u in "$TUSER" root; do
  if ! in_root sacctmgr -n -P list assoc user="$u" account="$ACCOUNT" format=user | grep -qx "$u"; then
    in_root sacctmgr -i add user "$u" account="$ACCOUNT" DefaultAccount="$ACCOUNT" >/dev/null
  fi
done

start_daemon slurmctld slurm:slurm /usr/sbin/slurmctld -D -i
wait_for "slurmctld" 60 bash -c "chroot '$ROOT' scontrol ping | grep -q UP"

start_daemon slurmd "" /usr/sbin/slurmd -D -N node1
wait_for "node1 idle" 60 bash -c "chroot '$ROOT' sinfo -h -n node1 -o %T | grep -Eq '^(idle|mixed|allocated)'"

in_root scontrol token username="$TUSER" lifespan="$LIFESPAN" | sed -n 's/^SLURM_JWT=//p' > "$STATE/token"
[ -s "$STATE/token" ] || die "scontrol token returned nothing"
chmod 600 "$STATE/token"

# slurmrestd refuses to run as root or as SlurmUser. Two instances, because SLURM_JWT=daemon
# (needed for rest_auth/jwt) breaks rest_auth/local in the same process:
#  - TCP 127.0.0.1:$RESTD_PORT, rest_auth/jwt, runs as the unprivileged "slurmrestd" user;
#    each request acts as the user named in X-SLURM-USER-NAME with a valid X-SLURM-USER-TOKEN.
#  - unix socket, rest_auth/local, runs as the test user; every request acts as that user.
SLURM_JWT_ENV=1 start_daemon slurmrestd slurmrestd:slurmrestd /usr/sbin/slurmrestd \
  -a rest_auth/jwt "127.0.0.1:$RESTD_PORT"
start_daemon slurmrestd-local "$TUSER:$TUSER" /usr/sbin/slurmrestd \
  -a rest_auth/local unix:/run/slurmrestd/slurmrestd.socket
wait_for "slurmrestd" 30 restd_ready
wait_for "slurmrestd-local" 30 $CURL -sf -o /dev/null --unix-socket /run/slurmrestd/slurmrestd.socket http://localhost/slurm/v0.0.42/ping

cat > "$STATE/env" <<EOF
SLURM_CHROOT=$ROOT
SLURMRESTD_URL=http://127.0.0.1:$RESTD_PORT
SLURMRESTD_SOCKET=$ROOT/run/slurmrestd/slurmrestd.socket
SLURM_USER_NAME=$TUSER
SLURM_JWT=$(cat "$STATE/token")
SLURM_JWT_KEY=$ROOT/var/lib/slurm/jwt_hs256.key
SLURM_PARTITION=debug
SLURM_CLUSTER=$CLUSTER
EOF
chmod 600 "$STATE/env"
trap - EXIT
log "daemons started in $(( $(date +%s) - T1 ))s (total $(( $(date +%s) - T_START ))s)"
print_info
