#!/usr/bin/env python3
"""Check and package the team's Scrapy projects on the control node (role crawler).

Usage: build_project.py SPEC

SPEC (JSON): {"build_dir": path, "wheelhouse": the platform wheelhouse tar (role crawlfleet_app),
"projects": [{"name", "src", "version", "settings", "requirements": [...], "spiders": [...]}]}.
Run it with the Python the hosts have (like build_wheelhouse.py). For each project, before any
host changes:

1. the source: ``src`` is a directory here, or a git URL checked out at ``version``;
2. the requirements are built into wheels (``pip wheel``, the only step that needs an index) and
   installed with the platform's wheels, without an index, into a virtualenv kept per
   requirements set: what a worker will install, so a conflict with crawlfleet shows here;
3. in that virtualenv, with ``SCRAPY_SETTINGS_MODULE=crawlfleet.fleetsettings`` as on a worker,
   ``scrapy list`` must import the settings and name every spider the inventory lists;
4. the release: a tar of the source tree (caches left out), the requirement wheels and
   requirements.txt, with fixed order, owners and times. Its key is a SHA-256 over the platform
   wheelhouse, the requirements and the source files: an unchanged project is the same release.

SPEC may also hold "targets": the wheelhouses role crawlfleet_app built for the hosts' other
Python versions ({"name", "tar", "python", "machine", "glibc", "hosts"}, the cross ones). Steps
1 to 3 run once, with the control node's Python; for each target the project gets a release of
its own: the same source tree with the requirements as binary wheels for that Python
(build_wheelhouse.cross_download, resolved together with crawlfleet's own wheel, so a conflict
shows here too), keyed by that target's platform wheelhouse, the requirements and the sources.

Prints one JSON line {name: {"key", "tar", "sha256", "spiders", "targets": {target name: {"key",
"tar", "sha256"}}}}. A project that fails stops the run with ONE line on stderr,
``crawler_projects[<name>]: <cause>``, and exit code 1 (a requirement without a wheel for a
target: the package, the hosts and their Python version).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

# Role crawlfleet_app's builder lies beside this role: its tars, hashes and cross-downloads are
# this script's too (projects_build.yml also puts it on PYTHONPATH).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "crawlfleet_app" / "files"))
import build_wheelhouse as wheelhouse
from build_wheelhouse import build_python, file_sha256, reset

SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".scrapy"}
SKIP_SUFFIXES = (".pyc", ".pyo")
GIT_PREFIXES = ("http://", "https://", "ssh://", "git://", "git@", "file://")
PIP = ["-m", "pip", "--disable-pip-version-check"]
# Builds of a project kept besides the newest, for a roll-back (each with a tar per Python).
KEEP_BUILDS = 2


class ProjectError(Exception):
    """One line naming the cause; the project's name is added by main()."""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("ERROR:", "error:", "fatal:"))]
    return (errors or lines or ["(no output)"])[-1]


def pip_failure(text: str) -> str:
    """Why ``pip wheel`` failed, in one line: the last line the failing build printed (its
    exception, above pip's ``[end of output]``) and the package pip names, else pip's own error."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    packages = [
        line.split("Failed building wheel for ", 1)[1]
        for line in lines
        if "Failed building wheel for " in line
    ]
    causes = [
        lines[i - 1]
        for i, line in enumerate(lines)
        if line == "[end of output]" and i > 0 and not lines[i - 1].startswith(("╰─>", "[end"))
    ]
    if causes:
        where = f"building {packages[0]}: " if packages else ""
        return f"{where}{causes[0]}"
    return last_line(text)


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def checkout(project: dict[str, Any], work: Path) -> Path:
    """The project's source tree: its directory, or a fresh checkout of the git URL."""
    src = str(project.get("src") or "")
    if src.startswith(GIT_PREFIXES) or src.endswith(".git"):
        version = str(project.get("version") or "")
        if not version:
            raise ProjectError(f"src {src} is a git URL: set version (a tag, branch or commit)")
        tree = work / "git"
        cloned = run(["git", "clone", "--quiet", src, str(tree)])
        if cloned.returncode != 0:
            raise ProjectError(f"git clone {src} failed: {last_line(cloned.stderr)}")
        switched = run(["git", "-C", str(tree), "checkout", "--quiet", "--detach", version])
        if switched.returncode != 0:
            raise ProjectError(f"git {src} has no version {version}: {last_line(switched.stderr)}")
        return tree
    path = Path(src).expanduser()
    if not path.is_dir():
        raise ProjectError(f"src {src} does not exist on the control node (or is not a directory)")
    return path.resolve()


