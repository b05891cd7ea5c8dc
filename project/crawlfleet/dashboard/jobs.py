"""The dashboard's jobs pages and controls: list, detail, logs, and the operators' writes.

``GET /jobs`` is one static page (``jobs.html``: inline CSS and JS, like the status page) that
reads ``/api/jobs`` (jobs with their numbers, schedules, what the agents registered),
``/api/jobs/<id>`` (one record, its history of operations) and ``/api/jobs/<id>/logs`` (the last
lines of each worker's crawler unit, asked of the agents: ``control.unit_logs``). Reading wants
what the status page wants (the API key, when one is set).

Writes (start, stop, pause, resume, seed, schedules) go through the same functions as the CLI
(``jobs.control``, ``jobs.schedules``, ``jobs.seeding``) and want, in this order:

1. the read credential (the API key), as every page;
2. an operator session: ``POST /api/session`` with a name and the operator password
   (``--operator-password-file`` / ``DASHBOARD_OPERATOR_PASSWORD``) sets the cookie
   ``crawlfleet_operator`` (``HttpOnly``, ``SameSite=Strict``, ``Secure`` over HTTPS; 8 hours);
   the API key alone stays read-only;
3. an ``Origin`` (or, without one, a ``Referer``) naming this dashboard;
4. the header ``X-CSRF-Token`` with the session's token (an HMAC of the session id under a key of
   this process, handed out by ``GET /api/session``).

Bodies are JSON (a cross-site page cannot send that without a preflight this server never
grants). Each write is logged (``event=write``) and recorded in the job's history with the
operator's name (``<name>@dashboard``). Every refusal is one line, ``{"error": …}``, and changes
nothing. Sessions live in this process: a restart logs the operators out.

Two Redis clients: every read goes through REDIS_URL (under the Redis ACL the read-only
``dashboard`` user); the writes, and the log lines a logged-in operator asks the agents for (a
command to them), through ``--operator-redis-url`` / ``DASHBOARD_OPERATOR_REDIS_URL`` when it is
set (the ``operator`` user), else through REDIS_URL as well. A write Redis refuses (an ACL user
without the right) answers 403 with one line naming the user, and the setting that fixes it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from crawlfleet.dashboard.config import Settings
from crawlfleet.dashboard.core import (
    REDIS_ERRORS,
    Dashboard,
    html_headers,
    refused,
)
from crawlfleet.hub.connect import get_redis, permission_problem
from crawlfleet.hub.errors import BadSpiderName
from crawlfleet.hub.keys import SpiderKeys, check_spider_name
from crawlfleet.hub.urls import mask_url
from crawlfleet.jobs import control, schedules, seeding, store
from crawlfleet.jobs.store import JobError
from crawlfleet.jobs.timespec import TimeSpecError
from crawlfleet.service.http import BadJson, parse_json
from crawlfleet.service.logs import event

log = logging.getLogger("crawlfleet.dashboard")

COOKIE = "crawlfleet_operator"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL = 8 * 3600.0
MAX_SESSIONS = 1000
LOGIN_FAILURES = 10  # failed logins per LOGIN_WINDOW seconds before logins are refused
LOGIN_WINDOW = 60.0
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
JOB_LIMIT = 100
# Starting waits for every agent's answer, stopping for the drain: longer than a page read.
WRITE_TIMEOUT = control.DEFAULT_TIMEOUT
CONTROL_PARAMS = {"socket_timeout": WRITE_TIMEOUT + 15, "socket_connect_timeout": 5}
OPERATOR_URL = "DASHBOARD_OPERATOR_REDIS_URL"
# NOPERM outside a script; inside one, Redis says the script's user "can't access" a key.
ACL_REFUSAL = re.compile(r"(?i)no permissions|can't access|NOPERM")


def write_url(settings: Settings) -> tuple[str, str]:
    """(URL, setting naming it) of the operators' writes: the operator URL, else REDIS_URL."""
    if settings.operator_redis_url:
        return settings.operator_redis_url, OPERATOR_URL
    return settings.redis_url, "REDIS_URL"


def write_client(settings: Settings) -> redis.Redis:
    """The process's client of the operators' writes (``write_url``), with their timeouts."""
    return get_redis(write_url(settings)[0], **CONTROL_PARAMS)


