#!/usr/bin/env bash
# The local lab: `lab.sh up` (start or reuse it, provision it with site.yml), `lab.sh down`
# (destroy it: no container, docker network, ssh process or lock file left), `lab.sh status`.
# Machines come from the Vagrantfile (docker provider here; LAB_PROVIDER=virtualbox|libvirt
# elsewhere). Concurrent calls are serialised, so there is never a half-created second lab.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# Debian's docker client first (it matches Debian's dockerd); the venv for ansible-playbook.
export PATH=$ROOT/.venv/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
export ANSIBLE_CONFIG=$ROOT/ansible.cfg
export VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_DEFAULT_PROVIDER=${LAB_PROVIDER:-docker}
PROVIDER=${LAB_PROVIDER:-docker}
LABEL="crawlfleet.lab=$ROOT"

die() { echo "lab: $*" >&2; exit 1; }
# Children must not inherit the lock on fd 9: ssh masters (ControlPersist) outlive this script.
unlocked() { "$@" 9<&-; }
say() { echo "lab: $*"; }

usage() { echo "usage: $0 up|down|status" >&2; exit 2; }
[ $# -eq 1 ] || usage

[ "$(id -u)" -eq 0 ] || die "needs root (dockerd and the lab's containers); run it as root or with sudo"
command -v vagrant >/dev/null || die "vagrant is not installed (run: make install)"
[ -x .venv/bin/ansible-playbook ] || die "no .venv with ansible (run: make install)"

# Vagrant machine name -> state (running, stopped, not_created, ...); STATES sums them up.
declare -A STATE=()
STATES=""
read_states() {
  STATE=()
  local machine
  while IFS=, read -r _ machine kind value _; do
    [ "$kind" = state ] && STATE[$machine]=$value
  done < <(unlocked vagrant status --machine-readable 2>/dev/null || true)
  [ ${#STATE[@]} -gt 0 ] || die "vagrant status failed; run 'vagrant status' to see why"
  STATES=""
  for machine in $(printf '%s\n' "${!STATE[@]}" | sort); do STATES+="$machine=${STATE[$machine]} "; done
  STATES=${STATES% }
}

docker_lab_containers() { docker ps -aq --filter "label=$LABEL"; }

# Containers carrying our names but made by another checkout, or ours but no longer known to
# Vagrant (its .vagrant/ directory was lost): another checkout's running lab stops us; stopped
# ones (what a killed dockerd leaves behind) and our own unknown ones are removed.
clear_strays() {
  local machine id label known running
  for machine in "${!STATE[@]}"; do
    id=$(docker ps -aq --filter "name=^crawlfleet-$machine\$")
    [ -n "$id" ] || continue
    label=$(docker inspect -f '{{ index .Config.Labels "crawlfleet.lab" }}' "$id")
    running=$(docker inspect -f '{{ .State.Running }}' "$id")
    if [ "$label" != "$ROOT" ] && [ "$running" = true ]; then
      die "container crawlfleet-$machine belongs to the running lab of ${label:-another project}; run 'make lab-down' there first"
    fi
    if [ "$label" != "$ROOT" ]; then
      say "removing stopped container crawlfleet-$machine left behind by the lab of ${label:-another project}"
      docker rm -f "$id" >/dev/null
      continue
    fi
    known=$(cat ".vagrant/machines/$machine/$PROVIDER/id" 2>/dev/null || true)
    if [ "${known:0:12}" != "${id:0:12}" ]; then
      say "removing container crawlfleet-$machine left behind by an earlier lab"
      docker rm -f "$id" >/dev/null
    fi
  done
}

# ssh connection-sharing masters of Ansible (ControlPersist) for the lab hosts.
close_ssh_masters() {
  local sock
  for sock in .lab/cp/*; do
    [ -S "$sock" ] || continue
    ssh -o ControlPath="$sock" -O exit lab >/dev/null 2>&1 || true
    rm -f "$sock"
  done
  rmdir .lab/cp 2>/dev/null || true
}

# The image the Vagrantfile gives a machine: its release of LAB_RELEASES (host=release,...), else
# bookworm's (LAB_IMAGE).
image_of() {
  local entry
  for entry in ${LAB_RELEASES:+${LAB_RELEASES//,/ }}; do
    if [ "${entry%%=*}" = "$1" ] && [ "${entry#*=}" != bookworm ]; then
      echo "crawlfleet/lab-${entry#*=}:latest"
      return
    fi
  done
  echo "${LAB_IMAGE:-crawlfleet/lab-bookworm:latest}"
}

# A lab created from an older image (or with other LAB_RELEASES) keeps running it: say so rather
# than mixing images.
warn_old_image() {
  local id name want
  for id in $(docker_lab_containers); do
    name=$(docker inspect -f '{{ .Name }}' "$id")
    want=$(docker image inspect -f '{{ .Id }}' "$(image_of "${name#/crawlfleet-}")" 2>/dev/null || true)
    if [ "$(docker inspect -f '{{ .Image }}' "$id")" != "$want" ]; then
      say "note: ${name#/} runs another image than $(image_of "${name#/crawlfleet-}") (an older build, or other LAB_RELEASES); 'make lab-down lab-up' recreates it"
      return
    fi
  done
}

lab_up() {
  local start=$SECONDS all_running=1 machine
  if [ "$PROVIDER" = docker ]; then
    scripts/dockerd.sh
    scripts/lab-image.sh
  fi
  read_states
  for machine in "${!STATE[@]}"; do
    [ "${STATE[$machine]}" = running ] || all_running=0
  done
  if [ $all_running -eq 1 ]; then
    say "the lab is already up ($STATES): reusing it, provisioning it again"
    [ "$PROVIDER" != docker ] || warn_old_image
    # What Vagrant's provisioner would run (same inventory, limit all), without its overhead.
    say "ansible-playbook site.yml -i inventory"
    unlocked ansible-playbook site.yml -i inventory
  else
    [ "$PROVIDER" != docker ] || clear_strays
    case "$STATES" in
      *=stopped*) say "starting the lab's stopped machines and creating missing ones ($STATES)" ;;
      *=running*) say "completing the lab ($STATES)" ;;
      *) say "creating the lab ($STATES)" ;;
    esac
    unlocked vagrant up --provider "$PROVIDER" --provision
  fi
  say "up in $((SECONDS - start))s"
  lab_status
}

lab_down() {
  local start=$SECONDS left net lock
  close_ssh_masters
  if [ "$PROVIDER" = docker ]; then
    # Without a daemon there is nothing to destroy, but the state a killed one left must go too.
    scripts/dockerd.sh >/dev/null
  fi
  if [ -d .vagrant/machines ]; then
    unlocked vagrant destroy -f
  fi
  if [ "$PROVIDER" = docker ]; then
    left=$(docker_lab_containers)
    if [ -n "$left" ]; then
      say "removing containers Vagrant did not know about: $(echo "$left" | tr '\n' ' ')"
      # shellcheck disable=SC2086
      docker rm -f $left >/dev/null
    fi
    # Vagrant removes the network with the last machine; not when the machines were lost.
    net="vagrant_network_${LAB_NETWORK:-172.30.0.0/24}"
    if docker network inspect "$net" >/dev/null 2>&1 \
      && [ -z "$(docker network inspect -f '{{ range .Containers }}{{ .Name }} {{ end }}' "$net")" ]; then
      docker network rm "$net" >/dev/null && say "removed docker network $net"
    fi
  fi
  # Vagrant's per-project state, and the facts of hosts that no longer exist.
  rm -rf .vagrant .lab/facts
  # Vagrant's lock files, unless another Vagrant (of another project) holds one right now.
  for lock in "${VAGRANT_HOME:-$HOME/.vagrant.d}"/data/lock.*.lock \
    "${VAGRANT_HOME:-$HOME/.vagrant.d}"/data/machine-index/*.lock; do
    if [ -e "$lock" ] && flock -n "$lock" true; then rm -f "$lock"; fi
  done
  say "down in $((SECONDS - start))s"
}

# Only running machines are asked: the addresses of absent ones are routed off this machine.
lab_status() {
  read_states
  unlocked .venv/bin/python scripts/lab_status.py $STATES
}

# One lab operation at a time, serialised on this script file: no lock file to leave behind.
exec 9<"$0"
flock 9

case "$1" in
  up) lab_up ;;
  down) lab_down ;;
  status) lab_status ;;
  *) usage ;;
esac
