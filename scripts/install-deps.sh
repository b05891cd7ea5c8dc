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

die() { echo "install-deps: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get and dockerd); run it as root or with sudo"
command -v apt-get >/dev/null || die "needs a Debian system with apt-get (Debian 12 is what we test on)"
grep -qs '^deb\|^Types: deb' /etc/apt/sources.list /etc/apt/sources.list.d/* \
  || die "no Debian package sources configured in /etc/apt/sources.list(.d)"

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ! dpkg-query -W -f='${Status}' vagrant 2>/dev/null | grep -q "ok installed"; then
  vagrant_missing=1
fi
if [ ${#missing[@]} -gt 0 ] || [ -n "${vagrant_missing:-}" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  [ ${#missing[@]} -eq 0 ] || apt-get install -y -qq "${missing[@]}" >/dev/null
  # Vagrant's recommends pull in VirtualBox/libvirt bits we cannot use here.
  [ -z "${vagrant_missing:-}" ] || apt-get install -y -qq --no-install-recommends vagrant >/dev/null
fi
# Debian starts these on install; our tests start their own instances on free ports (prometheus:
# only its promtool is used, to check the alert rules).
for svc in redis-server rabbitmq-server tinyproxy prometheus; do
  systemctl disable --now "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
done

scripts/venv.sh
echo "install-deps: Debian packages and .venv ready"
