#!/bin/sh
# Installed by Ansible (role crawler): the releases of one Scrapy project on a worker.
#   crawlfleet-project install PROJECT_DIR KEY PLATFORM.tar   build PROJECT_DIR/releases/KEY from
#       PROJECT_DIR/release.tar (src/, wheels/, requirements.txt) and the platform wheelhouse: a
#       virtualenv (pip --no-index: hosts never reach PyPI) and the source tree on its path
#   crawlfleet-project activate PROJECT_DIR KEY   make KEY current; the one it replaces becomes
#       previous; every other release is removed
#   crawlfleet-project rollback PROJECT_DIR       swap current and previous
# activate and rollback print "changed KEY" or "unchanged KEY" (KEY: the current release).
set -eu
umask 022
usage() { echo "usage: crawlfleet-project install|activate|rollback PROJECT_DIR [KEY [PLATFORM.tar]]" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1
dir=$2
current() { [ -L "$dir/current" ] && basename "$(readlink "$dir/current")" || true; }
previous() { [ -L "$dir/previous" ] && basename "$(readlink "$dir/previous")" || true; }
point() { ln -sfn "releases/$2" "$dir/$1.new" && mv -T "$dir/$1.new" "$dir/$1"; }
prune() {
  for release in "$dir"/releases/*; do
    [ -d "$release" ] || continue
    case "$(basename "$release")" in "$(current)" | "$(previous)") ;; *) rm -rf "$release" ;; esac
  done
}
case $action in
  install)
    [ $# -eq 4 ] || usage
    release=$dir/releases/$3
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    rm -rf "$release"
    mkdir -p "$release" "$work/platform"
    tar -xf "$4" -C "$work/platform"
    tar -xf "$dir/release.tar" -C "$release" src requirements.txt
    tar -xf "$dir/release.tar" -C "$work" wheels 2>/dev/null || mkdir -p "$work/wheels"
    python3 -m venv "$release/venv"
    "$release/venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
      --find-links "$work/platform" --find-links "$work/wheels" crawlfleet -r "$release/requirements.txt"
    # Compiled now, as root, so the workers never write into the read-only release.
    "$release/venv/bin/python" -m compileall -q "$release/venv/lib" "$release/src" >/dev/null || true
    touch "$release/.installed"
    ;;
  activate)
    [ $# -eq 3 ] || usage
    [ -f "$dir/releases/$3/.installed" ] || { echo "release $3 of $dir is not installed" >&2; exit 1; }
    if [ "$(current)" = "$3" ]; then
      echo "unchanged $3"
    else
      [ -z "$(current)" ] || point previous "$(current)"
      point current "$3"
      echo "changed $3"
    fi
    prune
    ;;
  rollback)
    [ $# -eq 2 ] || usage
    old=$(previous)
    if [ -z "$old" ] || [ ! -f "$dir/releases/$old/.installed" ]; then
      echo "$dir has no previous release to roll back to (current: $(current))" >&2
      exit 1
    fi
    new=$(current)
    point current "$old"
    point previous "$new"
    echo "changed $old"
    ;;
  *) usage ;;
esac
