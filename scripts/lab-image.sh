#!/usr/bin/env bash
# Build the lab's host image locally (no image registry is reachable from our machines):
#   debootstrap --variant=minbase bookworm -> docker import crawlfleet/bookworm-minbase
#   -> lab/image/Dockerfile -> crawlfleet/lab-bookworm (systemd, sshd, python3, sudo, vagrant user).
# Rebuilds only what is missing or whose inputs changed; the rootfs tarball is cached in .lab/.
# Also puts Vagrant's insecure key pair into .lab/ssh/ (mode 0600: ssh refuses it otherwise),
# where the Vagrantfile and inventory/ expect it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

BASE=crawlfleet/bookworm-minbase:latest
IMAGE=${LAB_IMAGE:-crawlfleet/lab-bookworm:latest}
TARBALL=.lab/bookworm-minbase.tar
KEYDIR=.lab/ssh
KEY=$KEYDIR/vagrant_insecure_key

die() { echo "lab-image: $*" >&2; exit 1; }
command -v debootstrap >/dev/null || die "debootstrap is missing (run: make install)"

# The mirror this machine already uses, so the lab needs no other network access.
mirror() {
  if [ -n "${LAB_MIRROR:-}" ]; then echo "$LAB_MIRROR"; return; fi
  local uri
  uri=$(grep -hsE '^\s*(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
    /etc/apt/sources.list | grep -v security | grep -oE 'https?://[^ ]+' | head -n1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# Vagrant's insecure key pair ships inside its gem; Debian and HashiCorp put the gem in different places.
install_key() {
  [ -s "$KEY" ] && [ -s "$KEY.pub" ] && return 0
  local src=""
  for dir in /usr/share/rubygems-integration/all/gems/vagrant-*/keys \
             /usr/lib/ruby/vendor_ruby/vagrant/keys \
             /opt/vagrant/embedded/gems/gems/vagrant-*/keys \
             /opt/vagrant/embedded/gems/*/gems/vagrant-*/keys; do
    if [ -s "$dir/vagrant" ] && [ -s "$dir/vagrant.pub" ]; then src=$dir; fi
  done
  [ -n "$src" ] || die "cannot find Vagrant's insecure key pair (keys/vagrant in the vagrant gem); is vagrant installed?"
  install -d -m 0700 "$KEYDIR"
  install -m 0600 "$src/vagrant" "$KEY"
  install -m 0644 "$src/vagrant.pub" "$KEY.pub"
  echo "lab-image: Vagrant's insecure key pair copied from $src to $KEYDIR/"
}

build_base() {
  if [ ! -s "$TARBALL" ]; then
    local root=.lab/rootfs.tmp start=$SECONDS
    rm -rf "$root"
    mkdir -p .lab
    echo "lab-image: debootstrap --variant=minbase bookworm from $(mirror)"
    debootstrap --variant=minbase bookworm "$root" "$(mirror)" >.lab/debootstrap.log 2>&1 \
      || { tail -n 20 .lab/debootstrap.log >&2; die "debootstrap failed; log: .lab/debootstrap.log"; }
    tar -C "$root" --numeric-owner -cf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    rm -rf "$root"
    echo "lab-image: rootfs cached in $TARBALL ($((SECONDS - start))s)"
  fi
  docker import "$TARBALL" "$BASE" >/dev/null
  echo "lab-image: imported $BASE"
}

scripts/dockerd.sh >/dev/null
install_key
docker image inspect "$BASE" >/dev/null 2>&1 || build_base

# The build context: lab/image/ plus the public key. Its hash, stored as an image label, decides
# whether the image is current.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp -r lab/image/. "$context/"
cp "$KEY.pub" "$context/vagrant.pub"
sum=$( (cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
current=$(docker image inspect -f '{{ index .Config.Labels "crawlfleet.context" }}' "$IMAGE" 2>/dev/null || true)
if [ "$current" = "$sum" ]; then
  echo "lab-image: $IMAGE is up to date"
  exit 0
fi
start=$SECONDS
echo "lab-image: building $IMAGE (${current:+inputs changed, }log: .lab/image-build.log)"
mkdir -p .lab
docker build --label "crawlfleet.context=$sum" -t "$IMAGE" "$context" >.lab/image-build.log 2>&1 \
  || { tail -n 20 .lab/image-build.log >&2; die "docker build failed; log: .lab/image-build.log"; }
# Older builds of the image stay dangling otherwise.
docker image prune -f --filter label=crawlfleet.context >/dev/null
echo "lab-image: built $IMAGE in $((SECONDS - start))s"
