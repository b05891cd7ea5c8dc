"""Fixtures of the operator tests, taken from the frontier tests: the link-graph site and workers.

tests/integration/frontier/frontier_support.py is loaded by path (its directory is not on
sys.path when only these tests run) and its fixtures are re-exported; the test modules load this
file with ``pytest_plugins``. ops_helpers imports it first, hence PYTEST_DONT_REWRITE.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_spec = importlib.util.spec_from_file_location(
    "frontier_support", ROOT / "tests/integration/frontier/frontier_support.py"
)
assert _spec is not None and _spec.loader is not None
frontier_conftest = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = frontier_conftest
_spec.loader.exec_module(frontier_conftest)

# Re-exported fixtures (pytest finds fixtures by the names bound in a plugin module).
site = frontier_conftest.site
start_worker = frontier_conftest.start_worker
