"""The pieces of the per-Python wheelhouse build that decide without the network: which hosts
share a wheelhouse, the platform tags a host runs, the marker values of its Python, whether a
wheel fits it (against packaging.tags, pip's own reference), and the one line a wheel that does
not exist gives."""

from __future__ import annotations

import platform

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.tags import parse_tag
from support.wheelhouse import load_builder, supported_tags

bw = load_builder()
NATIVE = f"{bw.PYTHON_VERSION}-{bw.machine_tag(platform.machine())}"


def host(name: str, python: str, machine: str = "x86_64", glibc: str = "2.41") -> dict[str, str]:
    return {"host": name, "python": python, "machine": machine, "glibc": glibc}


def test_hosts_of_the_control_nodes_python_share_the_native_wheelhouse() -> None:
    machine = platform.machine()
    targets = bw.group_hosts(
        [host("a", bw.PYTHON_VERSION, machine, "2.36"), host("b", "3.13.5"),
         host("c", "3.13.5"), host("d", bw.PYTHON_VERSION, machine, "2.41")]
    )  # fmt: skip
    by_name = {t["name"]: t for t in targets}
    assert by_name[NATIVE]["native"] is True
    assert by_name[NATIVE]["hosts"] == ["a", "d"]
    cross = by_name["3.13.5-x86_64-glibc2.41"]
    assert cross == {
        "name": "3.13.5-x86_64-glibc2.41", "native": False, "python": "3.13.5",
        "machine": "x86_64", "glibc": "2.41", "hosts": ["b", "c"],
    }  # fmt: skip
    assert len(targets) == 2


def test_the_native_wheelhouse_is_built_even_without_its_hosts() -> None:
    targets = bw.group_hosts([host("b", "3.13.5", "amd64")])
    assert [(t["name"], t["native"], t["hosts"]) for t in targets] == [
        (NATIVE, True, []),
        ("3.13.5-x86_64-glibc2.41", False, ["b"]),
    ]


def test_other_glibc_or_architecture_is_another_wheelhouse() -> None:
    names = {
        t["name"]
        for t in bw.group_hosts(
            [host("b", "3.13.5"), host("c", "3.13.5", "aarch64"), host("d", "3.13.5", glibc="2.36")]
        )
    }
    assert {
        "3.13.5-x86_64-glibc2.41", "3.13.5-aarch64-glibc2.41", "3.13.5-x86_64-glibc2.36"
    } <= names  # fmt: skip


@pytest.mark.parametrize("python", ["", "3.13", "pypy3.10", "2.7.18"])
def test_a_python_that_is_not_cpython_3_names_the_host(python: str) -> None:
    with pytest.raises(bw.BuildError, match=r"^host b runs Python '.*': need a CPython 3\.X\.Y$"):
        bw.group_hosts([host("b", python)])


def test_platform_tags_of_debian_13_best_first() -> None:
    tags = bw.platforms("x86_64", "2.41")
    assert tags[0] == "manylinux_2_41_x86_64"
    assert tags[-1] == "manylinux1_x86_64"
    assert tags.index("manylinux2014_x86_64") == tags.index("manylinux_2_17_x86_64") + 1
    assert tags.index("manylinux2010_x86_64") == tags.index("manylinux_2_12_x86_64") + 1
    assert "manylinux_2_42_x86_64" not in tags
    assert not any(t.startswith(("linux_", "musllinux")) for t in tags)


def test_aarch64_has_no_tags_older_than_manylinux2014() -> None:
    tags = bw.platforms("aarch64", "2.36")
    assert "manylinux2014_aarch64" in tags
    assert not any(t.startswith(("manylinux1_", "manylinux2010_")) for t in tags)


