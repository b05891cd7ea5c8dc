"""Every true-or-false Scrapy setting crawlfleet reads names itself when its value is wrong.

Scrapy's ``getbool`` alone answers ``"maybe"`` with a message that names no setting; each reader
below must either take the value as ``getbool`` does or fail with one line naming the setting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawlfleet.extensions.workerstats import WorkerStats
from crawlfleet.frontier.bloomlayout import BloomConfigError, ScalableLayout, layout_from_settings
from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.politeness.config import PolitenessConfig, PolitenessConfigError
from crawlfleet.settingtable.values import flag

URL = "redis://127.0.0.1:1/0"  # never connected to


def _frontier(name: str) -> Callable[[Any], bool]:
    def read(value: Any) -> bool:
        config = FrontierConfig.from_settings(Settings({"REDIS_URL": URL, name: value}), "s")
        field = {
            "REDIS_START_URLS_AS_SET": "start_urls_as_set",
            "SCHEDULER_PERSIST": "persist",
            "SCHEDULER_FLUSH_ON_START": "flush_on_start",
            "SCHEDULER_ENQUEUE_BATCH": "enqueue_batch",
            "SCHEDULER_LIVENESS": "liveness",
        }[name]
        return bool(getattr(config, field))

    return read


def _bloom(value: Any) -> bool:
    layout = layout_from_settings(Settings({"BLOOMFILTER_SCALABLE": value}), "s")
    return isinstance(layout, ScalableLayout)


def _politeness(name: str) -> Callable[[Any], bool]:
    def read(value: Any) -> bool:
        config = PolitenessConfig.from_settings(Settings({name: value}))
        return bool(getattr(config, name.removeprefix("POLITENESS_").lower()))

    return read


def _workerstats(value: Any) -> bool:
    crawler = get_crawler(settings_dict={"WORKERSTATS_ENABLED": value, "REDIS_URL": URL})
    try:
        WorkerStats.from_crawler(crawler)
    except NotConfigured:
        return False
    return True


READERS: dict[str, tuple[Callable[[Any], bool], type[Exception]]] = {
    **{
        name: (_frontier(name), FrontierConfigError)
        for name in (
            "REDIS_START_URLS_AS_SET",
            "SCHEDULER_PERSIST",
            "SCHEDULER_FLUSH_ON_START",
            "SCHEDULER_ENQUEUE_BATCH",
            "SCHEDULER_LIVENESS",
        )
    },
    "BLOOMFILTER_SCALABLE": (_bloom, BloomConfigError),
    "POLITENESS_ENABLED": (_politeness("POLITENESS_ENABLED"), PolitenessConfigError),
    "POLITENESS_GC_FREEZE": (_politeness("POLITENESS_GC_FREEZE"), PolitenessConfigError),
    "WORKERSTATS_ENABLED": (_workerstats, ValueError),
}

TRUE = [True, 1, "1", "True", "true", " TRUE "]
FALSE = [False, 0, "0", "False", "false", "FALSE"]


@pytest.mark.parametrize("name", sorted(READERS))
@pytest.mark.parametrize("value", ["maybe", "yes please", "2", "", 2, -1, 0.5, 1.0, [1]])
def test_a_bad_value_is_one_line_naming_the_setting(name: str, value: Any) -> None:
    read, error = READERS[name]
    with pytest.raises(error) as excinfo:
        read(value)
    message = str(excinfo.value)
    assert message.startswith(f"{name} must be true or false, got "), message
    assert "\n" not in message


@pytest.mark.parametrize("name", sorted(READERS))
def test_true_and_false_are_still_taken(name: str) -> None:
    read, _ = READERS[name]
    for value in TRUE:
        assert read(value) is True, value
    for value in FALSE:
        assert read(value) is False, value


def _oracle(raw: Any) -> bool | None:
    """What ``flag`` takes (None: refused), written out independently."""
    if raw is True or (raw == 1 and type(raw) is int):
        return True
    if raw is False or (raw == 0 and type(raw) is int):
        return False
    if isinstance(raw, str):
        return {"1": True, "true": True, "0": False, "false": False}.get(raw.strip().lower())
    return None


@given(
    st.text(max_size=40)
    | st.sampled_from(["1", "0", "true", "FALSE", " True\n"])
    | st.integers(-3, 3)
    | st.floats(allow_nan=True)
    | st.booleans()
)
def test_flag_takes_true_and_false_and_names_the_setting_otherwise(raw: Any) -> None:
    settings = Settings({"SOME_FLAG": raw})
    expected = _oracle(raw)
    if expected is None:
        with pytest.raises(KeyError) as excinfo:
            flag(settings, "SOME_FLAG", True, KeyError)
        line = str(excinfo.value.args[0])
        assert line.startswith("SOME_FLAG must be true or false, got ")
        assert "\n" not in line and len(line) < 160
    else:
        assert flag(settings, "SOME_FLAG", not expected) is expected


def test_an_unset_flag_is_its_default() -> None:
    assert flag(Settings({}), "SOME_FLAG", True) is True
    assert flag(Settings({"SOME_FLAG": None}), "SOME_FLAG", False) is False


@pytest.mark.parametrize("value", ["inf", float("inf"), "nan", float("nan"), "-inf"])
@pytest.mark.parametrize(
    "name", ["SCHEDULER_LEASE_TIMEOUT", "SCHEDULER_WAIT_TIMEOUT", "SCHEDULER_IDLE_POLL_MAX"]
)
def test_a_number_of_seconds_that_never_ends_is_one_line(name: str, value: object) -> None:
    # inf passed `> 0` and then overflowed turning into milliseconds (a traceback), nan passed it
    with pytest.raises(FrontierConfigError, match=rf"^{name} must be > 0, got "):
        FrontierConfig.from_settings(Settings({name: value}), "book")


def test_the_extensions_seconds_refuse_what_never_ends() -> None:
    for value in ("inf", "nan", "0", "soon"):
        with pytest.raises(ValueError, match=r"^WORKERSTATS_HISTORY must be"):
            WorkerStats.from_crawler(get_crawler(settings_dict={"WORKERSTATS_HISTORY": value}))
