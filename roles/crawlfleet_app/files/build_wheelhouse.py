#!/usr/bin/env python3
"""Build the crawlfleet wheelhouses on the control node: one per host Python, once per source tree.

Usage: build_wheelhouse.py PROJECT_DIR BUILD_DIR [HOSTS]

HOSTS (JSON, from the hosts' facts): [{"host", "python": "3.13.5", "machine": "x86_64",
"glibc": "2.41"}, ...]. The hosts are grouped by Python version and architecture; each group gets
one wheelhouse, and the control node's own Python always gets one (the projects of role crawler
are checked with it).

Native: a group of the running interpreter's version and architecture (Debian 12's
/usr/bin/python3, 3.11.2, for Debian 12 hosts) is built as it always was: pip, in a virtualenv of
that Python kept in BUILD_DIR/.buildenv-<version>, runs `pip wheel` on the project, so that
dependency markers such as `python_full_version < "3.11.3"` are decided by the hosts' Python.

Cross: any other group (Debian 13's Python 3.13 on a Debian 12 control node) gets crawlfleet's own
wheel (pure Python, built once per source tree) and every dependency as a binary wheel for that
Python and architecture: `pip download --only-binary=:all: --python-version --implementation cp
--abi cpXY --platform manylinux_2_<glibc>_<machine> ...`, with the markers evaluated for the
target (pip would evaluate them for the running interpreter). A dependency without such a wheel
stops the build with ONE line on stderr naming the package, the hosts and the Python version, and
exit code 1: hosts never build from source.

The key is a SHA-256 over the project's source files (path and content, sorted; caches and
build output left out) and the Python it is for. A tree already built is not built again, so an
unchanged tree gives the same artifact. A fresh directory of wheels (SOURCE_DATE_EPOCH pins the
timestamps inside built wheels) becomes a tar with fixed order, owners and times, moved into
place: BUILD_DIR/wheelhouse-<key>.tar (native), BUILD_DIR/<name>/wheelhouse-<key>.tar (cross).
Prints one JSON line {name: {"name", "native", "changed", "key", "tar", "sha256", "wheels",
"python", "machine", "glibc" (cross only, else ""), "hosts"}}; name is <python>-<machine>
(native) or <python>-<machine>-glibc<glibc> (cross). The other Pythons are built first.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info")
# Wheelhouses kept besides the current one, for a quick roll back by hand.
KEEP = 2
PYTHON_VERSION = ".".join(map(str, sys.version_info[:3]))
# Architectures as the hosts' facts (ansible_facts.architecture) name them -> as wheel tags do.
MACHINES = {"amd64": "x86_64", "i386": "i686", "i486": "i686", "i586": "i686", "arm64": "aarch64"}
# Architectures of the old manylinux tags (PEP 513, 571, 599): wheels often carry only those.
LEGACY_MANYLINUX = {
    "manylinux1": (5, {"x86_64", "i686"}),
    "manylinux2010": (12, {"x86_64", "i686"}),
    "manylinux2014": (17, {"x86_64", "i686", "aarch64", "armv7l", "ppc64", "ppc64le", "s390x"}),
}
# Run in the build virtualenv: pip with the markers of the target Python, not its own.
CROSS_PIP = """\
import json, sys
from pip._vendor.packaging import markers
target = json.loads(sys.argv[1])
markers.default_environment = lambda: dict(target)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""
NO_WHEEL = re.compile(r"No matching distribution found for (\S+)")
REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


class BuildError(Exception):
    """One line naming the package (or host), the hosts and the Python version."""


def sources(project: Path) -> list[Path]:
    """The files that make the distribution, relative to project/, sorted."""
    found = []
    for path in sorted(project.rglob("*")):
        rel = path.relative_to(project)
        if any(part in SKIP_DIRS or part.endswith(SKIP_SUFFIXES) for part in rel.parts):
            continue
        if path.is_file():
            found.append(rel)
    return found


