import pytest

from crawlfleet.cli import main
from crawlfleet.hub.connect import get_redis
from crawlfleet.hub.errors import RedisConfigError
from crawlfleet.hub.urls import mask_url


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:s3cret@hub:6379/0", "redis://:***@hub:6379/0"),
        ("redis://user:s3cret@hub/2", "redis://user:***@hub/2"),
        ("redis://hub:6379/0", "redis://hub:6379/0"),
        # A port that is not a number still gets the password masked (no ValueError).
        ("redis://:s3cret@hub:abc/0", "redis://:***@hub:abc/0"),
        ("redis://:p@ss@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    ],
)
def test_mask_url_hides_only_the_password(url: str, masked: str) -> None:
    assert mask_url(url) == masked


@pytest.mark.parametrize("url", ["", "http://:pw@hub:6379", "hub:6379", "redis//x"])
def test_get_redis_rejects_non_redis_urls_with_masked_message(url: str) -> None:
    with pytest.raises(RedisConfigError, match="REDIS_URL") as info:
        get_redis(url)
    assert "pw" not in str(info.value)


def test_get_redis_shares_one_client_per_url() -> None:
    assert get_redis("redis://127.0.0.1:1/0") is get_redis("redis://127.0.0.1:1/0")
    assert get_redis("redis://127.0.0.1:1/0") is not get_redis("redis://127.0.0.1:1/1")


def test_cli_without_command_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: crawlfleet" in capsys.readouterr().err


def test_cli_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
