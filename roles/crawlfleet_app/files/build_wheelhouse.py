#!/usr/bin/env python3
"""Build the crawlfleet wheelhouse on the control node, once per source tree.

Usage: build_wheelhouse.py PROJECT_DIR BUILD_DIR

Run it with the Python the hosts have (Debian 12: /usr/bin/python3, 3.11.2): dependency markers
such as `python_full_version < "3.11.3"` are decided by the Python that builds. pip runs from a
virtualenv of that Python kept in BUILD_DIR/.buildenv, so the system's packages stay untouched.

The key is a SHA-256 over the project's source files (path and content, sorted; caches and
build output left out). A tree already built is not built again, so an unchanged tree gives the
same artifact. Otherwise `pip wheel` writes crawlfleet and every dependency into a fresh
directory (SOURCE_DATE_EPOCH pins the timestamps inside the wheels), then a tar of it with fixed
order, owners and times is moved into place: BUILD_DIR/wheelhouse-<key>.tar. Prints one JSON
line: {"changed": bool, "key": str, "tar": path, "sha256": str, "wheels": int, "python": str}.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info")
# Wheelhouses kept besides the current one, for a quick roll back by hand.
KEEP = 2
PYTHON_VERSION = ".".join(map(str, sys.version_info[:3]))


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


def source_key(project: Path, files: list[Path]) -> str:
    # The interpreter's version is part of the key: it decides which dependencies are needed.
    digest = hashlib.sha256(sys.version.encode() + b"\0")
    for rel in files:
        digest.update(str(rel).encode() + b"\0" + (project / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    info.mode = 0o644
    return info


def build_python(build_dir: Path) -> Path:
    """The build virtualenv's python, created once from the running interpreter."""
    venv = build_dir / f".buildenv-{PYTHON_VERSION}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=sys.stderr)
    return python


def build(project: Path, files: list[Path], tar_path: Path) -> int:
    with tempfile.TemporaryDirectory(dir=tar_path.parent, prefix=".build-") as tmp:
        # Built from a copy of exactly the hashed files: a stale build/ or egg-info in project/
        # could otherwise slip old modules into the wheel.
        tree = Path(tmp) / "project"
        for rel in files:
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(project / rel, tree / rel)
        wheels = Path(tmp) / "wheels"
        env = dict(os.environ, SOURCE_DATE_EPOCH="315532800", PIP_DISABLE_PIP_VERSION_CHECK="1")
        subprocess.run(
            [
                str(build_python(tar_path.parent)),
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--wheel-dir",
                str(wheels),
                str(tree),
            ],
            check=True,
            env=env,
            stdout=sys.stderr,
        )
        built = sorted(wheels.glob("*.whl"))
        partial = Path(tmp) / "wheelhouse.tar"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            for wheel in built:
                tar.add(wheel, arcname=wheel.name, filter=reset)
        partial.replace(tar_path)
    return len(built)


def prune(build_dir: Path, current: Path) -> None:
    old = sorted(
        (p for p in build_dir.glob("wheelhouse-*.tar") if p != current),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in old[KEEP:]:
        path.unlink()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: build_wheelhouse.py PROJECT_DIR BUILD_DIR", file=sys.stderr)
        return 2
    project, build_dir = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    if not (project / "pyproject.toml").is_file():
        print(f"build_wheelhouse: {project} has no pyproject.toml", file=sys.stderr)
        return 1
    build_dir.mkdir(parents=True, exist_ok=True)
    files = sources(project)
    key = source_key(project, files)
    tar_path = build_dir / f"wheelhouse-{key}.tar"
    changed = not tar_path.is_file()
    if changed:
        build(project, files, tar_path)
        prune(build_dir, tar_path)
    with tarfile.open(tar_path) as tar:
        count = len(tar.getnames())
    print(
        json.dumps(
            {
                "changed": changed,
                "key": key,
                "tar": str(tar_path),
                "sha256": file_sha256(tar_path),
                "wheels": count,
                "python": PYTHON_VERSION,
            }
        )
    )
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
