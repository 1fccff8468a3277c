#!/usr/bin/env bash
# slurm-down.sh - stop what slurm-up.sh started, by the PIDs it recorded, then unmount.
# Leaves the chroot (default /var/lib/slurm-chroot) in place for reuse.
#  1. cancels queued/running jobs (so no slurmstepd/job process outlives slurmd),
#  2. SIGTERM (then SIGKILL after 10 s) each recorded daemon, in reverse start order,
#     after checking the PID is still that daemon inside this chroot,
#  3. kills leftover job processes inside the chroot (slurmstepd, or owned by the test user)
#     by PID, and reports (but does not kill) any other process found inside the chroot,
#  4. unmounts $ROOT/sys and $ROOT/proc (and $ROOT/dev/pts, $ROOT/dev if mounted).
set -uo pipefail

ROOT=${SLURM_CHROOT:-/var/lib/slurm-chroot}
TUSER=${SLURM_TEST_USER:-testuser}
TUID=${SLURM_TEST_UID:-2000}
[ "$(id -u)" = 0 ] || { echo "slurm-down.sh must run as root" >&2; exit 1; }
[ -d "$ROOT" ] || { echo "no chroot at $ROOT, nothing to do"; exit 0; }
ROOT=$(readlink -f "$ROOT")
PIDDIR=$ROOT/.harness/pids
mkdir -p "$ROOT/.harness"
exec 9>"$ROOT/.harness/lock"
flock -w 300 9 || { echo "timed out waiting for $ROOT/.harness/lock" >&2; exit 1; }
log() { printf '[slurm-down %s] %s\n' "$(date +%T)" "$*" >&2; }

. "$(dirname "$(readlink -f "$0")")/slurm-pids.sh"

# 1. cancel jobs while slurmctld is still up
if pid_of slurmctld >/dev/null; then
  jobs=$(chroot "$ROOT" squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs: $jobs"
    chroot "$ROOT" scancel $jobs 2>/dev/null || true
    for i in $(seq 1 100); do
      left=$(chroot "$ROOT" squeue -h -o %i 2>/dev/null | wc -l)
      steps=0; for p in $(chroot_procs); do [ "$(cat /proc/$p/comm 2>/dev/null)" = slurmstepd ] && steps=$((steps+1)); done
      [ "$left" = 0 ] && [ "$steps" = 0 ] && break
      sleep 0.2
    done
  fi
fi

# 2. recorded daemons, reverse order
for d in slurmrestd-local slurmrestd slurmd slurmctld slurmdbd mariadbd munged; do
  if p=$(pid_of "$d"); then log "stopping $d (pid $p)"; term_wait "$p" "$d"; fi
  rm -f "$PIDDIR/$d.pid"
done

# 3. leftovers inside the chroot
for p in $(chroot_procs); do
  comm=$(cat /proc/"$p"/comm 2>/dev/null) || continue
  uid=$(awk '/^Uid:/{print $2}' /proc/"$p"/status 2>/dev/null)
  case "$comm" in
    slurmstepd|slurmscriptd) log "killing leftover $comm (pid $p)"; term_wait "$p" "$comm" ;;
    *) if [ "$uid" = "$TUID" ]; then log "killing leftover job process $comm (pid $p, uid $TUID)"; term_wait "$p" "$comm"
       else log "WARNING: process $p ($comm) still runs inside $ROOT; not started by slurm-up, left alone"; fi ;;
  esac
done

# 4. unmount (innermost first)
for m in dev/pts dev sys proc; do
  if mountpoint -q "$ROOT/$m"; then
    umount "$ROOT/$m" 2>/dev/null || { log "umount $ROOT/$m busy, lazy unmount"; umount -l "$ROOT/$m"; }
  fi
done
log "stopped; chroot left in $ROOT"
