#!/bin/sh
# Installed by Ansible (role crawlfleet_app). Usage: install-release WHEELHOUSE.tar RELEASE_DIR
# Creates a virtualenv in RELEASE_DIR and installs crawlfleet from the wheelhouse only (no index):
# hosts never reach PyPI. RELEASE_DIR/.installed is written last, so a release that has it is
# complete, and an interrupted one is started again from scratch.
set -eu
# Readable by every service account, writable by root only, whatever umask Ansible runs with.
umask 022
tar=$1
release=$2
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
rm -rf "$release"
tar -xf "$tar" -C "$wheels"
python3 -m venv "$release"
"$release/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$wheels" crawlfleet
# Compiled now, as root, so services never write into the read-only release.
"$release/bin/python" -m compileall -q "$release/lib" >/dev/null || true
touch "$release/.installed"
