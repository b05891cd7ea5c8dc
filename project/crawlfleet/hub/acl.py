"""Per-role Redis ACL users as data, rendered to ``aclfile`` lines for the redis role.

One user per role — ``crawler``, ``proxypool``, ``accountpool``, ``dashboard``, ``operator`` —
each limited to the keys and commands that role needs, and ``default`` switched off, so a
client must name its user in REDIS_URL (``redis://crawler:<password>@hub:6379/0``):

* ``crawler``: every key of the configured spiders (``~<spider>:*``; the frontier's Lua
  scripts derive all their key names from that prefix and Redis checks them all), its
  ``crawlfleet check`` probe key and what ``crawlfleet agent`` on a worker needs
  (:data:`AGENT_KEYS`: the agents' registry and records with their command lists, the job
  records, their histories and the two job indexes; the acks write-only, ``%W~``); the data,
  scripting and transaction commands, ``WAIT`` and ``TIME``; nothing of ``@dangerous`` or
  ``@admin``, no ``SCRIPT FLUSH``/``KILL``, no ``FUNCTION``; and the workers' liveness channels
  (``&<spider>:alive:*`` and those of a sharded crawl's other shards: ``SUBSCRIBE`` and
  ``SSUBSCRIBE`` to them, ``PUBSUB NUMSUB``/``SHARDNUMSUB`` from the frontier's scripts), no
  other channel. It cannot read the account pool's
  keys, create a job (the job counter), touch the schedules, the scheduler's lock or the alerts'
  state. All workers share this one user, so it cannot tell one agent's record or command list
  from another's.
* ``proxypool``: its sorted set and counters (``~proxypool:*``), the same commands.
* ``accountpool``: ``~accounts:*``, ``~credentials:*`` and ``~accountpool:*``, the same commands.
* ``dashboard``: reads the spiders' keys (``%R~<spider>:*``) and the jobs, agents and schedules
  (:data:`DASHBOARD_READS`) with read commands only, plus ``INFO`` (the hub-near-maxmemory
  alert); the keys it writes are its own queue-depth series ``<spider>:ops:queue``
  (``RPUSH``/``LTRIM``/``PEXPIRE`` from its sampler script) and the alerts' state
  ``crawlfleet:alerts:state`` (``SET``). It cannot change a frontier, job, pool or account key.
* ``operator``: every key, every command but ``@dangerous`` (``INFO`` allowed): seed, pause,
  purge, requeue, export, status, ``crawlfleet job``/``schedule``, the hub's ``crawlfleet
  agent --schedules`` (it creates jobs and commands every agent) and the dashboard's operators'
  writes (``DASHBOARD_OPERATOR_REDIS_URL``; its reads stay the ``dashboard`` user's).

With Sentinel failover (three hubs) the hub's own two users join them, both with the hub's
internal password (``redis_password``), which no service holds:

* ``replica``: what a replica runs on its primary (``PSYNC``, ``REPLCONF``, ``PING``; the
  servers' ``masteruser``).
* ``sentinel``: what a Sentinel runs on the servers it watches and promotes (Redis's list:
  ``INFO``, ``ROLE``, ``SLAVEOF``/``REPLICAOF``, ``CONFIG REWRITE``, ``CLIENT KILL``, its hello
  channel …; the Sentinels' ``auth-user``).

On a Redis Cluster (``--cluster``, the hosts of the inventory's ``redis_cluster`` group) the
crawler's keys are the tagged ones (``~{<spider>}:*``, :class:`SpiderKeys` ``tagged``) and it may
also ask where the slots are (:data:`CLUSTER_DISCOVERY`: ``CLUSTER SLOTS``/``SHARDS``/``INFO``,
what redis-py's ``RedisCluster`` and ``crawlfleet check`` run), and the hub's own users are:

* ``replica``: as above, for a replica of a primary's slots.
* ``cluster``: what ``redis-cli --cluster create``/``check`` and Ansible run on the nodes
  (``CLUSTER`` and its subcommands, ``INFO``, ``PING``), with the hub's internal password. The
  cluster bus between the nodes has no users at all (Redis authenticates nothing there): only
  the firewall keeps it to the cluster's hosts.

The Sentinels have an ACL file of their own (:func:`render_sentinel`): ``default`` is the
Sentinels' administrator (they log in to one another with it, and Ansible with it), and each
role's user, with the same password as on the servers, may only find the primary
(:data:`SENTINEL_DISCOVERY`): it cannot start a failover, remove or reconfigure the set.

Passwords are stored as ``#<sha256>``; the clear text never reaches the file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import SpiderKeys, alive_globs, shards_glob

ROLES = ("crawler", "proxypool", "accountpool", "dashboard", "operator")
# The hub's own users with Sentinel failover: replication and the Sentinels.
HUB_ROLES = ("replica", "sentinel", "cluster")
CHECK_KEYS = "crawlfleet:check:*"
PROXYPOOL_KEYS = ("proxypool:*",)
ACCOUNTPOOL_KEYS = ("accounts:*", "credentials:*", "accountpool:*")
_JOBS = JobKeys()
# What a worker's agent reads and writes: its registration, its commands (BLPOP), the job records
# it updates, finalizes and trims, and the two job indexes; the acks it only writes.
AGENT_KEYS = (
    _JOBS.agents,
    _JOBS.agent("*"),  # also matches crawlfleet:agent:<name>:commands
    _JOBS.job("*"),  # also matches crawlfleet:job:<id>:history
    _JOBS.jobs,
    _JOBS.jobs_active,
)
AGENT_WRITES = (_JOBS.ack("*"),)
# What the dashboard's jobs page and alerts read of the fleet's keys.
DASHBOARD_READS = (
    _JOBS.job("*"),
    _JOBS.jobs,
    _JOBS.jobs_active,
    _JOBS.agents,
    _JOBS.agent("*"),
    _JOBS.schedules,
)
# A spider or user name that goes into an ACL line verbatim (no spaces, no glob characters).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

# What a service that owns its keys may run: its data types, scripts, MULTI, WAIT, TIME.
_DATA_COMMANDS = (
    "-@all",
    "+@read",
    "+@write",
    "+@scripting",
    "+@transaction",
    "+@connection",
    "+time",
    "-@dangerous",
    "-@admin",
    "-script|flush",
    "-script|kill",
    "-function",
)
# The workers' liveness subscriptions (crawlfleet.frontier.liveness): subscribing to their own
# channels (sharded on a cluster) and counting a channel's subscribers from the frontier's scripts.
_LIVENESS_COMMANDS = (
    "+subscribe",
    "+unsubscribe",
    "+ssubscribe",
    "+sunsubscribe",
    "+pubsub|numsub",
    "+pubsub|shardnumsub",
)
_DASHBOARD_COMMANDS = (
    "-@all",
    "+@read",
    "+@connection",
    "+time",
    "+evalsha",
    "+eval",
    "+script|load",
    "+script|exists",
    "+rpush",
    "+ltrim",
    "+pexpire",
    "+set",
    "-@dangerous",
    "+info",  # INFO is in @dangerous: allowed after it
)
_OPERATOR_COMMANDS = ("+@all", "-@dangerous", "+info")
# Redis's own lists (docs: "Replication" and "Sentinel and Redis authentication").
_REPLICA_COMMANDS = ("-@all", "+psync", "+replconf", "+ping")
_SENTINEL_COMMANDS = (
    "-@all",
    "+multi",
    "+exec",
    "+slaveof",
    "+replicaof",
    "+ping",
    "+info",
    "+role",
    "+config|rewrite",
    "+client|setname",
    "+client|kill",
    "+script|kill",
    "+subscribe",
    "+publish",
)
SENTINEL_CHANNELS = "&__sentinel__:*"
# What a cluster client may ask a node about the cluster (where each slot is, whether it is ok)
# and the redirections it follows; nothing that changes the cluster.
CLUSTER_DISCOVERY = (
    "+cluster|slots",
    "+cluster|shards",
    "+cluster|nodes",
    "+cluster|info",
    "+cluster|keyslot",
    "+asking",
    "+readonly",
    "+readwrite",
)
# Who creates and checks the cluster (redis-cli --cluster, Ansible): the CLUSTER command, INFO.
_CLUSTER_COMMANDS = ("-@all", "+cluster", "+info", "+ping", "+config|get", "+client|setname")
# What a service may ask a Sentinel: who the primary and the replicas are, nothing that changes
# the set (redis-py's discovery and ``crawlfleet check``).
SENTINEL_DISCOVERY = (
    "-@all",
    "+auth",
    "+hello",
    "+ping",
    "+client|setname",
    "+client|getname",
    "+sentinel|get-master-addr-by-name",
    "+sentinel|master",
    "+sentinel|masters",
    "+sentinel|replicas",
    "+sentinel|slaves",
    "+sentinel|sentinels",
)


class AclError(ValueError):
    """A role, spider name or password the ACL cannot be rendered with (one line naming it)."""


@dataclass(frozen=True)
class RoleRules:
    """What one role's Redis user may touch: key patterns and command rules, in ACL syntax."""

    role: str
    keys: tuple[str, ...]
    commands: tuple[str, ...]

    def line(self, user: str, password: str) -> str:
        """The ``aclfile`` line of ``user`` with this role's rules and ``password`` hashed."""
        digest = hashlib.sha256(password.encode()).hexdigest()
        return " ".join(
            ("user", user, "reset", "on", f"#{digest}", "resetchannels", *self.keys, *self.commands)
        )