def test_markers_are_those_of_the_hosts_python() -> None:
    env = bw.marker_environment("3.13.5", "aarch64")
    assert env["python_version"] == "3.13"
    assert env["python_full_version"] == "3.13.5"
    assert (env["platform_machine"], env["sys_platform"], env["implementation_name"]) == (
        "aarch64", "linux", "cpython"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("filename", "fits"),
    [
        ("lxml-6.1.3-cp313-cp313-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl", True),
        ("cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl", True),
        ("scrapy-2.19.0-py3-none-any.whl", True),
        ("six-1.17.0-py2.py3-none-any.whl", True),
        ("lxml-6.1.3-cp312-cp312-manylinux_2_28_x86_64.whl", False),
        ("x-1.0-cp314-abi3-manylinux_2_28_x86_64.whl", False),
        ("x-1.0-cp313-cp313-manylinux_2_42_x86_64.whl", False),
        ("x-1.0-cp313-cp313-musllinux_1_2_x86_64.whl", False),
        ("x-1.0-cp313-cp313-manylinux_2_28_aarch64.whl", False),
        ("x-1.0-cp313-cp313t-manylinux_2_28_x86_64.whl", False),
        ("docopt-0.6.2.tar.gz", False),
    ],
)
def test_a_wheel_fits_python_3_13_of_debian_13(filename: str, fits: bool) -> None:
    assert bw.wheel_fits(filename, "3.13.5", "x86_64", "2.41") is fits


INTERPRETERS = st.sampled_from(["cp39", "cp311", "cp312", "cp313", "cp314", "py3", "py2", "py313",
                                "py314", "py30", "pp310", "cp3"])  # fmt: skip
ABIS = st.sampled_from(["cp313", "cp311", "abi3", "none", "cp313t", "pypy310_pp73"])
PLATFORMS = st.sampled_from(["any", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                             "manylinux_2_41_x86_64", "manylinux_2_42_x86_64", "manylinux1_x86_64",
                             "manylinux_2_28_aarch64", "linux_x86_64", "musllinux_1_2_x86_64",
                             "win_amd64", "macosx_11_0_arm64"])  # fmt: skip


@pytest.mark.fuzz
@given(
    st.lists(INTERPRETERS, min_size=1, max_size=3),
    st.lists(ABIS, min_size=1, max_size=2),
    st.lists(PLATFORMS, min_size=1, max_size=3),
    st.sampled_from([("3.13.5", "2.41"), ("3.11.2", "2.36")]),
)
def test_wheel_fits_agrees_with_packaging_tags(
    interpreters: list[str], abis: list[str], plats: list[str], target: tuple[str, str]
) -> None:
    python, glibc = target
    tag = f"{'.'.join(interpreters)}-{'.'.join(abis)}-{'.'.join(plats)}"
    filename = f"x-1.0-{tag}.whl"
    # linux_x86_64 is the control node's own build, never portable to a host: left out on purpose.
    reference = supported_tags(python, bw.platforms("x86_64", glibc))
    expected = bool(parse_tag(tag) & reference)
    assert bw.wheel_fits(filename, python, "x86_64", glibc) is expected, tag


PIP_NO_WHEEL = """\
WARNING: Location 'file:///opt/pypi/simple/docopt/' is ignored: it is neither a file nor a directory.
ERROR: Could not find a version that satisfies the requirement docopt==0.6.2 (from tinyproj) (from versions: none)
ERROR: No matching distribution found for docopt==0.6.2
"""  # noqa: E501


def test_a_dependency_without_a_wheel_is_one_line_naming_package_hosts_and_python() -> None:
    target = {"python": "3.13.5", "machine": "x86_64", "glibc": "2.41", "hosts": ["b", "c"]}
    line = bw.cross_failure(PIP_NO_WHEEL, target)
    assert line.startswith("docopt (docopt==0.6.2) has no binary wheel for Python 3.13.5 ")
    assert "(cp313, x86_64, glibc 2.41) of hosts b, c;" in line
    assert "\n" not in line


def test_any_other_pip_failure_is_its_last_error_line() -> None:
    target = {"python": "3.13.5", "machine": "x86_64", "glibc": "2.41", "hosts": ["b"]}
    stderr = "ERROR: Cannot install a and b because these package versions have conflicting deps.\n"
    line = bw.cross_failure(stderr, target)
    assert line == (
        "the wheelhouse for Python 3.13.5 (cp313, x86_64) of host b cannot be downloaded: "
        "ERROR: Cannot install a and b because these package versions have conflicting deps."
    )
