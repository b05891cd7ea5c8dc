"""The keys of the fleet itself, and the pools' hash tags: what belongs to no one crawl.

The keys of crawl jobs, schedules, agents and alerts (``crawlfleet.jobs``, ``crawlfleet.alerts``,
docs/jobs.md) live under the reserved prefix ``crawlfleet:`` (no spider may be called
``crawlfleet``): :class:`JobKeys` names them, documented in
``crawlfleet.hub.keydoc.JOB_KEYS``; on a Redis Cluster under ``{crawlfleet}``
(``JobKeys.for_client``). The pools' keys take their tag from :func:`pool_tag`.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawlfleet.hub.keys import has_hash_tag
from crawlfleet.hub.urls import is_cluster_client

#: The prefix of the fleet's own keys, and so a name no spider may have (``<spider>:*`` of a
#: spider of that name would reach the job records).
FLEET_PREFIX = "crawlfleet"
#: The same prefix on a Redis Cluster: every job, schedule and agent key in one slot, so a job's
#: transactions and scripts (record, history, the active set) touch one node.
FLEET_TAG = "{" + FLEET_PREFIX + "}"


def pool_tag(name: str, client: object) -> str:
    """How a pool's keys name it (the proxy pool's ``PROXYPOOL_REDIS_KEY``, an account pool
    site): as is, or through a Redis Cluster client the hash tag ``{name}`` (a name that has one
    already is kept), so every key of one pool (or one site) and its scripts share one slot."""
    if not is_cluster_client(client) or has_hash_tag(name):
        return name
    return "{" + name + "}"


@dataclass(frozen=True)
class JobKeys:
    """The Redis key names of crawl jobs, schedules and the agents (``crawlfleet.jobs``)."""

    prefix: str = FLEET_PREFIX

    @classmethod
    def for_client(cls, client: object) -> JobKeys:
        """The names as ``client`` reaches them: under ``{crawlfleet}`` through a Redis Cluster
        client, else ``crawlfleet`` (the documented names)."""
        return cls(FLEET_TAG if is_cluster_client(client) else FLEET_PREFIX)

    def _key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def job(self, job_id: str) -> str:
        return self._key("job", job_id)

    def job_history(self, job_id: str) -> str:
        return self._key("job", job_id, "history")

    @property
    def jobs(self) -> str:
        return self._key("jobs")

    @property
    def jobs_active(self) -> str:
        return self._key("jobs", "active")

    @property
    def job_seq(self) -> str:
        return self._key("jobs", "seq")

    @property
    def agents(self) -> str:
        return self._key("agents")

    def agent(self, name: str) -> str:
        return self._key("agent", name)

    def commands(self, name: str) -> str:
        return self._key("agent", name, "commands")

    def ack(self, command: str) -> str:
        return self._key("ack", command)

    @property
    def schedules(self) -> str:
        return self._key("schedules")

    @property
    def schedule_seq(self) -> str:
        return self._key("schedules", "seq")

    @property
    def scheduler_lock(self) -> str:
        return self._key("scheduler", "lock")

    @property
    def alerts_state(self) -> str:
        return self._key("alerts", "state")

    @property
    def alerts_notified(self) -> str:
        return self._key("alerts", "notified")
