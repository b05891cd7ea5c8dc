"""The one runtime every hub service uses (proxy pool, account pool, dashboard, demo site).

- ``service.http``: what stands between the network and a service's Starlette app — the
  request guard (Host names, cross-site writes, bounded and timed bodies), strict JSON
  reading and uvicorn's connection limits.
- ``service.redisfail``: every way Redis can fail a request (down, frozen, a key of the
  wrong type) as one line for a 503, within a deadline.
- ``service.options`` and ``service.secrets``: the rules for settings, exit statuses and
  API keys.
"""
