# Sourced by slurm-up.sh and slurm-down.sh: finding and stopping the daemons they recorded.
# Needs ROOT (the chroot), PIDDIR (where the PID files are) and a log function.

# A recorded PID is "ours" only if the process exists, is chrooted into $ROOT and has the
# expected command name (guards against PID reuse after a reboot or crash).
pid_of() {  # name (its PID file); the process name is the same without a "-local" suffix
  local n=${1%-local} f=$PIDDIR/$1.pid p
  [ -s "$f" ] || return 1
  p=$(cat "$f")
  alive "$p" || return 1
  [ "$(readlink /proc/"$p"/root 2>/dev/null)" = "$ROOT" ] || return 1
  [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$n" ] || return 1
  echo "$p"
}

# a zombie counts as gone: PID 1 may reap orphans only every few seconds
alive() { [ -d /proc/"$1" ] && ! grep -q '^State:[[:space:]]*Z' /proc/"$1"/status 2>/dev/null; }

chroot_procs() {  # PIDs of every process whose root directory is the chroot
  local d; for d in /proc/[0-9]*; do
    [ "$(readlink "$d/root" 2>/dev/null)" = "$ROOT" ] && echo "${d#/proc/}"; done; return 0; }

term_wait() {  # pid label: SIGTERM, then SIGKILL if it is still alive 10 s later
  local p=$1 i
  kill -TERM "$p" 2>/dev/null || return 0
  for i in $(seq 1 100); do alive "$p" || return 0; sleep 0.1; done
  log "$2 ($p) ignored SIGTERM for 10s, sending SIGKILL"; kill -KILL "$p" 2>/dev/null; sleep 0.2
}
