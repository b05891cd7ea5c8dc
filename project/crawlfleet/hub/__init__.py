"""The hub's floor: what every part of crawlfleet shares about the hub's Redis.

Everything that talks to the hub stands on this package, and it stands on nothing of
crawlfleet's (only the standard library and redis-py; ``tests/unit/core/test_core_layers.py``
fails on an import that runs back up):

- ``keys``: every key of a crawl (``SpiderKeys``, the settings that rename five, shards'
  names, a cluster's hash tags); ``fleetkeys``: the fleet's own keys (``JobKeys``: jobs,
  agents, alerts) and the pools' hash tags (``pool_tag``); ``keydoc``: the documented table
  docs/reference/redis-keys.md is generated from; ``acl``: who may touch which of those keys,
  one Redis ACL user per role (``crawlfleet acl render``).
- ``urls``: the URL forms (plain, TLS, Sentinel, Cluster), read by one parser each, and shown
  only masked; ``connect``: the clients those URLs name, one pool per process, a Scrapy
  project's ``REDIS_URL``/``REDIS_PARAMS`` (``redis_from_settings``), and the first failure as
  one line (``check_connection``).
- ``clock``: Redis's ``TIME``, the one clock of scripts and records; ``lua``: the reader of
  every package's ``lua/`` folder (no script lives in a Python string).
- ``fullhub``: Redis refusing writes at ``maxmemory``, one line per episode.
- ``errors``: the one exception tree (``HubError``).

Importing the package imports none of them: a module takes what it uses.
"""
