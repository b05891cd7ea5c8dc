"""Every credential form the Redis URL parser accepts is masked; an unreadable URL is not echoed.

Issue 21 item 2: ``?password=`` and a password in the user position leaked into ``/health``,
start logs and ``crawlfleet status``. ``mask_url`` is the one function every place uses.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlfleet.hub.errors import RedisUrlError
from crawlfleet.hub.urls import mask_secrets, mask_url, redis_location, validate_url

SECRET = "hubS3cret!"
FORMS = [
    "redis://:{pw}@hub:6379/0",
    "redis://user:{pw}@hub:6379/0",
    "redis://{pw}@hub:6379/0",
    "redis://hub:6379/0?password={pw}",
    "redis://hub:6379/0?username={pw}&password={pw}",
    "redis://hub:6379/0?db=2&password={pw}&socket_timeout=5",
    "rediss://:{pw}@hub:6380/0?ssl_cert_reqs=none",
    "rediss://hub:6380/0?ssl_password={pw}",
    "unix:///run/redis/redis.sock?db=0&password={pw}",
    "unix://:{pw}@/run/redis/redis.sock?db=0",
    "redis+sentinel://:{pw}@h1:26379,h2:26379/mymaster/0",
    "redis+cluster://:{pw}@h1:7000,h2:7001/0",
    "redis://hub:6379/0#{pw}",
    "http://pool:5555/count?key={pw}",
]


@pytest.mark.parametrize("form", FORMS)
def test_every_credential_form_is_masked(form: str) -> None:
    url = form.format(pw=quote(SECRET, safe=""))
    shown = mask_url(url)
    assert "hubS3cret" not in shown and "***" in shown, shown
    location = redis_location(url)
    assert "hubS3cret" not in location and "***" not in location and "@" not in location
    assert "?" not in location and "#" not in location


@pytest.mark.parametrize(
    ("url", "shown", "location"),
    [
        ("redis://:pw@hub:6379/0", "redis://:***@hub:6379/0", "redis://hub:6379/0"),
        ("redis://pw@hub/0", "redis://***@hub/0", "redis://hub/0"),
        ("redis://hub/0?password=pw&db=1", "redis://hub/0?password=***&db=1", "redis://hub/0"),
        (
            "unix:///tmp/r.sock?password=pw",
            "unix:///tmp/r.sock?password=***",
            "unix:///tmp/r.sock",
        ),
        (
            "redis+sentinel://:pw@h1:1,h2:2/svc/0",
            "redis+sentinel://:***@h1:1,h2:2/svc/0",
            "redis+sentinel://h1:1,h2:2/svc/0",
        ),
        # A query parameter redis-py does not know may be the tail of a password with "&".
        ("redis://hub/0?pass=pw", "redis://hub/0?***", "redis://hub/0"),
    ],
)
def test_what_is_kept(url: str, shown: str, location: str) -> None:
    assert mask_url(url) == shown
    assert redis_location(url) == location


@pytest.mark.parametrize(
    "url",
    [
        "redis://[bad",  # urlsplit raises: Invalid IPv6 URL
        "redis://:pa/ss@hub:6379/0",  # "/" in an unquoted password: the host part is cut short
        "redis://:pa?ss@hub/0",
        "redis://:pa#ss@hub/0",
        "hub:6379",  # no scheme://: whatever it is, it is not shown
        "pa/ss",
        "",
    ],
)
def test_an_unreadable_url_is_not_echoed(url: str) -> None:
    shown = mask_url(url)
    assert "<hidden" in shown
    assert "pa" not in shown.replace("<hidden: not a valid URL>", "")
    assert redis_location(url) == ""


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("redis://[bad", "invalid REDIS_URL (--redis-url): "),
        ("redis://[bad", "Invalid IPv6 URL"),
        ("redis://:hubS3cret!@hub:port/0", "port that is not a number"),
        ("redis://:pa/hubS3cret!@hub/0", "port that is not a number"),
        ("redis://hub/0?db=x", "Invalid value for 'db'"),
        ("redis://hub/0?pasword=hubS3cret!", "query parameter(s) redis-py does not read"),
        ("http://hub/0", "REDIS_URL (--redis-url) must look like redis://"),
        ("", "is empty"),
    ],
)
def test_validate_url_names_the_setting_in_one_line(url: str, needle: str) -> None:
    with pytest.raises(RedisUrlError) as info:
        validate_url(url, "REDIS_URL (--redis-url)")
    message = str(info.value)
    assert needle in message and "\n" not in message
    assert "hubS3cret" not in message


def test_mask_secrets_masks_raw_and_quoted_forms() -> None:
    text = f"refused key {SECRET} (sent as {quote(SECRET, safe='')})"
    assert mask_secrets(text, [SECRET]) == "refused key *** (sent as ***)"


# Any printable password, URL-quoted as a URL must carry it, in every form above.
passwords = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_categories=("Cs",)),
    min_size=4,
    max_size=40,
).filter(lambda s: s.strip() == s and s.isprintable())


@pytest.mark.fuzz
@given(password=passwords, form=st.sampled_from(FORMS))
def test_no_password_survives_masking(password: str, form: str) -> None:
    quoted = quote(password, safe="")
    url = form.format(pw=quoted)
    shown = mask_url(url)
    location = redis_location(url)
    skeleton = form.format(pw="")
    for text in (shown, location):
        unmasked = text.replace("***", "\0")
        assert quoted not in unmasked or quoted in skeleton
        assert password not in unmasked or password in skeleton


@pytest.mark.fuzz
@given(
    password=passwords,
    form=st.sampled_from(["redis://:{pw}@hub:6379/0", "rediss://u:{pw}@hub/1", "redis://{pw}@hub"]),
)
def test_an_unquoted_password_never_shows_either(password: str, form: str) -> None:
    # Written unquoted, "/", "?" or "#" cut the URL short; what follows must not be shown.
    if form.startswith("redis://{pw}") and ":" in password:
        password = password.replace(":", "")  # "a:b@" is user a with password b to redis-py
    url = form.format(pw=password)
    skeleton = form.format(pw="")
    for text in (mask_url(url), redis_location(url)):
        unmasked = text.replace("***", "\0").replace("<hidden: not a valid URL>", "\0")
        assert password not in unmasked or password in skeleton
