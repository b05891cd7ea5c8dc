#!/usr/bin/env bash
# make soak-lab: the soak on the lab's hosts (tests/soak/lab.py). A fresh lab is brought up and
# provisioned with site.yml, the soak runs on it (32 minutes of faults by default, then the crawl
# to its end), and the lab is destroyed whatever happened. SOAK_ARGS and the arguments go to
# run.py after the defaults (so they override them). The report goes to results/soak-lab/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lab.sh down
trap 'scripts/lab.sh down' EXIT
scripts/lab.sh up
# The lab crawls some 110 pages/s: 300,000 pages outlast the faults (200,000 did not); each
# worker's seen cache of 20,000 fills in minutes, so its RSS is judged for most of the crawl.
read -r -a extra <<<"${SOAK_ARGS:-}"
SOAK_ARGS="" scripts/soak.sh --lab --minutes 32 --every 180 --max-minutes 100 --hosts 1000 \
  --pages 300000 --seen-cache 20000 --out results/soak-lab "${extra[@]}" "$@"