def check_name(text: str, what: str) -> str:
    """``text`` if it can stand in an ACL line as a name; :class:`AclError` otherwise."""
    if not _NAME.fullmatch(text):
        raise AclError(
            f"{what} {text[:40]!r} must be 1-100 letters, digits, '.', '_' or '-' "
            "(it becomes part of a Redis ACL rule)"
        )
    return text


def role_rules(role: str, spiders: Sequence[str], cluster: bool = False) -> RoleRules:
    """The rules of ``role`` for a hub crawling ``spiders`` (``cluster``: a Redis Cluster's
    nodes)."""
    names = [check_name(s, "spider name") for s in spiders]
    own = tuple(f"~{SpiderKeys(s).prefix}:*" for s in names)
    # the keys of a sharded crawl's shards 1, 2, … (SCHEDULER_SHARDS)
    shards = tuple(f"~{shards_glob(s, cluster)}" for s in names)
    if role == "crawler":
        if not names:
            raise AclError("the crawler user needs at least one spider (--spider)")
        agent = (*(f"~{k}" for k in AGENT_KEYS), *(f"%W~{k}" for k in AGENT_WRITES))
        commands = _DATA_COMMANDS + _LIVENESS_COMMANDS
        # the workers' liveness channels, of the home shard and of shards 1, 2, …
        alive = tuple(f"&{glob}" for s in names for glob in alive_globs(s, cluster))
        if cluster:
            tagged = tuple(f"~{SpiderKeys(s, tagged=True).prefix}:*" for s in names)
            keys = (*tagged, f"~{CHECK_KEYS}", *agent, *shards, *alive)
            return RoleRules(role, keys, commands + CLUSTER_DISCOVERY)
        return RoleRules(role, (*own, f"~{CHECK_KEYS}", *agent, *shards, *alive), commands)
    if role == "proxypool":
        return RoleRules(role, tuple(f"~{k}" for k in PROXYPOOL_KEYS), _DATA_COMMANDS)
    if role == "accountpool":
        return RoleRules(role, tuple(f"~{k}" for k in ACCOUNTPOOL_KEYS), _DATA_COMMANDS)
    if role == "dashboard":
        reads = tuple(f"%R~{SpiderKeys(s).prefix}:*" for s in names)
        reads += tuple(f"%R~{k}" for k in DASHBOARD_READS)
        reads += tuple(f"%R{rule}" for rule in shards)
        series = tuple(f"~{SpiderKeys(s).ops_queue}" for s in names)
        state = (f"~{_JOBS.alerts_state}", f"~{_JOBS.alerts_notified}")
        return RoleRules(role, (*reads, *series, *state), _DASHBOARD_COMMANDS)
    if role == "operator":
        return RoleRules(role, ("~*",), _OPERATOR_COMMANDS)
    if role == "replica":
        return RoleRules(role, (), _REPLICA_COMMANDS)
    if role == "sentinel":
        return RoleRules(role, (SENTINEL_CHANNELS,), _SENTINEL_COMMANDS)
    if role == "cluster":
        return RoleRules(role, (), _CLUSTER_COMMANDS)
    raise AclError(f"unknown role {role[:40]!r}: the roles are {', '.join(ROLES + HUB_ROLES)}")