def acl_refusal(exc: redis.ResponseError) -> bool:
    """True when Redis refused a command because of the ACL user's rights."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or bool(ACL_REFUSAL.search(str(exc)))


def refused_write(exc: redis.ResponseError, url: str, setting: str) -> str:
    """One line for a write the Redis user of ``url`` (named by ``setting``) may not do."""
    said = " ".join(permission_problem(exc, url, setting=setting).split())
    if setting == OPERATOR_URL:
        fix = f"give {OPERATOR_URL} a Redis user that may write (the `operator` ACL user)"
    else:
        fix = (
            f"the dashboard's writes need a Redis user that may write: set {OPERATOR_URL} "
            "(--operator-redis-url) to the `operator` ACL user's URL"
        )
    return f"{said}; {fix}"


class Refused(Exception):
    """A request refused with ``status`` and one line (nothing was changed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Sessions:
    """The operators' sessions of this process: id → (name, expiry), and the CSRF key."""

    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    found: dict[str, tuple[str, float]] = field(default_factory=dict)
    failures: list[float] = field(default_factory=list)

    def create(self, user: str) -> str:
        now = time.monotonic()
        for sid, (_, expires) in list(self.found.items()):
            if expires <= now:
                del self.found[sid]
        while len(self.found) >= MAX_SESSIONS:
            del self.found[next(iter(self.found))]
        sid = secrets.token_urlsafe(32)
        self.found[sid] = (user, now + SESSION_TTL)
        return sid

    def user(self, sid: str | None) -> str | None:
        entry = self.found.get(sid or "")
        if entry is None or entry[1] <= time.monotonic():
            return None
        return entry[0]

    def csrf(self, sid: str) -> str:
        return hmac.new(self.key, sid.encode(), hashlib.sha256).hexdigest()

    def drop(self, sid: str | None) -> None:
        self.found.pop(sid or "", None)

    def login_allowed(self) -> bool:
        now = time.monotonic()
        self.failures = [t for t in self.failures if now - t < LOGIN_WINDOW]
        return len(self.failures) < LOGIN_FAILURES


def page_html(refresh: float) -> str:
    text = resources.files("crawlfleet.dashboard").joinpath("jobs.html").read_text("utf-8")
    return text.replace("{{REFRESH_MS}}", str(int(refresh * 1000)))


def _lines(value: Any, what: str) -> list[str]:
    """A textarea's non-empty lines (or a JSON list of strings)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise Refused(400, f"{what} must be text, one entry a line")


def _pairs(value: Any, flag: str, what: str) -> list[tuple[str, str]]:
    out = []
    for n, line in enumerate(_lines(value, what), 1):
        try:
            out.append(control.name_value(flag, line))
        except JobError as exc:
            raise Refused(400, f"{what} line {n}: {exc}") from None
    return out


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str) or not value.strip():
        raise Refused(400, f"{name} is required")
    return value.strip()


def _spider(body: dict[str, Any]) -> str:
    name = _text(body, "spider")
    try:
        return check_spider_name(name)
    except BadSpiderName as exc:
        raise Refused(400, str(exc)) from None


def _workers(body: dict[str, Any]) -> int | None:
    raw = body.get("workers", "all")
    try:
        return control.workers_count(str(raw if raw not in (None, "") else "all"))
    except JobError as exc:
        raise Refused(400, f"workers {exc}") from None


def job_spec(body: dict[str, Any]) -> control.JobSpec:
    """The job a start or a schedule form asks for; :class:`Refused` for a malformed field."""
    return control.JobSpec(
        project=_text(body, "project"),
        spider=_spider(body),
        args=_pairs(body.get("args"), "-a", "args"),
        settings=_pairs(body.get("settings"), "-s", "settings"),
        workers=_workers(body),
        overlap=body.get("overlap") is True,
        fresh_dupefilter=body.get("fresh_dupefilter") is True,
    )


def registered(client: redis.Redis) -> dict[str, Any]:
    """What the agents registered: project → spider → agents having it (live first), and the
    agents with their liveness."""
    projects: dict[str, dict[str, list[str]]] = {}
    found = store.agents(client)
    for agent in sorted(found, key=lambda a: (not a.alive, a.name)):
        for spider, project in agent.spiders.items():
            projects.setdefault(project, {}).setdefault(spider, []).append(agent.name)
    return {
        "projects": {p: dict(sorted(s.items())) for p, s in sorted(projects.items())},
        "agents": [
            {"name": a.name, "host": a.host, "runner": a.runner, "alive": a.alive} for a in found
        ],
    }


def with_live_numbers(client: redis.Redis, job: dict[str, Any], hosts: dict[str, str]) -> None:
    """A job that runs gets ``stats`` read now from its crawl (``live``: true), the numbers
    its record keeps once it ends."""
    if job.get("state") not in ("running", "paused", "stopping"):
        return
    pids = {w: job["hosts"].get(w, {}).get("pids", []) for w in job.get("workers") or []}
    numbers = store.crawl_numbers(client, job["spider"], pids, hosts)
    started = int(job.get("started") or job.get("created") or 0)
    numbers["duration"] = round((store.now_ms(client) - started) / 1000.0, 1) if started else None
    job["stats"] = {**numbers, "live": True}


def overview(client: redis.Redis) -> dict[str, Any]:
    """``/api/jobs``: the newest jobs, the schedules and what the agents registered."""
    found = store.list_jobs(client, JOB_LIMIT)
    hosts = control.agent_hosts(client)
    for job in found:
        with_live_numbers(client, job, hosts)
    return {"jobs": found, "schedules": schedules.list_schedules(client), **registered(client)}


def detail(client: redis.Redis, job_id: str) -> dict[str, Any]:
    """``/api/jobs/<id>``: the record (live numbers while it runs) and its history."""
    job = store.get_job(client, job_id)
    with_live_numbers(client, job, control.agent_hosts(client))
    return {"job": job, "history": store.job_history(client, job_id)}


def seed_urls(client: redis.Redis, body: dict[str, Any], by: str) -> str:
    """Check every entry, then add them all (``jobs.seeding``) or none."""
    spider = _spider(body)
    known = {s for p in registered(client)["projects"].values() for s in p}
    if spider not in known and not client.exists(SpiderKeys.for_client(spider, client).frontier):
        listed = ", ".join(sorted(known)) or "none"
        raise Refused(400, f"unknown spider {spider!r} (known: {listed})")
    entries = []
    for n, line in enumerate(_lines(body.get("urls"), "urls"), 1):
        try:
            entries.append(seeding.check_entry(line))
        except ValueError as exc:
            raise Refused(400, f"urls line {n}: {exc}; nothing was added") from None
    if not entries:
        raise Refused(400, "urls: give at least one URL, one a line")
    return seeding.add_entries(client, spider, entries, by)


def add_schedule(client: redis.Redis, body: dict[str, Any], by: str) -> str:
    cron, every = body.get("cron") or None, body.get("every") or None
    if (cron is None) == (every is None) or not isinstance(cron or every, str):
        raise Refused(400, "give cron or every (one of them)")
    spec = job_spec(body)
    dupefilter = body.get("dupefilter", "fresh")
    if dupefilter not in ("fresh", "keep"):
        raise Refused(400, "dupefilter must be fresh or keep")
    try:
        when = schedules.when_fields(cron, every)
    except TimeSpecError as exc:
        raise Refused(400, str(exc)) from None
    record = schedules.create_schedule(client, when, spec, dupefilter, by)
    return (
        f"schedule {record['id']}: {spec.project}/{spec.spider} "
        f"{schedules.describe_when(record)}, {dupefilter} duplicate filter"
    )


def job_action(client: redis.Redis, job_id: str, action: str, by: str) -> control.Outcome:
    if action == "stop":
        return control.stop_job(client, job_id, by, WRITE_TIMEOUT)
    if action == "pause":
        return control.pause_job(client, job_id, by)
    if action == "resume":
        return control.resume_job(client, job_id, by)
    raise Refused(404, f"no job action {action!r} (stop, pause, resume)")


def schedule_action(client: redis.Redis, schedule_id: str, action: str, by: str) -> str:
    if action == "remove":
        return schedules.remove(client, schedule_id)
    if action in ("pause", "resume"):
        return schedules.pause_or_resume(client, schedule_id, action == "pause", by)
    raise Refused(404, f"no schedule action {action!r} (pause, resume, remove)")


def _same_origin(request: Request) -> bool:
    """``Origin`` (else ``Referer``) names the scheme and host this request came to."""
    sent = request.headers.get("origin") or request.headers.get("referer") or ""
    parts = urlsplit(sent)
    here = urlsplit(str(request.url))
    if not parts.scheme or not parts.netloc:
        return False
    ports = {"http": 80, "https": 443}
    mine = (here.scheme, here.hostname, here.port or ports.get(here.scheme))
    theirs = (parts.scheme, parts.hostname, parts.port or ports.get(parts.scheme))
    return mine == theirs


Handler = Callable[[Request], Awaitable[Response]]


Write = Callable[[str, dict[str, Any], Request], Any]


class JobsPages:
    """The jobs pages and API of one dashboard (see the module docstring): the handlers, the
    operators' sessions and the two Redis clients they use."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash
        self.settings = settings = dash.settings
        self.sessions = Sessions()
        self.control_url, self.control_setting = write_url(settings)
        self.control_client = write_client(settings)
        # the log lines of a reader who is no operator, when the writes have their own URL
        self.reader_control = get_redis(settings.redis_url, **CONTROL_PARAMS)
        self.html = page_html(settings.refresh)
        # same-origin: the writes' Origin/Referer check needs the browser to send a Referer
        self.page_headers = html_headers(self.html, "same-origin")

    def readable(self, handler: Handler) -> Handler:
        async def check(request: Request) -> Response:
            if (denied := refused(request, self.settings.api_key)) is not None:
                return denied
            try:
                return await handler(request)
            except Refused as exc:
                return JSONResponse({"error": str(exc)}, exc.status)
            except JobError as exc:
                return JSONResponse({"error": str(exc)}, 400)
            except REDIS_ERRORS as exc:
                return JSONResponse(
                    {"error": f"Redis unreachable at {self.dash.where}: {exc}"}, 503
                )
            except redis.ResponseError as exc:
                if not acl_refusal(exc):
                    raise
                said = " ".join(permission_problem(exc, self.settings.redis_url).split())
                return JSONResponse({"error": said}, 403)

        return check

    async def controlling(self, work: Callable[[], Any], url: str, setting: str) -> Any:
        """``work`` (in a thread) through the write client of ``url``: its refusals and outages
        are one line naming ``setting``."""
        try:
            return await run_in_threadpool(work)
        except REDIS_ERRORS as exc:
            raise Refused(503, f"Redis unreachable at {mask_url(url)} ({setting}): {exc}") from None
        except redis.ResponseError as exc:
            if not acl_refusal(exc):
                raise
            raise Refused(403, refused_write(exc, url, setting)) from None

    def operator(self, request: Request) -> tuple[str, str]:
        """(name, session id) of the operator, or :class:`Refused`."""
        if not self.settings.operator_password:
            raise Refused(
                403,
                "writes are disabled: this dashboard has no operator password "
                "(DASHBOARD_OPERATOR_PASSWORD or --operator-password-file)",
            )
        sid = request.cookies.get(COOKIE)
        user = self.sessions.user(sid)
        if user is None or sid is None:
            raise Refused(
                403,
                "writes need an operator: log in with the operator password (the API key is "
                "read-only)",
            )
        return user, sid

    def check_origin(self, request: Request) -> None:
        if not _same_origin(request):
            raise Refused(403, "cross-site request refused: Origin or Referer must be this page")

    async def json_body(self, request: Request) -> dict[str, Any]:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise Refused(415, "send the body as application/json")
        try:
            body = parse_json(await request.body())
        except BadJson as exc:
            raise Refused(400, str(exc)) from None
        if not isinstance(body, dict):
            raise Refused(400, "body must be a JSON object")
        return body

    def writes(self, work: Write) -> Handler:
        async def handler(request: Request) -> Response:
            user, sid = self.operator(request)
            self.check_origin(request)
            token = request.headers.get(CSRF_HEADER, "")
            if not hmac.compare_digest(token.encode(), self.sessions.csrf(sid).encode()):
                raise Refused(403, "missing or invalid CSRF token (reload the page)")
            body = await self.json_body(request)
            by = f"{user}@dashboard"
            action = f"{request.method} {request.url.path}"
            try:
                result = await self.controlling(
                    lambda: work(by, body, request), self.control_url, self.control_setting
                )
            except (Refused, JobError) as exc:
                event(log, "write_refused", logging.INFO, by=by, action=action, error=str(exc))
                raise
            message = result.message if isinstance(result, control.Outcome) else str(result)
            failed = isinstance(result, control.Outcome) and result.failed
            event(log, "write", by=by, action=action, result=message)
            answer: dict[str, Any] = {"ok": not failed, "message": message}
            if isinstance(result, control.Outcome):
                answer["job"] = result.job
            if failed:
                answer["error"] = message
            return JSONResponse(answer, 409 if failed else 200)

        return self.readable(handler)

    async def page(self, request: Request) -> Response:
        return HTMLResponse(self.html, headers=self.page_headers)

    async def api_jobs(self, request: Request) -> Response:
        view = await run_in_threadpool(overview, self.dash.client)
        return JSONResponse(view, headers={"Cache-Control": "no-store"})

    async def api_job(self, request: Request) -> Response:
        view = await run_in_threadpool(detail, self.dash.client, request.path_params["id"])
        return JSONResponse(view, headers={"Cache-Control": "no-store"})

    async def api_logs(self, request: Request) -> Response:
        raw = request.query_params.get("lines", str(control.LOG_LINES))
        if not raw.isdigit() or not 1 <= int(raw) <= control.MAX_LOG_LINES:
            raise Refused(400, f"lines must be a number from 1 to {control.MAX_LOG_LINES}")
        job_id, lines = request.path_params["id"], int(raw)
        # Asking the agents is a command: an operator's, through the writes' user.
        if self.sessions.user(request.cookies.get(COOKIE)) or not self.settings.operator_redis_url:
            found = await self.controlling(
                lambda: control.unit_logs(self.control_client, job_id, lines),
                self.control_url,
                self.control_setting,
            )
        else:
            try:
                found = await run_in_threadpool(
                    control.unit_logs, self.reader_control, job_id, lines
                )
            except redis.ResponseError as exc:
                if not acl_refusal(exc):
                    raise
                said = " ".join(permission_problem(exc, self.settings.redis_url).split())
                raise Refused(
                    403, f"log lines are a command to the agents: log in as an operator ({said})"
                ) from None
        return JSONResponse({"workers": found}, headers={"Cache-Control": "no-store"})

    async def session(self, request: Request) -> Response:
        sid = request.cookies.get(COOKIE)
        user = self.sessions.user(sid)
        if request.method == "GET":
            return JSONResponse(
                {
                    "operator": user,
                    "csrf": self.sessions.csrf(sid) if user and sid else None,
                    "writable": bool(self.settings.operator_password),
                },
                headers={"Cache-Control": "no-store"},
            )
        if request.method == "DELETE":
            self.operator(request)
            self.check_origin(request)
            self.sessions.drop(sid)
            answer = JSONResponse({"ok": True, "message": f"{user} logged out"})
            answer.delete_cookie(COOKIE, path="/")
            return answer
        self.check_origin(request)  # no login from another site's page either
        body = await self.json_body(request)
        if not self.settings.operator_password:
            self.operator(request)  # refused: writes are disabled
        name, password = body.get("user"), body.get("password")
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            raise Refused(400, "user: 1 to 64 letters, digits, '.', '_' or '-'")
        if not self.sessions.login_allowed():
            raise Refused(429, f"too many failed logins: wait {LOGIN_WINDOW:g} s")
        if not isinstance(password, str) or not hmac.compare_digest(
            password.encode(), self.settings.operator_password.encode()
        ):
            self.sessions.failures.append(time.monotonic())
            event(log, "login_refused", logging.WARNING, user=name)
            raise Refused(403, "wrong operator password")
        new = self.sessions.create(name)
        event(log, "login", user=name)
        answer = JSONResponse({"ok": True, "operator": name, "csrf": self.sessions.csrf(new)})
        answer.set_cookie(
            COOKIE,
            new,
            max_age=int(SESSION_TTL),
            path="/",
            httponly=True,
            samesite="strict",
            secure=bool(self.settings.tls_cert),
        )
        return answer

    def start(self, by: str, body: dict[str, Any], request: Request) -> control.Outcome:
        return control.start_job(self.control_client, job_spec(body), by, WRITE_TIMEOUT)

    def act(self, by: str, body: dict[str, Any], request: Request) -> control.Outcome:
        params = request.path_params
        return job_action(self.control_client, params["id"], params["action"], by)

    def seed_write(self, by: str, body: dict[str, Any], request: Request) -> str:
        return seed_urls(self.control_client, body, by)

    def schedule_add(self, by: str, body: dict[str, Any], request: Request) -> str:
        return add_schedule(self.control_client, body, by)

    def schedule_act(self, by: str, body: dict[str, Any], request: Request) -> str:
        params = request.path_params
        return schedule_action(self.control_client, params["id"], params["action"], by)

    def routes(self) -> list[Route]:
        """Every route of the jobs pages and API."""
        return [
            Route("/jobs", self.readable(self.page)),
            Route("/api/jobs", self.readable(self.api_jobs)),
            Route("/api/jobs", self.writes(self.start), methods=["POST"]),
            Route("/api/jobs/{id}", self.readable(self.api_job)),
            Route("/api/jobs/{id}/logs", self.readable(self.api_logs)),
            Route("/api/jobs/{id}/{action}", self.writes(self.act), methods=["POST"]),
            Route("/api/session", self.readable(self.session), methods=["GET", "POST", "DELETE"]),
            Route("/api/seed", self.writes(self.seed_write), methods=["POST"]),
            Route("/api/schedules", self.writes(self.schedule_add), methods=["POST"]),
            Route("/api/schedules/{id}/{action}", self.writes(self.schedule_act), methods=["POST"]),
        ]


def install(app: Starlette, dash: Dashboard) -> None:
    """Add the jobs pages and API to the dashboard's ``app`` (see the module docstring)."""
    pages = JobsPages(dash)
    app.router.routes.extend(pages.routes())
    app.state.sessions = pages.sessions
