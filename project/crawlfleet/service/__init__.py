"""The one runtime every hub service uses (proxy pool, account pool, dashboard, demo site).

- ``service.options``: the option table (flag, variable, default, help declared once), its one
  parser, the exit statuses and the strict readers of numbers and URLs.
- ``service.secrets``: where an API key comes from and the rules it follows.
- ``service.logs``: one structured log line per event (``kv`` or ``json``).
- ``service.runtime``: bind, the start-up Redis check, stop signals, periodic loops, ``serve``
  and the exit status of a command.
- ``service.http``: what stands between the network and a service's Starlette app — the
  request guard (Host names, cross-site writes, bounded and timed bodies), strict JSON
  reading and uvicorn's connection limits.
- ``service.redisfail``: every way Redis can fail a request (down, frozen, a key of the
  wrong type) as one line for a 503, within a deadline.
"""
