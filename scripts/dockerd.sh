#!/usr/bin/env bash
# Make sure Debian's dockerd answers, starting it directly (its init script fails on our machines).
#
# A dockerd killed together with the session that started it leaves state behind: its pid files,
# containers recorded as running, and bridge interfaces (docker0, br-*) that make a new dockerd's
# lab network unroutable ("No route to host"). This script clears those before starting a new
# daemon, and only then. Idempotent: when dockerd already answers it changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's client matches Debian's daemon; /usr/local/bin/docker is a newer standalone client.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

DOCKER=/usr/bin/docker
PIDFILE=/var/run/docker.pid
CONTAINERD_PIDFILE=/var/run/docker/containerd/containerd.pid
LOG=${DOCKERD_LOG:-/var/log/crawlfleet-dockerd.log}
WAIT=${DOCKERD_WAIT:-60}

die() { echo "dockerd: $*" >&2; exit 1; }
answers() { "$DOCKER" info >/dev/null 2>&1; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { [ -s "$1" ] && tr -dc '0-9' <"$1" || true; }
# The name of a live process, empty when it is gone.
comm_of() { cat "/proc/$1/comm" 2>/dev/null || true; }

[ "$(id -u)" -eq 0 ] || die "needs root to run dockerd"
[ -x /usr/sbin/dockerd ] && [ -x "$DOCKER" ] || die "Debian's docker.io is not installed (run: make install)"
command -v iptables >/dev/null || die "iptables is missing: dockerd needs it for the lab's NAT (run: make install)"

# Serialise concurrent callers on this script file itself: no lock file to leave behind.
exec 9<"$0"
flock 9

if answers; then
  echo "dockerd: running (pid $(pid_of "$PIDFILE"))"
  exit 0
fi

wait_for_daemon() {
  local pid=$1 deadline=$((SECONDS + WAIT))
  while [ $SECONDS -lt $deadline ]; do
    answers && return 0
    alive "$pid" || return 1
    sleep 0.5
  done
  return 1
}

# A dockerd that is still starting up: give it its time rather than starting a second one.
pid=$(pid_of "$PIDFILE")
if alive "$pid" && [ "$(comm_of "$pid")" = dockerd ]; then
  echo "dockerd: pid $pid is starting, waiting up to ${WAIT}s"
  wait_for_daemon "$pid" && { echo "dockerd: running (pid $pid)"; exit 0; }
  die "dockerd pid $pid does not answer; see $LOG"
fi

# From here no dockerd runs: whatever it left behind is stale.
cleaned=()
if [ -e "$PIDFILE" ]; then rm -f "$PIDFILE"; cleaned+=("$PIDFILE"); fi
cpid=$(pid_of "$CONTAINERD_PIDFILE")
if [ -e "$CONTAINERD_PIDFILE" ] && ! { alive "$cpid" && [ "$(comm_of "$cpid")" = containerd ]; }; then
  rm -f "$CONTAINERD_PIDFILE"
  cleaned+=("$CONTAINERD_PIDFILE")
fi
# Bridges are recreated by dockerd from its network store; stale ones keep old routes and
# neighbour entries that black-hole the recreated network.
for dev in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
  case "$dev" in
    docker0 | br-*) ip link delete "$dev" && cleaned+=("bridge $dev") ;;
  esac
done
[ ${#cleaned[@]} -eq 0 ] || echo "dockerd: removed what a previous dockerd left: ${cleaned[*]}"

mkdir -p "$(dirname "$LOG")"
echo "--- $(date -u +%FT%TZ) started by $0" >>"$LOG"
# setsid: the daemon outlives this script and the make/pytest process that ran it.
setsid /usr/sbin/dockerd --pidfile "$PIDFILE" >>"$LOG" 2>&1 </dev/null 9<&- &
pid=$!
if ! wait_for_daemon "$pid"; then
  tail -n 20 "$LOG" >&2
  die "dockerd did not answer within ${WAIT}s; full log: $LOG"
fi
# Containers the dead daemon recorded as running were not restarted (no restart policy); they
# stay as stopped containers that scripts/lab.sh reuses or removes.
echo "dockerd: started (pid $pid), log: $LOG"
