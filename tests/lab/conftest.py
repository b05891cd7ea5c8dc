"""The lab tier's fixture: a real three-host lab (containers running systemd, brought up by
``vagrant up`` with the docker provider, provisioned by site.yml), always destroyed at the end."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from labhosts import TIMINGS, Lab, lab_hosts, leftovers, recap, run


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """From a clean state: image, ``vagrant up`` (provisions with site.yml); always destroyed."""
    run(["scripts/lab.sh", "down"], timeout=300)
    try:
        timings: dict[str, float] = {}
        start = time.monotonic()
        run(["scripts/lab-image.sh"], timeout=900)
        timings["image_s"] = time.monotonic() - start
        start = time.monotonic()
        up = run(["vagrant", "up", "--provider", "docker"], timeout=900)
        timings["vagrant_up_and_converge_s"] = time.monotonic() - start
        counts = recap(up.stdout)
        assert counts, f"vagrant up ran no playbook:\n{up.stdout[-3000:]}"
        assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
        yield Lab(lab_hosts(), timings)
    finally:
        start = time.monotonic()
        down = run(["scripts/lab.sh", "down"], timeout=300, check=False)
        timings["down_s"] = time.monotonic() - start
        TIMINGS.parent.mkdir(exist_ok=True)
        TIMINGS.write_text(
            json.dumps({k: round(v, 1) for k, v in timings.items()}, indent=2) + "\n"
        )
        left = leftovers()
        if down.returncode != 0 or left:
            output = down.stdout + down.stderr
            pytest.fail(f"lab.sh down exited {down.returncode}, left behind: {left}\n{output}")
