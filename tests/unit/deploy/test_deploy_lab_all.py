"""``make lab-all`` (scripts/lab-all.sh) runs every lab target outside ``make test``: its list
matches the Makefile's and pytest.ini's, and a bad ``LAB_ALL_TARGETS`` is one line, exit 2,
before any lab starts."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "lab-all.sh"


def script_targets() -> list[str]:
    match = re.search(r"^ALL=\(([^)]*)\)$", SCRIPT.read_text(), re.MULTILINE)
    assert match, "scripts/lab-all.sh has no ALL=(…) list"
    return match.group(1).split()


def test_it_runs_every_lab_target_the_makefile_keeps_out_of_make_test() -> None:
    makefile = (ROOT / "Makefile").read_text()
    outside = re.findall(r"^(lab-[a-z]+): .*\(not in make test\)$", makefile, re.MULTILINE)
    assert sorted(script_targets()) == sorted(t for t in outside if t != "lab-all")
    # each runs the lab tests of one marker that pytest.ini keeps out of make test
    addopts = re.search(r"^addopts = .*-m \"([^\"]*)\"", (ROOT / "pytest.ini").read_text(), re.M)
    assert addopts
    excluded = set(re.findall(r"not (\w+)", addopts.group(1)))
    marked = set(re.findall(r"^lab-[a-z]+: .*\n\t.*-m (\w+) tests/lab$", makefile, re.MULTILINE))
    assert marked == excluded


@pytest.mark.parametrize(
    ("targets", "says"),
    [
        ("lab-ha bogus", "unknown target 'bogus'"),
        ("lab-ha; rm -rf /", "unknown target 'lab-ha;'"),
        ("lab-all", "unknown target 'lab-all'"),  # no recursion
        ("   ", "names no target"),
    ],
)
def test_a_bad_target_list_is_one_line_and_runs_nothing(targets: str, says: str) -> None:
    env = {**os.environ, "LAB_ALL_TARGETS": targets}
    proc = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and says in lines[0] and "choose from: lab-rabbitmq" in lines[0]