def sources(tree: Path) -> list[Path]:
    found = []
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
            continue
        if path.is_file() and not path.name.endswith(SKIP_SUFFIXES):
            found.append(rel)
    return found


def requirement_wheels(
    build_dir: Path, platform: Path, requirements: list[str], key: str
) -> tuple[Path, Path]:
    """Wheels of the requirements (beside the platform's) and a checked virtualenv of them all."""
    wheels = build_dir / "requirements" / key
    venv = build_dir / "venvs" / key
    if (venv / ".installed").is_file():
        return wheels, venv
    shutil.rmtree(wheels, ignore_errors=True)
    shutil.rmtree(venv, ignore_errors=True)
    wheels.mkdir(parents=True)
    if requirements:
        built = run(
            [str(build_python(build_dir)), *PIP, "wheel", "--quiet", "--wheel-dir", str(wheels),
             "--find-links", str(platform), *requirements],
            env=dict(os.environ, SOURCE_DATE_EPOCH="315532800"),
        )  # fmt: skip
        if built.returncode != 0:
            raise ProjectError(
                f"the requirements {' '.join(requirements)} cannot be built into the wheelhouse: "
                f"{pip_failure(built.stderr)}"
            )
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = run(
        [str(venv / "bin" / "python"), *PIP, "install", "--quiet", "--no-index",
         "--find-links", str(platform), "--find-links", str(wheels), "crawlfleet", *requirements],
    )  # fmt: skip
    if installed.returncode != 0:
        raise ProjectError(
            f"the requirements {' '.join(requirements)} cannot be installed beside crawlfleet: "
            f"{last_line(installed.stderr)}"
        )
    (venv / ".installed").touch()
    return wheels, venv


def check_spiders(project: dict[str, Any], venv: Path, tree: Path) -> list[str]:
    """``scrapy list`` as a worker runs the project; every listed spider must be there."""
    settings = str(project.get("settings") or "")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", str(tree)),
        "PYTHONPATH": str(tree),
        # The project's directory stays as it is: no __pycache__ written into it.
        "PYTHONDONTWRITEBYTECODE": "1",
        "SCRAPY_SETTINGS_MODULE": "crawlfleet.fleetsettings",
        "CRAWLFLEET_PROJECT_SETTINGS": settings,
        **{str(k): str(v) for k, v in (project.get("env") or {}).items()},
    }
    listed = run([str(venv / "bin" / "scrapy"), "list"], cwd=tree, env=env)
    if listed.returncode != 0:
        if "does not import" in listed.stderr:
            cause = last_line(
                "\n".join(line for line in listed.stderr.splitlines() if "does not import" in line)
            )
            cause = cause.split("CRAWLFLEET_PROJECT_SETTINGS=", 1)[-1]
            raise ProjectError(f"settings module {cause}")
        raise ProjectError(f"scrapy list failed: {last_line(listed.stderr)}")
    have = listed.stdout.split()
    missing = [s for s in project.get("spiders", []) if s not in have]
    if missing:
        listed_names = ", ".join(have) or "none"
        raise ProjectError(
            f"the project has no spider {', '.join(missing)} (scrapy list: {listed_names})"
        )
    return have


def package(tar_path: Path, tree: Path, wheels: Path, reqs: list[str]) -> Path:
    """The release tar; one that exists is reused (and touched: it is this build's again)."""
    files = sources(tree)
    if tar_path.is_file():
        tar_path.touch()
        return tar_path
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    partial = tar_path.with_name(f".build-{tar_path.name}")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            tar.add(tree / rel, arcname=f"src/{rel}", recursive=False, filter=reset)
        for wheel in sorted(wheels.glob("*.whl")):
            tar.add(wheel, arcname=f"wheels/{wheel.name}", filter=reset)
        data = "".join(f"{r}\n" for r in reqs).encode()
        info = reset(tarfile.TarInfo("requirements.txt"))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    partial.replace(tar_path)
    return tar_path


def prune(directory: Path, current: set[Path]) -> None:
    """Delete a project's old releases once its build is done: this build's tars (one per Python)
    stay, and of the others the newest ``KEEP_BUILDS`` times as many (the builds before it, for
    a roll-back). Pruning per tar, by age alone, deleted a tar that the same build had reused
    and was about to return once a fleet had more than two Pythons."""
    wheelhouse.prune(directory, "release-*.tar", current, KEEP_BUILDS * len(current))


