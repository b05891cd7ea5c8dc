#!/usr/bin/env bash
# The project virtualenv (.venv) from project/pyproject.toml with the dev extra: no root needed.
# Idempotent: re-installed only when pyproject.toml is newer than the last install, or when the
# editable crawlfleet is another checkout's (a .venv copied or linked from one: its tests would
# run that checkout's code).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "venv: $*" >&2; exit 1; }

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "needs Python >= 3.11 ($PY is older)"
stamp=.venv/.installed
ours() {  # the editable crawlfleet is this checkout's (-I: whatever PYTHONPATH says)
  local found
  found=$(.venv/bin/python -I -c 'import crawlfleet, pathlib
print(pathlib.Path(crawlfleet.__file__).resolve().parents[1])' 2>/dev/null) || return 1
  [ "$found" = "$(pwd -P)/project" ]
}
if [ ! -f "$stamp" ] || [ project/pyproject.toml -nt "$stamp" ] || ! ours; then
  [ -x .venv/bin/python ] || "$PY" -m venv .venv \
    || die "could not create .venv; on Debian python3-venv is needed (make install, as root, adds it)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e 'project[dev]'
  touch "$stamp"
fi
