"""What the tests share: ports (net), bounded waiting (waiting), service processes (services),
HTTP sites on loopback (sites), the frontier's crawl site and workers (crawl) and its two queue
backends (backends). docs/testing.md lists what each gives.

Imported as ``support`` (tests/ is on the path through pytest.ini's ``pythonpath``; scripts/bench.sh
sets PYTHONPATH alike), never through ``sys.path`` edits.
"""
