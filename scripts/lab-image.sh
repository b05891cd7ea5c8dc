#!/usr/bin/env bash
# Build the lab's host images locally (no image registry is reachable from our machines), one per
# Debian release:
#   debootstrap --variant=minbase <release> -> docker import crawlfleet/<release>-minbase
#   -> lab/image/Dockerfile -> crawlfleet/lab-<release> (systemd, sshd, python3, sudo, vagrant user).
# `lab-image.sh [release...]` builds the releases named (bookworm = Debian 12, trixie = Debian 13);
# without arguments, the ones the lab will run: bookworm, plus those LAB_RELEASES gives hosts
# (`LAB_RELEASES=a=trixie,c=trixie`, read by the Vagrantfile too).
# Rebuilds only what is missing or whose inputs changed; the rootfs tarballs are cached in .lab/.
# Also puts Vagrant's insecure key pair into .lab/ssh/ (mode 0600: ssh refuses it otherwise),
# where the Vagrantfile and inventory/ expect it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

KEYDIR=.lab/ssh
KEY=$KEYDIR/vagrant_insecure_key
SUPPORTED="bookworm trixie"

die() { echo "lab-image: $*" >&2; exit 1; }
command -v debootstrap >/dev/null || die "debootstrap is missing (run: make install)"

# The releases to build: the arguments, else bookworm and every release of LAB_RELEASES.
releases() {
  if [ $# -gt 0 ]; then printf '%s\n' "$@"; return; fi
  echo bookworm
  local entry
  for entry in ${LAB_RELEASES:+${LAB_RELEASES//,/ }}; do
    [[ $entry == *=* ]] || die "LAB_RELEASES entry '$entry' is not host=release (e.g. LAB_RELEASES=a=trixie,c=trixie)"
    echo "${entry#*=}"
  done
}

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

# crawlfleet/<release>-minbase from a debootstrap rootfs (cached as .lab/<release>-minbase.tar).
build_base() {
  local release=$1 base=$2 tarball=.lab/$1-minbase.tar log=.lab/debootstrap-$1.log
  if [ ! -s "$tarball" ]; then
    local root=.lab/rootfs-$release.tmp start=$SECONDS
    rm -rf "$root"
    mkdir -p .lab
    echo "lab-image: debootstrap --variant=minbase $release from $(mirror)"
    debootstrap --variant=minbase "$release" "$root" "$(mirror)" >"$log" 2>&1 \
      || { tail -n 20 "$log" >&2; rm -rf "$root"; die "debootstrap of $release failed; log: $log"; }
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    echo "lab-image: rootfs cached in $tarball ($((SECONDS - start))s)"
  fi
  docker import "$tarball" "$base" >/dev/null
  echo "lab-image: imported $base"
}

# crawlfleet/lab-<release> (LAB_IMAGE names bookworm's) from lab/image/ on top of its base.
build_image() {
  local release=$1 base=crawlfleet/$1-minbase:latest image=crawlfleet/lab-$1:latest
  [ "$release" != bookworm ] || image=${LAB_IMAGE:-$image}
  local log=.lab/image-build-$release.log
  docker image inspect "$base" >/dev/null 2>&1 || build_base "$release" "$base"

  # The build context: lab/image/ plus the public key. Its hash (with the release), stored as an
  # image label, decides whether the image is current.
  local context sum current start
  context=$(mktemp -d)
  cp -r lab/image/. "$context/"
  cp "$KEY.pub" "$context/vagrant.pub"
  sum=$( (cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum; echo "$release") | sha256sum | cut -c1-16)
  current=$(docker image inspect -f '{{ index .Config.Labels "crawlfleet.context" }}' "$image" 2>/dev/null || true)
  if [ "$current" = "$sum" ]; then
    rm -rf "$context"
    echo "lab-image: $image is up to date"
    return 0
  fi
  start=$SECONDS
  echo "lab-image: building $image (${current:+inputs changed, }log: $log)"
  mkdir -p .lab
  docker build --build-arg "RELEASE=$release" --label "crawlfleet.context=$sum" -t "$image" "$context" >"$log" 2>&1 \
    || { rm -rf "$context"; tail -n 20 "$log" >&2; die "docker build of $image failed; log: $log"; }
  rm -rf "$context"
  # Older builds of the image stay dangling otherwise.
  docker image prune -f --filter label=crawlfleet.context >/dev/null
  echo "lab-image: built $image in $((SECONDS - start))s"
}

wanted=$(releases "$@" | sort -u)
for release in $wanted; do
  [[ " $SUPPORTED " == *" $release "* ]] || die "no lab image for release '$release' (supported: $SUPPORTED)"
done
scripts/dockerd.sh >/dev/null
install_key
for release in $wanted; do build_image "$release"; done
