#!/usr/bin/env bash
# Install the Debian packages and the project virtualenv that every make target needs.
# Idempotent: a second run changes nothing and takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  redis-server rabbitmq-server docker.io iptables debootstrap nftables tinyproxy
  openssh-client sshpass rsync curl ca-certificates make git python3-venv
  chromium chromium-driver prometheus
)

# Valkey, the hub's other server: Debian 12 has it only in bookworm-backports (Valkey 8), which
# this script adds as a source of its own. Backports is NotAutomatic/ButAutomaticUpgrades, so apt
# takes nothing else from it; only the packages below are installed from it, explicitly.
BACKPORTS_PACKAGES=(valkey-server)
BACKPORTS_SOURCES=/etc/apt/sources.list.d/bookworm-backports.sources

die() { echo "install-deps: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get and dockerd); run it as root or with sudo"
command -v apt-get >/dev/null || die "needs a Debian system with apt-get (Debian 12 is what we test on)"
grep -qs '^deb\|^Types: deb' /etc/apt/sources.list /etc/apt/sources.list.d/* \
  || die "no Debian package sources configured in /etc/apt/sources.list(.d)"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }

# Runs "$@" with Debian's policy-rc.d refusing to start services (unless a policy is there
# already), so a package's postinst does not start a second server on redis-server's port 6379.
without_service_starts() {
  local policy=/usr/sbin/policy-rc.d
  if [ -e "$policy" ]; then "$@"; return; fi
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  local rc=0
  "$@" || rc=$?
  rm -f "$policy"
  return "$rc"
}

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done
# On Debian 12 they come from bookworm-backports; elsewhere (Debian 13 has Valkey 8.1 in main)
# from the release itself.
backports_missing=()
for pkg in "${BACKPORTS_PACKAGES[@]}"; do
  if ! installed "$pkg"; then
    if [ "$codename" = bookworm ]; then backports_missing+=("$pkg"); else missing+=("$pkg"); fi
  fi
done
installed vagrant || vagrant_missing=1
if [ ${#backports_missing[@]} -gt 0 ] && ! grep -qsE \
  '^[[:space:]]*(deb[[:space:]].*[[:space:]]|Suites:.*[[:space:]])bookworm-backports([[:space:]]|$)' \
  /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
  cat >"$BACKPORTS_SOURCES" <<'SOURCES'
# Added by crawlfleet's scripts/install-deps.sh for valkey-server (Valkey 8 on Debian 12).
# Backports is NotAutomatic: apt installs from it only what is asked for with -t bookworm-backports.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi
if [ ${#missing[@]} -gt 0 ] || [ ${#backports_missing[@]} -gt 0 ] || [ -n "${vagrant_missing:-}" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  [ ${#missing[@]} -eq 0 ] || apt-get install -y -qq "${missing[@]}" >/dev/null
  [ ${#backports_missing[@]} -eq 0 ] || without_service_starts \
    apt-get install -y -qq -t bookworm-backports "${backports_missing[@]}" >/dev/null
  # Vagrant's recommends pull in VirtualBox/libvirt bits we cannot use here.
  [ -z "${vagrant_missing:-}" ] || apt-get install -y -qq --no-install-recommends vagrant >/dev/null
fi
# Debian starts these on install; our tests start their own instances on free ports (prometheus:
# only its promtool is used, to check the alert rules).
# Without systemd, only a running RabbitMQ is stopped: its init script's stop runs rabbitmqctl,
# which leaves an epmd daemon on port 4369 behind when no broker was running.
for svc in redis-server valkey-server rabbitmq-server tinyproxy prometheus; do
  systemctl disable --now "$svc" >/dev/null 2>&1 && continue
  if [ "$svc" = rabbitmq-server ] && ! pgrep -u rabbitmq beam.smp >/dev/null 2>&1; then
    continue
  fi
  service "$svc" stop >/dev/null 2>&1 || true
done
# Masked too: valkey-server.service would take port 6379 beside redis-server's (its own default).
systemctl mask valkey-server.service >/dev/null 2>&1 || true

scripts/venv.sh
echo "install-deps: Debian packages and .venv ready"
