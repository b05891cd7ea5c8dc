"""A project's old release tars are pruned once per build, never one that the build returns: a
fleet of four Pythons gets four tars per build, some of them reused from an earlier build (and so
older on disk than the tars of builds since)."""

from __future__ import annotations

import os
from pathlib import Path

from support.wheelhouse import load_project_builder

bp = load_project_builder()


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    tree = tmp_path / "tree"
    (tree / "proj").mkdir(parents=True)
    (tree / "proj" / "__init__.py").write_text("")
    (tree / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    return tree, wheels


def _aged(path: Path, age: int) -> None:
    path.write_bytes(b"old release")
    stamp = 1_700_000_000 - age
    os.utime(path, (stamp, stamp))


def test_a_build_of_four_pythons_keeps_its_own_tars_and_two_builds_before_it(
    tmp_path: Path,
) -> None:
    tree, wheels = _tree(tmp_path)
    releases = tmp_path / "build" / "proj"
    releases.mkdir(parents=True)
    # Ten tars of earlier builds, newest first; the current build reuses the oldest one (its
    # Python's requirements and sources did not change since).
    older = [releases / f"release-old{i}.tar" for i in range(10)]
    for age, path in enumerate(older):
        _aged(path, 100 * (age + 1))
    reused = releases / "release-reused.tar"
    _aged(reused, 10_000)
    current = {bp.package(releases / f"release-new{i}.tar", tree, wheels, []) for i in range(3)}
    current.add(bp.package(reused, tree, wheels, []))
    assert reused.read_bytes() == b"old release", "an existing release is reused, not rebuilt"

    bp.prune(releases, current)

    left = set(releases.glob("release-*.tar"))
    assert current <= left, f"the build's own tars were pruned: {sorted(current - left)}"
    # 2 builds of 4 tars each are kept besides the current one: the 8 newest of the others.
    assert left - current == set(older[:8])


def test_a_first_build_prunes_nothing(tmp_path: Path) -> None:
    tree, wheels = _tree(tmp_path)
    releases = tmp_path / "build" / "proj"
    tar = bp.package(releases / "release-a.tar", tree, wheels, ["scrapy"])
    bp.prune(releases, {tar})
    assert set(releases.glob("release-*.tar")) == {tar}
