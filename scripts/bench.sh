#!/usr/bin/env bash
# make bench: build the peers' venv (scrapy-redis, scrapy-redis-bloomfilter) once, then run every
# benchmark side by side; extra arguments go to tests/bench/run.py (--quick, --only NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
peers=.bench/peers-venv
if [ ! -f "$peers/.installed" ]; then
  python3 -m venv "$peers"
  "$peers/bin/pip" install -q 'scrapy==2.19.*' 'scrapy-redis==0.9.1' 'scrapy-redis-bloomfilter==0.8.1'
  touch "$peers/.installed"
fi
# The benchmarks import the test helpers (tests/: redis_server, rabbitmq_server, support; the book
# tests' book_lab) and the lab's scripts as top-level modules, as pytest.ini's pythonpath does for
# the tests; their subprocesses inherit the path.
root=$(pwd)
export PYTHONPATH="$root/project:$root/tests:$root/tests/integration/book:$root/scripts${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python tests/bench/run.py "$@"
