"""The benchmarks' CPU cap (``support.cpucap``): what it accepts, and the one line it gives for
the rest. No cgroup is created here: the shards bench uses real ones (``make bench``)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.cpucap import MIN_QUOTA_US, PERIOD_US, cfs_quota, cpu_cap, group_name

CORES = os.cpu_count() or 1


@pytest.mark.parametrize(
    ("share", "period", "quota"),
    [
        (0.03, PERIOD_US, 3_000),
        (0.5, 200_000, 100_000),
        (1, PERIOD_US, PERIOD_US),
        (0.01, PERIOD_US, MIN_QUOTA_US),
    ],
)
def test_a_share_of_a_core_is_a_quota_per_period(share: float, period: int, quota: int) -> None:
    assert cfs_quota(share, period) == quota


@pytest.mark.fuzz
@given(st.floats(min_value=0.01, max_value=CORES))
def test_every_share_in_range_gives_a_quota_of_that_share(share: float) -> None:
    quota = cfs_quota(share)
    assert MIN_QUOTA_US <= quota <= CORES * PERIOD_US
    assert abs(quota - share * PERIOD_US) <= 0.5


@pytest.mark.fuzz
@given(
    st.one_of(
        st.floats(max_value=0.0),
        st.floats(min_value=CORES, exclude_min=True),
        st.sampled_from([math.nan, math.inf, -math.inf, True, False, "0.1", None, 0.005]),
    )
)
def test_a_share_out_of_range_is_one_line_naming_it(share: object) -> None:
    with pytest.raises(ValueError, match=r"^share") as error:
        cfs_quota(share)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("period", [999, 1_000_001, 0, -5, 100_000.0, True, "100000"])
def test_a_period_out_of_range_is_one_line_naming_it(period: object) -> None:
    with pytest.raises(ValueError, match=r"^period_us"):
        cfs_quota(0.5, period)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["bench-node0", "a", "node_1.x", "Z" * 64])
def test_a_plain_directory_name_is_a_group_name(name: str) -> None:
    assert group_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "/abs", ".hidden", "-x", "a b", "Z" * 65, "é", None]
)
def test_any_other_name_is_one_line_naming_it(name: object) -> None:
    with pytest.raises(ValueError, match=r"^name must be"):
        group_name(name)  # type: ignore[arg-type]


def test_no_cpu_controller_is_one_line_saying_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no cgroup v1 cpu controller"):
        cpu_cap("bench-node0", 0.1, root=tmp_path)
    assert not (tmp_path / "bench-node0").exists()


def test_bad_input_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    for name, share in (("../escape", 0.1), ("ok", 0.0)):
        with pytest.raises(ValueError):
            cpu_cap(name, share, root=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.cfs_quota_us"]