def cross_release(
    project: dict[str, Any], build_dir: Path, target: dict[str, Any], tree: Path, files: list[Path]
) -> dict[str, str]:
    """The project's release for a target's Python: its requirements as binary wheels for it."""
    reqs = [str(r) for r in project.get("requirements") or []]
    platform = Path(target["platform"])
    triple = json.dumps([target["python"], target["machine"], target["glibc"]])
    req_key = hashlib.sha256(
        (platform.name + "\0" + "\0".join(reqs) + "\0" + triple).encode()
    ).hexdigest()[:16]
    wheels = build_dir / "requirements" / req_key
    if not (wheels / ".complete").is_file():
        shutil.rmtree(wheels, ignore_errors=True)
        wheels.mkdir(parents=True)
        if reqs:
            own = next(platform.glob("crawlfleet-*.whl"))
            try:
                wheelhouse.cross_download(
                    build_python(build_dir), target, wheels, [str(own), *reqs], platform
                )
            except wheelhouse.BuildError as exc:
                raise ProjectError(str(exc)) from None
            # The platform's wheels come with the platform wheelhouse: only the rest is released.
            for wheel in wheels.glob("*.whl"):
                if (platform / wheel.name).is_file():
                    wheel.unlink()
        (wheels / ".complete").touch()
    digest = hashlib.sha256(req_key.encode() + b"\0")
    for rel in files:
        digest.update(str(rel).encode() + b"\0" + (tree / rel).read_bytes() + b"\0")
    key = digest.hexdigest()[:16]
    tar = package(build_dir / str(project["name"]) / f"release-{key}.tar", tree, wheels, reqs)
    return {"key": key, "tar": str(tar), "sha256": file_sha256(tar)}


def build(
    project: dict[str, Any], build_dir: Path, platform: Path, targets: list[dict[str, Any]]
) -> dict[str, Any]:
    """Check one project and package its releases: {key, tar, sha256, spiders, targets}."""
    reqs = [str(r) for r in project.get("requirements") or []]
    req_key = hashlib.sha256(
        (platform.name + "\0" + "\0".join(reqs) + "\0" + sys.version).encode()
    ).hexdigest()[:16]
    with tempfile.TemporaryDirectory(prefix=".checkout-", dir=build_dir) as work:
        tree = checkout(project, Path(work))
        files = sources(tree)
        if not files:
            raise ProjectError(f"src {project.get('src')} holds no files")
        # Every other Python's binary wheels first: a requirement missing one is named for
        # that host's Python, whether or not it would build here from source.
        releases = {t["name"]: cross_release(project, build_dir, t, tree, files) for t in targets}
        wheels, venv = requirement_wheels(build_dir, platform, reqs, req_key)
        spiders = check_spiders(project, venv, tree)
        digest = hashlib.sha256(req_key.encode() + b"\0")
        for rel in files:
            digest.update(str(rel).encode() + b"\0" + (tree / rel).read_bytes() + b"\0")
        key = digest.hexdigest()[:16]
        tar = package(build_dir / str(project["name"]) / f"release-{key}.tar", tree, wheels, reqs)
    prune(tar.parent, {tar, *(Path(r["tar"]) for r in releases.values())})
    return {
        "key": key,
        "tar": str(tar),
        "sha256": file_sha256(tar),
        "spiders": spiders,
        "targets": releases,
    }


def unpack(build_dir: Path, platform_tar: Path) -> Path:
    """A platform wheelhouse as a directory, kept by its checksum."""
    platform = build_dir / "platform" / file_sha256(platform_tar)[:16]
    if not platform.is_dir():
        partial = Path(tempfile.mkdtemp(dir=build_dir, prefix=".platform-"))
        with tarfile.open(platform_tar) as tar:
            tar.extractall(partial)  # noqa: S202 - our own tar (build_wheelhouse.py)
        platform.parent.mkdir(exist_ok=True)
        partial.replace(platform)
    return platform


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: build_project.py SPEC", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    build_dir = Path(spec["build_dir"]).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    platform = unpack(build_dir, Path(spec["wheelhouse"]))
    targets = [
        {**target, "platform": str(unpack(build_dir, Path(target["tar"])))}
        for target in spec.get("targets", [])
    ]

    def build_all() -> dict[str, Any]:
        results = {}
        for project in spec["projects"]:
            try:
                results[project["name"]] = build(project, build_dir, platform, targets)
            except ProjectError as exc:
                raise ProjectError(f"crawler_projects[{project['name']}]: {exc}") from exc
        return results

    return wheelhouse.answer(build_all, ProjectError)


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
