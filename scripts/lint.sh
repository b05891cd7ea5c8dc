#!/usr/bin/env bash
# Static checks, in order, stopping at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg"
echo "== ruff";          ruff check project tests scripts filter_plugins
echo "== ruff format";   ruff format --check project tests scripts filter_plugins
echo "== mypy";          (cd project && mypy)
echo "== yamllint";      yamllint --strict .
echo "== ansible-lint";  ansible-lint --offline
echo "== syntax-check";  ansible-playbook --syntax-check -i inventory site.yml
echo "== docs";          .venv/bin/python scripts/gendocs.py --check
