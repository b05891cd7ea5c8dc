#!/usr/bin/env bash
# make soak-lab: the soak on the lab's hosts (tests/soak/lab.py). A fresh lab is brought up and
# provisioned with site.yml, the soak runs on it (32 minutes of faults by default, then the crawl
# to its end), and the lab is destroyed whatever happened. Arguments go to run.py after the
# defaults (so they override them), SOAK_ARGS too (scripts/soak.sh adds them). The report goes to
# results/soak-lab/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lab.sh down
trap 'scripts/lab.sh down' EXIT
scripts/lab.sh up
# The lab crawls some 60 to 100 pages/s: 250,000 pages outlast the faults; each worker's seen
# cache of 20,000 fills in about ten minutes, so its RSS is judged for the rest of the crawl.
scripts/soak.sh --lab --minutes 32 --every 200 --max-minutes 90 --hosts 1000 --pages 250000 \
  --seen-cache 20000 --out results/soak-lab "$@"
