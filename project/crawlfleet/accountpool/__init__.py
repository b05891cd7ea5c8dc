"""crawlfleet.accountpool: per-site accounts in, fresh login tokens out (the hub's account pool).

Modules: ``crypto`` (passwords at rest), ``sites`` (site adapter configuration), ``adapters``
(how to log in and check a credential, plus the entry-point plug-in interface), ``store``
(Redis), ``generator`` and ``tester`` (the two background loops), ``api`` (HTTP), ``config``
and ``cli`` (running it).
"""
