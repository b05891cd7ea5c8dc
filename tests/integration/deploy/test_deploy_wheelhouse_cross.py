"""The control node builds a wheelhouse for a Python it does not have (Debian 13's 3.13) by
cross-downloading binary wheels from PyPI, and it is complete: every requirement of crawlfleet,
its markers decided for that Python, resolves to a wheel in it that installs there (tagged
cp313, abi3 or py3). A dependency with no such wheel stops the build in one line naming the
package, the host and the Python version, before any wheelhouse exists.

Needs PyPI (or the mirror pip is configured with), like the role on a control node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from support.wheelhouse import PROJECT_SCRIPT, ROOT, SCRIPT, load_builder, supported_tags

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

bw = load_builder()
TRIXIE = {"host": "trixie1", "python": "3.13.5", "machine": "x86_64", "glibc": "2.41"}
# Debian 12's Python: its markers need async-timeout (redis: python_full_version < "3.11.3"),
# 3.13's do not. Cross-built, or natively where the tests run on Debian 12's own 3.11.2 (as in CI).
BOOKWORM = {"host": "bookworm1", "python": "3.11.2", "machine": "x86_64", "glibc": "2.36"}


def build(
    project: Path, build_dir: Path, hosts: list[dict[str, str]]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(project), str(build_dir), json.dumps(hosts)],
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    build_dir = tmp_path_factory.mktemp("wheelhouse")
    proc = build(ROOT / "project", build_dir, [TRIXIE, BOOKWORM])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return build_dir, json.loads(proc.stdout)


def assert_one_line(proc: subprocess.CompletedProcess[str], start: str) -> None:
    """The build failed (exit 1) with one line on stderr that starts with ``start``."""
    assert proc.returncode == 1, (proc.stdout, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(start), lines[0]


def wheels(tar_path: str, into: Path) -> dict[str, Path]:
    """The wheelhouse unpacked: canonical project name -> wheel."""
    with tarfile.open(tar_path) as tar:
        # The data filter where this Python has it (3.11.4 on; Debian 12's 3.11.2 has not).
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)  # the wheelhouse this test just built
    found = {}
    for wheel in into.iterdir():
        assert wheel.name.endswith(".whl"), wheel.name
        name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
        assert name not in found, f"two wheels of {name}"
        found[name] = wheel
    return found


def requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(meta).decode())
    return [Requirement(line) for line in message.get_all("Requires-Dist") or []]


def assert_complete(found: dict[str, Path], python: str, glibc: str) -> None:
    """From crawlfleet down: every requirement whose markers hold on `python` has a wheel here,
    of a version it accepts, that installs on that Python."""
    tags = supported_tags(python, bw.platforms("x86_64", glibc))
    env = bw.marker_environment(python, "x86_64")
    todo: list[tuple[str, frozenset[str]]] = [("crawlfleet", frozenset())]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        wheel = found[name]
        wheel_tags = parse_wheel_filename(wheel.name)[3]
        assert wheel_tags & tags, f"{wheel.name} does not install on Python {python}"
        assert any(
            t.interpreter == "cp" + "".join(python.split(".")[:2])
            or t.abi == "abi3"
            or t.interpreter.startswith("py3")
            for t in wheel_tags
        ), wheel.name
        for req in requires(wheel):
            if req.marker and not any(
                req.marker.evaluate({**env, "extra": extra}) for extra in (extras or {""})
            ):
                continue
            dep = canonicalize_name(req.name)
            assert dep in found, f"{name} needs {req} for Python {python}: no wheel of it"
            dep_version = parse_wheel_filename(found[dep].name)[1]
            assert req.specifier.contains(dep_version, prereleases=True), (req, dep_version)
            todo.append((dep, frozenset(req.extras)))


def test_a_cp313_wheelhouse_is_complete(built: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    build_dir, out = built
    entry = out["3.13.5-x86_64-glibc2.41"]
    assert (entry["native"], entry["hosts"], entry["python"], entry["glibc"]) == (
        False, ["trixie1"], "3.13.5", "2.41"
    )  # fmt: skip
    assert Path(entry["tar"]).parent == build_dir / "3.13.5-x86_64-glibc2.41"
    found = wheels(entry["tar"], tmp_path)
    assert entry["wheels"] == len(found) > 30
    assert_complete(found, "3.13.5", "2.41")
    # crawlfleet itself: the one pure wheel built here, the same in every wheelhouse.
    assert found["crawlfleet"].name == "crawlfleet-0.1.0-py3-none-any.whl"
    # Compiled dependencies came as cp313 builds, not as the control node's.
    assert "cp313-cp313-manylinux" in found["lxml"].name
    assert "async-timeout" not in found


def test_markers_are_decided_for_the_hosts_python(
    built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    _, out = built
    entry = next(e for e in out.values() if "bookworm1" in e["hosts"])
    found = wheels(entry["tar"], tmp_path)
    assert_complete(found, "3.11.2", "2.36")
    assert "async-timeout" in found


def test_the_control_nodes_own_python_is_built_natively(built: tuple[Path, dict[str, Any]]) -> None:
    build_dir, out = built
    native = [e for e in out.values() if e["native"]]
    assert len(native) == 1
    assert Path(native[0]["tar"]).parent == build_dir
    assert native[0]["python"] == bw.PYTHON_VERSION


def test_an_unchanged_tree_is_not_built_again(built: tuple[Path, dict[str, Any]]) -> None:
    build_dir, out = built
    proc = build(ROOT / "project", build_dir, [TRIXIE, BOOKWORM])
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads(proc.stdout)
    assert {n: e["sha256"] for n, e in again.items()} == {n: e["sha256"] for n, e in out.items()}
    assert not any(e["changed"] for e in again.values())


def test_a_dependency_without_a_cp313_wheel_is_one_line_before_anything_is_built(
    tmp_path: Path,
) -> None:
    project = tmp_path / "tinyproj"
    (project / "tinyproj").mkdir(parents=True)
    (project / "tinyproj/__init__.py").write_text('"""Its dependency has no wheel."""\n')
    # docopt 0.6.2 is on PyPI as a source distribution only.
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinyproj"\nversion = "1.0"\ndependencies = ["docopt==0.6.2"]\n'
    )
    build_dir = tmp_path / "build"
    proc = build(project, build_dir, [TRIXIE])
    assert proc.stdout == ""
    assert_one_line(
        proc,
        "crawlfleet_app: docopt (docopt==0.6.2) has no binary wheel for Python 3.13.5 "
        "(cp313, x86_64, glibc 2.41) of host trixie1;",
    )
    # Nothing for any host: no wheelhouse, not even the control node's own.
    assert list(build_dir.rglob("wheelhouse-*.tar")) == []


def check_project(
    built: tuple[Path, dict[str, Any]],
    build_dir: Path,
    requirements: list[str],
    *,
    mixed: bool = True,
) -> subprocess.CompletedProcess[str]:
    """roles/crawler/files/build_project.py as projects_build.yml runs it, for a mixed fleet (or,
    ``mixed=False``, a fleet of the control node's own Python)."""
    _, out = built
    native = next(e for e in out.values() if e["native"])
    spec = {
        "build_dir": str(build_dir),
        "wheelhouse": native["tar"],
        "targets": [e for e in out.values() if not e["native"] and e["hosts"]] if mixed else [],
        "projects": [
            {"name": "linkcrawler", "src": str(ROOT / "examples/linkcrawler"),
             "settings": "linkcrawler.settings", "requirements": requirements,
             "spiders": ["pages"]}
        ],
    }  # fmt: skip
    return subprocess.run(
        [sys.executable, str(PROJECT_SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
        env={**os.environ, "PYTHONPATH": str(SCRIPT.parent)},
    )


def test_a_project_gets_a_release_per_python(
    built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    proc = check_project(built, tmp_path, ["inflection==0.5.1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    release = json.loads(proc.stdout)["linkcrawler"]
    assert release["spiders"] == ["pages"]
    # A release for each Python that is not the control node's (3.13, and 3.11.2 unless the tests
    # run on it), beside the native one.
    foreign = {name for name, entry in built[1].items() if not entry["native"]}
    assert "3.13.5-x86_64-glibc2.41" in foreign
    assert set(release["targets"]) == foreign
    keys = {release["key"]} | {t["key"] for t in release["targets"].values()}
    assert len(keys) == 1 + len(foreign)
    with tarfile.open(release["targets"]["3.13.5-x86_64-glibc2.41"]["tar"]) as tar:
        names = tar.getnames()
    # Only what the platform wheelhouse lacks: the requirement, as a wheel for any Python 3.
    assert [n for n in names if n.startswith("wheels/")] == [
        "wheels/inflection-0.5.1-py2.py3-none-any.whl"
    ]
    assert "requirements.txt" in names and "src/linkcrawler/settings.py" in names


def test_a_project_requirement_without_a_cp313_wheel_is_one_line(
    built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    proc = check_project(built, tmp_path, ["inflection==0.5.1", "docopt==0.6.2"])
    assert_one_line(
        proc,
        "crawler_projects[linkcrawler]: docopt (docopt==0.6.2) has no binary wheel for Python "
        "3.13.5 (cp313, x86_64, glibc 2.41) of host trixie1;",
    )


def test_a_requirement_that_fails_to_build_here_names_the_package_and_its_error(
    built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    # A source tree whose wheel build stops as one missing a C header does (an in-tree PEP 517
    # backend: nothing to download to build it). pip's own last line ("Failed to build one or
    # more wheels") names neither the package nor the cause.
    sdist = tmp_path / "unbuildable"
    sdist.mkdir()
    (sdist / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "failing_backend"\nbackend-path = ["."]\n'
    )
    (sdist / "failing_backend.py").write_text(
        "import os\n\n\n"
        "def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):\n"
        '    info = "crawlfleet_test_unbuildable-1.0.dist-info"\n'
        "    os.makedirs(os.path.join(metadata_directory, info))\n"
        '    with open(os.path.join(metadata_directory, info, "METADATA"), "w") as out:\n'
        '        out.write("Metadata-Version: 2.1\\nName: crawlfleet-test-unbuildable\\n"\n'
        '                  "Version: 1.0\\n")\n'
        "    return info\n\n\n"
        "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
        '    raise SystemExit("error: libfoo.h: No such file or directory")\n'
    )
    requirement = f"crawlfleet-test-unbuildable @ {sdist.as_uri()}"
    proc = check_project(built, tmp_path / "build", [requirement], mixed=False)
    assert_one_line(
        proc,
        f"crawler_projects[linkcrawler]: the requirements {requirement} cannot be built into the "
        "wheelhouse: building crawlfleet-test-unbuildable: error: libfoo.h: No such file or "
        "directory",
    )