def _check_passwords(passwords: Mapping[str, str], names: Mapping[str, str]) -> None:
    for role in [*passwords, *names]:
        if role not in ROLES + HUB_ROLES:
            known = ", ".join(ROLES + HUB_ROLES)
            raise AclError(f"unknown role {role[:40]!r}: the roles are {known}")
    for role, password in passwords.items():
        if len(password) < 16:
            raise AclError(f"the {role} user's password must be at least 16 characters")


def _users(passwords: Mapping[str, str], names: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(role, user, password) of every role in ``passwords``, in a fixed order."""
    _check_passwords(passwords, names)
    seen: set[str] = {"default"}
    found = []
    for role in ROLES + HUB_ROLES:
        if role not in passwords:
            continue
        user = check_name(names.get(role, role), f"the {role} user's name")
        if user in seen:
            raise AclError(f"the {role} user's name {user!r} is taken by another user")
        seen.add(user)
        found.append((role, user, passwords[role]))
    return found


def render(
    passwords: Mapping[str, str],
    spiders: Iterable[str],
    users: Mapping[str, str] | None = None,
    cluster: bool = False,
) -> str:
    """The servers' ``aclfile`` text: ``default`` off, then one user per role in ``passwords``.

    ``passwords`` maps a role (of :data:`ROLES` and :data:`HUB_ROLES`) to its password (a role
    without one gets no user); ``users`` renames a role's user (default: the role's name);
    ``cluster``: the file of a Redis Cluster's nodes.
    """
    spider_list = list(dict.fromkeys(spiders))
    lines = ["user default reset off resetchannels -@all"]
    for role, user, password in _users(passwords, users or {}):
        lines.append(role_rules(role, spider_list, cluster).line(user, password))
    return "\n".join(lines) + "\n"


def render_sentinel(
    admin_password: str,
    passwords: Mapping[str, str],
    users: Mapping[str, str] | None = None,
) -> str:
    """The Sentinels' ``aclfile`` text: ``default`` with every right and ``admin_password``
    (the Sentinels log in to one another with it), then each service role's user of
    ``passwords`` allowed only :data:`SENTINEL_DISCOVERY`. The hub's own roles get none."""
    if len(admin_password) < 16:
        raise AclError("the Sentinels' password must be at least 16 characters")
    service = {role: pw for role, pw in passwords.items() if role not in HUB_ROLES}
    admin = RoleRules("default", ("~*", "&*"), ("+@all",))
    lines = [admin.line("default", admin_password)]
    for role, user, password in _users(service, users or {}):
        lines.append(RoleRules(role, (), SENTINEL_DISCOVERY).line(user, password))
    return "\n".join(lines) + "\n"
