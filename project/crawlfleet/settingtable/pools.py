"""The settings of the two pool clients: the ProxyMiddleware's and the AuthorizationMiddleware's."""

from __future__ import annotations

from crawlfleet.settingtable.row import Setting

PROXYPOOL = (
    Setting(
        "PROXYPOOL_ENABLED",
        True,
        "`False`: the middleware is disabled (`NotConfigured`)",
    ),
    Setting(
        "PROXYPOOL_URL",
        None,
        "base URL of the proxy pool; unset: disabled (`NotConfigured`, logged by Scrapy)",
        shown="—",
    ),
    Setting(
        "PROXYPOOL_API_KEY",
        "",
        "sent as `X-API-Key`",
        shown="empty",
    ),
    Setting(
        "PROXYPOOL_BATCH_SIZE",
        20,
        "proxies asked for per batch (≥ 1; the pool caps it at its `--max-count`)",
    ),
    Setting(
        "PROXYPOOL_REFRESH_INTERVAL",
        30,
        "seconds a batch is used before a new one is fetched (in the background)",
    ),
    Setting(
        "PROXYPOOL_QUARANTINE",
        60,
        "seconds a reported proxy is not used by this worker",
    ),
    Setting(
        "PROXYPOOL_BAN_STATUS",
        (403, 429),
        (
            'response statuses that mean "this proxy is banned" (with the '
            "[politeness](#politeness) budget on: banned for that site only, the pair cools down "
            "and the proxy is not reported)"
        ),
    ),
    Setting(
        "PROXYPOOL_MAX_RETRIES",
        20,
        "proxies tried per request before giving up",
    ),
    Setting(
        "PROXYPOOL_TIMEOUT",
        5,
        "seconds per call to the pool",
    ),
    Setting(
        "PROXYPOOL_CA_FILE",
        None,
        (
            "CA bundle (PEM) an `https://` `PROXYPOOL_URL` is verified with (certificate and host "
            "name); unset: `CRAWLFLEET_CA_FILE`, else the system's CAs. Read from the settings, "
            "then the environment"
        ),
        shown="unset",
    ),
    Setting(
        "PROXYPOOL_BACKOFF_BASE",
        0.5,
        "back-off while no usable proxy: base, 2×base, … up to max (×0.5–1 jitter)",
    ),
    Setting(
        "PROXYPOOL_BACKOFF_MAX",
        30.0,
        "back-off while no usable proxy: base, 2×base, … up to max (×0.5–1 jitter)",
    ),
)

ACCOUNTPOOL = (
    Setting(
        "AUTHORIZATION_ENABLED",
        True,
        "`False`: the middleware is disabled (`NotConfigured`)",
    ),
    Setting(
        "ACCOUNTPOOL_URL",
        None,
        "base URL of the account pool; unset: disabled (`NotConfigured`, logged by Scrapy)",
        shown="—",
    ),
    Setting(
        "ACCOUNTPOOL_API_KEY",
        "",
        "sent as `X-API-Key`",
        shown="empty",
    ),
    Setting(
        "ACCOUNTPOOL_SITE",
        "demosite",
        "site name in the account pool's URLs",
    ),
    Setting(
        "AUTHORIZATION_HEADER",
        "Authorization",
        "header that carries the token",
    ),
    Setting(
        "AUTHORIZATION_FORMAT",
        "jwt {token}",
        "header value; must contain `{token}`",
    ),
    Setting(
        "AUTHORIZATION_REJECT_STATUS",
        (401,),
        'statuses that mean "this token is no longer valid"',
    ),
    Setting(
        "AUTHORIZATION_MAX_RETRIES",
        5,
        "tokens tried per request before the response goes on to Scrapy",
    ),
    Setting(
        "ACCOUNTPOOL_TIMEOUT",
        5,
        "seconds per call to the pool",
    ),
    Setting(
        "ACCOUNTPOOL_CA_FILE",
        None,
        "as `PROXYPOOL_CA_FILE`, for `ACCOUNTPOOL_URL`",
        shown="unset",
    ),
    Setting(
        "CRAWLFLEET_CA_FILE",
        None,
        (
            "the fleet's CA (`crawlfleet ca init`), for every pool without its own `*_CA_FILE`; "
            "`crawlfleet check` verifies with the same files"
        ),
        shown="unset",
    ),
    Setting(
        "ACCOUNTPOOL_BACKOFF_BASE",
        0.5,
        "back-off while no token: base, 2×base, … up to max (×0.5–1 jitter)",
    ),
    Setting(
        "ACCOUNTPOOL_BACKOFF_MAX",
        30.0,
        "back-off while no token: base, 2×base, … up to max (×0.5–1 jitter)",
    ),
)
