# crawlfleet — each target calls one script or tool; see README.md.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
# The integration tests run in parallel, a test file per pytest-xdist worker (a file's module
# fixtures stay in one process; each worker starts its own servers on free ports).
INTEGRATION_WORKERS ?= 2
PARALLEL := -n $(INTEGRATION_WORKERS) --dist loadfile
# Debian's docker client first: it matches the dockerd that scripts/dockerd.sh starts.
export PATH := $(CURDIR)/$(VENV)/bin:/usr/sbin:/usr/bin:/sbin:/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: help install check lint unit integration lab lab-rabbitmq lab-security lab-valkey lab-mixed lab-projects lab-ha lab-cluster lab-all fuzz test demo bench soak soak-lab lab-up lab-down lab-status clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

install: ## Debian packages + .venv (idempotent)
	@scripts/install-deps.sh

check: ## the fast first gate, no root and no servers: lint, then the unit tests
	@scripts/venv.sh
	@scripts/lint.sh
	$(PYTEST) -q tests/unit

lint: install ## ruff, mypy, yamllint, ansible-lint (production), syntax-check
	@scripts/lint.sh

unit: ## fast tests, no servers (no root either)
	@scripts/venv.sh
	$(PYTEST) tests/unit

integration: install ## real redis-server, real HTTP servers, real crawls on loopback, $(INTEGRATION_WORKERS) files at a time
	$(PYTEST) $(PARALLEL) tests/integration

lab: install ## Docker hosts running systemd, vagrant up, ansible-playbook
	$(PYTEST) tests/lab

lab-rabbitmq: install ## the lab converged on the RabbitMQ queue backend and back (not in make test)
	$(PYTEST) -m rabbitmq tests/lab

lab-security: install ## the lab converged with TLS between hosts and the Redis ACL users, checked, and back (not in make test)
	$(PYTEST) -m security tests/lab

lab-valkey: install ## a fresh lab whose hub runs Valkey (LAB_REDIS_FLAVOR=valkey): crawl, restart drill, changed=0 (not in make test)
	LAB_REDIS_FLAVOR=valkey $(PYTEST) -m valkey tests/lab

lab-mixed: install ## a fresh mixed lab: hub a and worker c on Debian 13, b on 12, Valkey on the hub: releases, Pythons, crawl, worker killed, changed=0 (not in make test)
	LAB_RELEASES=a=trixie,c=trixie LAB_REDIS_FLAVOR=valkey $(PYTEST) -m mixed tests/lab

lab-projects: install ## a team's own project (examples/linkcrawler) beside bookcrawler: deploy, both crawl, a worker killed, roll-out and roll-back (not in make test)
	$(PYTEST) -m projects tests/lab

lab-ha: install ## two more hubs join the lab: Sentinel failover with TLS and the ACL users converged, changed=0, the primary's host killed mid-crawl (not in make test)
	$(PYTEST) -m ha tests/lab

lab-cluster: install ## three more hosts form a Redis Cluster (TLS, ACL users) for the workers: cluster ok, changed=0, the book crawl in one slot (not in make test)
	$(PYTEST) -m cluster tests/lab

lab-all: install ## every lab-* target above in turn, each from a fresh lab; one line each on screen and in results/lab-all.md (not in make test)
	@scripts/lab-all.sh

fuzz: install ## the property-based tests of hostile input with a large budget (make test runs a bounded one)
	$(PYTEST) -m fuzz --hypothesis-profile=fuzz -p no:cacheprovider tests/unit tests/integration

test: ## everything, in order, stopping at the first failure: install, check (lint, unit), integration, lab
	@scripts/install-deps.sh
	@$(MAKE) --no-print-directory check
	$(PYTEST) $(PARALLEL) --durations=25 tests/integration
	$(PYTEST) --durations=25 tests/lab

demo: install ## bring up the lab, provision it with site.yml, crawl the demo site with workers b and c, sum it up
	@scripts/demo.sh

bench: install ## benchmarks side by side with scrapy-redis; results in results/bench.{json,md}
	@scripts/bench.sh

soak: install ## a long crawl of a synthetic web on three hubs (Sentinels) under a schedule of faults, judged by its checkers; report in results/soak/ (SOAK_ARGS; not in make test)
	@scripts/soak.sh

soak-lab: install ## the soak on a fresh lab's hosts (faults struck with systemctl and docker), judged alike; report in results/soak-lab/ (SOAK_ARGS; not in make test)
	@scripts/soak-lab.sh

lab-up: install ## start (or reuse) the lab and provision it with site.yml
	@scripts/lab.sh up

lab-down: ## destroy the lab: no container, network or lock file left behind
	@scripts/lab.sh down

lab-status: ## what runs where in the lab
	@scripts/lab.sh status