def source_key(project: Path, files: list[Path], python: bytes) -> str:
    # The Python is part of the key: it decides which dependencies are needed.
    digest = hashlib.sha256(python + b"\0")
    for rel in files:
        digest.update(str(rel).encode() + b"\0" + (project / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def machine_tag(machine: str) -> str:
    return MACHINES.get(machine, machine)


def group_hosts(hosts: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The wheelhouses to build: the control node's own, then one per other Python of the hosts."""
    native_machine = machine_tag(platform.machine())
    groups: dict[str, dict[str, Any]] = {
        f"{PYTHON_VERSION}-{native_machine}": {
            "native": True, "python": PYTHON_VERSION, "machine": native_machine, "hosts": []
        }
    }  # fmt: skip
    for host in hosts:
        python, machine = str(host["python"]), machine_tag(str(host["machine"]))
        if not re.fullmatch(r"3\.\d+\.\d+", python):
            raise BuildError(f"host {host['host']} runs Python {python!r}: need a CPython 3.X.Y")
        name = f"{python}-{machine}"
        if name not in groups:
            name = f"{name}-glibc{host['glibc']}"
            groups.setdefault(
                name, {"native": False, "python": python, "machine": machine,
                       "glibc": str(host["glibc"]), "hosts": []}
            )  # fmt: skip
        groups[name]["hosts"].append(str(host["host"]))
    return [
        {"name": name, **group, "hosts": sorted(group["hosts"])} for name, group in groups.items()
    ]


def platforms(machine: str, glibc: str) -> list[str]:
    """The manylinux platform tags a host of this glibc and architecture runs, best first."""
    major, minor = (int(part) for part in glibc.split(".")[:2])
    if major != 2:
        raise BuildError(f"glibc {glibc} is not a glibc 2.X")
    tags = []
    for m in range(minor, 4, -1):
        tags.append(f"manylinux_2_{m}_{machine}")
        tags += [
            f"{legacy}_{machine}"
            for legacy, (since, arches) in LEGACY_MANYLINUX.items()
            if since == m and machine in arches
        ]
    return tags


def marker_environment(python: str, machine: str) -> dict[str, str]:
    """PEP 508 marker values of a Debian host's CPython (what pip would read from it)."""
    return {
        "implementation_name": "cpython",
        "implementation_version": python,
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": python,
        "python_version": ".".join(python.split(".")[:2]),
        "sys_platform": "linux",
    }


def wheel_fits(filename: str, python: str, machine: str, glibc: str) -> bool:
    """Whether a wheel (by its file name) installs on CPython `python` of this platform."""
    if not filename.endswith(".whl"):
        return False
    parts = filename[: -len(".whl")].split("-")
    if len(parts) < 5:
        return False
    major, minor = python.split(".")[:2]
    cp = f"cp{major}{minor}"
    allowed = set(platforms(machine, glibc))
    for interpreter in parts[-3].split("."):
        older = re.fullmatch(rf"cp{major}(\d+)", interpreter)
        generic = re.fullmatch(rf"py{major}(\d*)", interpreter)
        for abi in parts[-2].split("."):
            # The abi3 of an older CPython 3 (3.2 on), or no ABI for a generic Python 3 wheel.
            stable = abi == "abi3" and older is not None and 2 <= int(older.group(1)) <= int(minor)
            pure = abi == "none" and generic is not None and int(generic[1] or 0) <= int(minor)
            for plat in parts[-1].split("."):
                if plat == "any" and abi == "none" and (interpreter == cp or pure):
                    return True
                if plat in allowed and (
                    (interpreter == cp and abi in {cp, "abi3", "none"}) or stable or pure
                ):
                    return True
    return False


def who(hosts: list[str]) -> str:
    return ("host " if len(hosts) == 1 else "hosts ") + ", ".join(hosts) if hosts else "no host"


def cross_failure(stderr: str, target: dict[str, Any]) -> str:
    """The one line for a failed cross download: the package without a wheel, or pip's error."""
    python, machine = target["python"], target["machine"]
    cp = "cp" + "".join(python.split(".")[:2])
    for line in stderr.splitlines():
        found = NO_WHEEL.search(line)
        if found:
            requirement = found.group(1)
            name = REQUIREMENT_NAME.match(requirement)
            package = name.group(0) if name else requirement
            return (
                f"{package} ({requirement}) has no binary wheel for Python "
                f"{python} ({cp}, {machine}, glibc {target['glibc']}) of {who(target['hosts'])}; "
                f"hosts never build from source: pick a version with a {cp}, abi3 or py3 wheel"
            )
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    cause = (errors or lines or ["(no output)"])[-1]
    return (
        f"the wheelhouse for Python {python} ({cp}, {machine}) of "
        f"{who(target['hosts'])} cannot be downloaded: {cause}"
    )


def cross_download(
    python: Path, target: dict[str, Any], dest: Path, requirements: list[str], *links: Path
) -> list[Path]:
    """Binary wheels of the requirements and their dependencies for the target Python, in dest."""
    version, machine = target["python"], target["machine"]
    cp = "cp" + "".join(version.split(".")[:2])
    argv = [str(python), "-c", CROSS_PIP, json.dumps(marker_environment(version, machine)),
            "download", "--disable-pip-version-check", "--quiet", "--only-binary=:all:",
            "--python-version", version, "--implementation", "cp", "--abi", cp,
            *(f"--platform={tag}" for tag in platforms(machine, target["glibc"])),
            *(f"--find-links={link}" for link in links),
            "--dest", str(dest), *requirements]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(cross_failure(done.stderr, target))
    misfits = [
        p.name
        for p in sorted(dest.iterdir())
        if not wheel_fits(p.name, version, machine, target["glibc"])
    ]
    if misfits:
        raise BuildError(
            f"{misfits[0]} does not install on Python {version} ({cp}, {machine}) "
            f"of {who(target['hosts'])}"
        )
    return sorted(dest.glob("*.whl"))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A tar member without its builder's owner, time and mode: the same bytes every build."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def build_python(build_dir: Path) -> Path:
    """The build virtualenv's python, created once from the running interpreter."""
    venv = build_dir / f".buildenv-{PYTHON_VERSION}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=sys.stderr)
    return python


def copy_tree(project: Path, files: list[Path], tree: Path) -> None:
    # Built from a copy of exactly the hashed files: a stale build/ or egg-info in project/
    # could otherwise slip old modules into the wheel.
    for rel in files:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(project / rel, tree / rel)


def pip_wheel(
    python: Path, wheels: Path, tree: Path, *, own: bool = False
) -> subprocess.CompletedProcess[str]:
    """`pip wheel` of the tree, timestamps pinned. The native build: every dependency too, pip's
    output on stderr. crawlfleet's own wheel (own): that one alone, pip's output captured."""
    env = dict(os.environ, SOURCE_DATE_EPOCH="315532800", PIP_DISABLE_PIP_VERSION_CHECK="1")
    argv = [str(python), "-m", "pip", "wheel", "--quiet", *(["--no-deps"] if own else []),
            "--wheel-dir", str(wheels), str(tree)]  # fmt: skip
    if own:
        return subprocess.run(argv, check=False, env=env, capture_output=True, text=True)
    return subprocess.run(argv, check=True, env=env, stdout=sys.stderr, text=True)


def write_tar(built: list[Path], partial: Path, tar_path: Path) -> None:
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in built:
            tar.add(wheel, arcname=wheel.name, filter=reset)
    partial.replace(tar_path)


def build(project: Path, files: list[Path], tar_path: Path) -> int:
    """The native wheelhouse: `pip wheel` of the project and its dependencies."""
    with tempfile.TemporaryDirectory(dir=tar_path.parent, prefix=".build-") as tmp:
        tree = Path(tmp) / "project"
        copy_tree(project, files, tree)
        wheels = Path(tmp) / "wheels"
        pip_wheel(build_python(tar_path.parent), wheels, tree)
        built = sorted(wheels.glob("*.whl"))
        write_tar(built, Path(tmp) / "wheelhouse.tar", tar_path)
    return len(built)


def own_wheel(project: Path, files: list[Path], build_dir: Path) -> Path:
    """crawlfleet's own wheel (pure Python, no dependencies), built once per source tree."""
    own = build_dir / "own" / source_key(project, files, b"own")
    if not own.is_dir():
        with tempfile.TemporaryDirectory(dir=build_dir, prefix=".own-") as tmp:
            tree = Path(tmp) / "project"
            copy_tree(project, files, tree)
            wheels = Path(tmp) / "wheels"
            done = pip_wheel(build_python(build_dir), wheels, tree, own=True)
            if done.returncode != 0:
                errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
                cause = (errors or done.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise BuildError(f"crawlfleet's own wheel cannot be built: {cause}")
            own.parent.mkdir(exist_ok=True)
            wheels.replace(own)
    return next(own.glob("*.whl"))


def cross_build(
    project: Path, files: list[Path], target: dict[str, Any], tar_path: Path, build_dir: Path
) -> int:
    """A foreign Python's wheelhouse: crawlfleet's own wheel and binary wheels of the rest."""
    wheel = own_wheel(project, files, build_dir)
    with tempfile.TemporaryDirectory(dir=tar_path.parent, prefix=".build-") as tmp:
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        shutil.copyfile(wheel, wheels / wheel.name)
        built = cross_download(build_python(build_dir), target, wheels, [str(wheels / wheel.name)])
        write_tar(built, Path(tmp) / "wheelhouse.tar", tar_path)
    return len(built)


def prune(directory: Path, pattern: str, current: set[Path], keep: int) -> None:
    """Delete the tars ``pattern`` matches in ``directory`` but the ``current`` ones and the
    newest ``keep`` of the others (for a roll-back)."""
    old = sorted(
        (p for p in directory.glob(pattern) if p not in current),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in old[keep:]:
        path.unlink()


def wheelhouse(project: Path, files: list[Path], build_dir: Path, target: dict[str, Any]) -> dict:
    """One target's wheelhouse, built unless this tree was built for it already."""
    if target["native"]:
        key = source_key(project, files, sys.version.encode())
        directory = build_dir
    else:
        python = json.dumps([target["python"], target["machine"], target["glibc"]])
        key = source_key(project, files, python.encode())
        directory = build_dir / target["name"]
        directory.mkdir(exist_ok=True)
    tar_path = directory / f"wheelhouse-{key}.tar"
    changed = not tar_path.is_file()
    if changed:
        if target["native"]:
            build(project, files, tar_path)
        else:
            cross_build(project, files, target, tar_path, build_dir)
        prune(directory, "wheelhouse-*.tar", {tar_path}, KEEP)
    with tarfile.open(tar_path) as tar:
        count = len(tar.getnames())
    return {
        "name": target["name"],
        "native": target["native"],
        "changed": changed,
        "key": key,
        "tar": str(tar_path),
        "sha256": file_sha256(tar_path),
        "wheels": count,
        "python": target["python"],
        "machine": target["machine"],
        "glibc": target.get("glibc", ""),
        "hosts": target["hosts"],
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: build_wheelhouse.py PROJECT_DIR BUILD_DIR [HOSTS]", file=sys.stderr)
        return 2
    project, build_dir = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    if not (project / "pyproject.toml").is_file():
        print(f"build_wheelhouse: {project} has no pyproject.toml", file=sys.stderr)
        return 1
    build_dir.mkdir(parents=True, exist_ok=True)
    files = sources(project)

    def build_all() -> dict[str, Any]:
        targets = group_hosts(json.loads(argv[2]) if len(argv) == 3 else [])
        # The other Pythons first: a dependency without a wheel for one stops the run soonest.
        return {
            t["name"]: wheelhouse(project, files, build_dir, t)
            for t in sorted(targets, key=lambda t: t["native"])
        }

    return answer(build_all, BuildError, "crawlfleet_app: ")


def answer(build: Callable[[], object], errors: type[Exception], where: str = "") -> int:
    """The result of ``build`` as one JSON line on stdout (status 0), or its error as one line on
    stderr (status 1). build_project.py (the crawler role) answers the same way."""
    try:
        result = build()
    except errors as exc:
        print(f"{where}{exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
