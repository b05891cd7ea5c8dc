#!/usr/bin/env bash
# make soak: a long crawl of a synthetic web under a schedule of faults (tests/soak/run.py), judged
# by its checkers; the report goes to results/soak/ (soak.json, soak.html, soak.png). Arguments go
# to run.py (--minutes, --hosts, --pages, --workers, --every, --seed, --out); SOAK_ARGS too.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# The soak imports the test helpers (tests/: redis_server, support, soak; the book tests' book_lab;
# scripts/labcrawl for --lab) as top-level modules, as pytest.ini's pythonpath does for the tests.
export PYTHONPATH="$root/project:$root/tests:$root/tests/integration/book:$root/scripts${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck disable=SC2086
exec .venv/bin/python tests/soak/run.py ${SOAK_ARGS:-} "$@"
