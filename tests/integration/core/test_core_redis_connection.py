from pathlib import Path

import pytest
from support.net import free_port

from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.errors import RedisConfigError

from redis_server import start_redis


def test_check_connection_accepts_the_right_password(tmp_path: Path) -> None:
    server = start_redis(tmp_path, password="right")
    try:
        check_connection(get_redis(server.url), server.url)
    finally:
        server.stop()


@pytest.mark.parametrize("password", ["wrong", None])
def test_wrong_or_missing_password_is_one_line_and_masked(
    tmp_path: Path, password: str | None
) -> None:
    server = start_redis(tmp_path, password="right")
    auth = f":{password}@" if password else ""
    url = f"redis://{auth}127.0.0.1:{server.port}/0"
    try:
        with pytest.raises(RedisConfigError) as info:
            check_connection(get_redis(url), url)
    finally:
        server.stop()
    message = str(info.value)
    assert "\n" not in message and "password" in message
    assert "wrong" not in message


def test_unreachable_redis_names_the_url() -> None:
    url = f"redis://:hidden@127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisConfigError, match=r"cannot reach Redis at redis://:\*\*\*@127"):
        check_connection(get_redis(url, socket_connect_timeout=1), url)
