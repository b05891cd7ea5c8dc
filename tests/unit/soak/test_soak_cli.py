"""`make soak`'s arguments: a soak that cannot be run is one line and exit status 2, before any
server starts (nothing is written to --out)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--hosts", "0"], "soak: --hosts must be from 1 to 62500, got 0"),
        (["--hosts", "10", "--pages", "9"], "soak: --pages must be at least --hosts (10), got 9"),
        (
            ["--minutes", "1"],
            "soak: a soak of 60 s has no room for a fault after a 120 s warm-up and before its "
            "last 240 s",
        ),
        (["--every", "nan"], "soak: the fault interval must be above 0 s, got nan"),
        (
            ["--workers", "0"],
            "soak: error: --workers must be at least 1 and --max-minutes at least --minutes",
        ),
        (["--minutes", "x"], "argument --minutes: invalid float value: 'x'"),
        (["--lab", "--per-host", "0"], "soak: error: --per-host must be at least 1"),
        (["--seen-cache", "0"], "soak: error: --seen-cache must be at least 1"),
        (["--seen-cache", "lots"], "soak: error: argument --seen-cache: invalid int value: 'lots'"),
        (["--hubs", "2"], "soak: error: argument --hubs: invalid choice: 2 (choose from 1, 3)"),
        (
            ["--lab", "--hubs", "3"],
            "soak: error: --hubs: the lab soak runs on the lab's one hub (make lab-ha fails it "
            "over)",
        ),
    ],
)
def test_a_soak_that_cannot_run_says_why_in_one_line(
    tmp_path: Path, args: list[str], said: str
) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(ROOT / "scripts" / "soak.sh"), "--out", str(out), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(said), proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("record", [None, "{not json"])
def test_judging_again_where_no_soak_was_recorded_says_so_in_one_line(
    tmp_path: Path, record: str | None
) -> None:
    if record is not None:
        (tmp_path / "soak.json").write_text(record)
    proc = subprocess.run(
        [str(ROOT / "scripts" / "soak.sh"), "--judge", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"soak: --judge: no soak recorded in {tmp_path} ("), line
    assert sorted(p.name for p in tmp_path.iterdir()) == (["soak.json"] if record else [])
