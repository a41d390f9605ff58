"""The operator's console: a Starlette app over an AsyncClient (`sched web`, or mount
`create_app(...)` in a service of your own). Pages are server-rendered (Jinja2) from what
Redis says when they are viewed; htmx refreshes the overview's health panel, and a vendored
uPlot draws its charts (no CDN) from the samples series.py takes.

Actions are POST forms (cancel, replay, purge, delete a schedule, trigger now), on one item
or on a selection of checkboxes; each answers with a redirect back to the page it came from,
which says what it did (a result code and its counts: results.py), or with a page saying why
it could not. A form is a small URL-encoded body: `read_form` reads at most `FORM_BYTES` of
it (middleware.py refuses a larger Content-Length, or another Content-Type, before any of it
is read). guard.py says who may do what.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.datastructures import FormData, UploadFile
from starlette.requests import ClientDisconnect, Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

import scheduler.web.guard as guard
import scheduler.web.pages as pages
import scheduler.web.results as results
from scheduler.core.errors import (
    JobNotFound,
    RedisFailure,
    SchedulerError,
    SlotNotFound,
    StoreUnavailable,
    ValidationError,
)
from scheduler.web.guard import Admission
from scheduler.web.middleware import FORM_BYTES, FORM_FIELDS, SecurityMiddleware
from scheduler.web.series import Sampler

log = logging.getLogger("scheduler.web")
HERE = resources.files("scheduler.web")
NAV = [("/", "Overview"), ("/queues", "Queues"), ("/running", "Running"),
       ("/scheduled", "Scheduled"), ("/jobs", "Jobs"), ("/recent", "Recent"),
       ("/schedules", "Schedules"), ("/tasks", "Tasks"), ("/workers", "Workers"),
       ("/dead-letters", "Dead letters"), ("/history", "History"), ("/verify", "Verify")]


def create_app(client: Any, *, token: str | None = None, read_only: bool = False,
               sample_s: float = 5.0, behind_proxy: bool = False,
               allow_hosts: Iterable[str] = (), session_s: float | None = None,
               secret: bytes | None = None) -> ASGIApp:
    """`client`: an AsyncClient of the namespace (with `history=` for the History page).
    `token`: required on every request when given; without one only loopback Host names (and
    `allow_hosts`) are served. `read_only`: refuse every action. `behind_proxy`: trust the
    proxy's X-Forwarded-Proto and X-Forwarded-For. `session_s`: how long a sign-in lasts
    (guard.SESSION_S unless given).
    `secret`: the key of the CSRF fields (random per process unless given: consoles behind
    one load balancer share one)."""
    gate = guard.Gate(token, secret, session_s or guard.SESSION_S)
    return SecurityMiddleware(Console(client, gate, read_only, sample_s).app,
                              loopback_only=not gate.needs_token, allow_hosts=allow_hosts,
                              behind_proxy=behind_proxy)


View = Callable[[Request], Awaitable[pages.Page]]


class Console:
    def __init__(self, client: Any, gate: guard.Gate, read_only: bool,
                 sample_s: float) -> None:
        self.client = client
        self.gate = gate
        self.read_only = read_only
        self.env = Environment(loader=FileSystemLoader(str(HERE / "templates")),
                               autoescape=select_autoescape(["html"]))
        self.env.filters["code"] = code
        self.sampler = Sampler(client, every_s=sample_s)
        self.views: dict[str, View] = {
            "/": self.overview,
            "/queues": self.queues,
            "/running": lambda r: pages.slot_list(client, "running", None, r.query_params),
            "/scheduled": lambda r: pages.slot_list(client, "scheduled", None, r.query_params),
            "/retrying": lambda r: pages.slot_list(client, "retrying", None, r.query_params),
            "/jobs": lambda r: pages.jobs(client, r.query_params),
            "/recent": lambda r: pages.recent(client, r.query_params),
            "/schedules": lambda r: pages.schedules(client, r.query_params),
            "/workers": self.workers,
            "/tasks": lambda r: pages.tasks(client),
            "/dead-letters": lambda r: pages.dead_letters(client, r.query_params),
            "/history": lambda r: pages.history(client, r.query_params),
            "/verify": lambda r: pages.verify_runs(client),
            "/jobs/{job_id}": lambda r: pages.job(client, r.path_params["job_id"]),
            "/slots/{slot_id}": lambda r: pages.slot(client, r.path_params["slot_id"]),
            "/queues/{queue}": lambda r: pages.slot_list(
                client, "queued", r.path_params["queue"], r.query_params),
            "/queues/{queue}/{list}": self.queue_list,
        }
        g = self._guarded
        routes = [Route("/healthz", self.healthz), Route("/login", self.login,
                                                         methods=["GET", "POST"]),
                  Route("/api/series", g(self.series)), Route("/partials/health", g(self.health)),
                  Route("/actions/{name}", g(self.act), methods=["POST"]),
                  Route("/logout", g(self.logout), methods=["POST"]),
                  Route("/search", g(self.search)),
                  *(Route(path, g(self.page(view))) for path, view in self.views.items()),
                  Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
        self.app = Starlette(routes=routes, lifespan=self.lifespan)

    def render(self, request: Request, template: str, context: dict[str, Any],
               status_code: int = 200) -> HTMLResponse:
        session, new_session = self.gate.session(request)
        ctx = {"namespace": self.client.namespace, "nav": NAV, "active": request.url.path,
               "read_only": self.read_only, "csrf": self.gate.csrf(session),
               "sign_out": self.gate.needs_token and template != "login.html",
               "next": _here(request), "done": results.message(request.query_params),
               "failed": None, **context}
        response = HTMLResponse(self.env.get_template(template).render(**ctx), status_code)
        if new_session is not None:
            self.gate.set_session(request, response, new_session)
        return response

    def _guarded(self, endpoint: Callable[[Request], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            admission = self.gate.admit(request)
            if admission is Admission.IN:
                return await endpoint(request)
            if admission is Admission.LIMITED:
                return self.too_many(request)
            response: Response
            if request.method != "GET" or request.url.path.startswith(("/api/", "/partials/")):
                response = PlainTextResponse("a token is needed (Authorization: Bearer TOKEN)",
                                             401)
            else:
                response = self.render(request, "login.html", {"title": "Sign in",
                                                               "next": _here(request)}, 401)
            if admission is Admission.WRONG:  # a stale cookie: sent (and counted) once
                self.gate.sign_out(request, response)
            return response
        return guarded

    def too_many(self, request: Request) -> Response:
        wait = max(1, self.gate.retry_after(request))
        return PlainTextResponse(f"too many failed sign-ins from your address: try again in "
                                 f"{wait} s", 429, headers={"Retry-After": str(wait)})

    def page(self, view: View) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                template, context = await view(request)
            except SchedulerError as exc:
                return self.refusal(request, exc)
            return self.render(request, template, context)
        return endpoint

    def refusal(self, request: Request, exc: SchedulerError,
                back: str | None = None) -> Response:
        """A page for what a view or an action refused: 400 for a value it does not allow
        (the message names the allowed ones), 404 for an id Redis does not know, 503 when
        Redis or the history store cannot answer, 409 for any other refusal; `back`: the
        page an action came from."""
        if isinstance(exc, ValidationError):
            title, status_code = "Bad request", 400
        elif isinstance(exc, JobNotFound | SlotNotFound):
            title, status_code = "Not found", 404
        elif isinstance(exc, RedisFailure | StoreUnavailable):
            title, status_code = "Unavailable", 503
        else:  # the state of what it names refuses it (a deleted job, a full queue)
            title, status_code = "Refused", 409
        return self.render(request, "table.html", {
            "title": title, "rows": [], "header": [], "note": str(exc),
            "links": [(back, "Back")] if back else []}, status_code)

    async def status(self) -> tuple[Any, list[Any]]:
        """What Redis says now: the status (one `status()`, as `sched status` reads it) and
        its queues with their limits."""
        now = await self.client.status()
        return now, await self.client.queues(now)

    async def overview(self, request: Request) -> pages.Page:
        return "overview.html", pages.health(*await self.status())

    async def queues(self, request: Request) -> pages.Page:
        return pages.queues(*await self.status())

    async def workers(self, request: Request) -> pages.Page:
        return pages.workers(await self.client.status())

    async def queue_list(self, request: Request) -> pages.Page:
        what = pages.choice(request.path_params, "list", pages.SLOT_LISTS) or "queued"
        return await pages.slot_list(self.client, what, request.path_params["queue"],
                                     request.query_params)

    async def health(self, request: Request) -> Response:
        try:
            context = pages.health(*await self.status())
        except RedisFailure as exc:
            return self.render(request, "health.html", {"failed": str(exc)}, 503)
        return self.render(request, "health.html", context)

    async def search(self, request: Request) -> Response:
        try:
            return RedirectResponse(await pages.find(self.client, request.query_params), 303)
        except (JobNotFound, SlotNotFound):
            return self.render(request, "table.html", {
                "title": "Not found", "rows": [], "header": [],
                "note": f"no such job or slot: {request.query_params.get('id', '')[:200]!r} "
                        f"is not in Redis (a finished one may be in History)"}, 404)
        except SchedulerError as exc:
            return self.refusal(request, exc)

    async def series(self, request: Request) -> Response:
        return JSONResponse(self.sampler.series())

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def act(self, request: Request) -> Response:
        if self.read_only:
            return PlainTextResponse("this console is read-only", 403)
        form = await read_form(request)
        if isinstance(form, Response):
            return form
        if not self.gate.csrf_ok(request, form):
            return _csrf_failed()
        back = guard.safe_next(_text(form.get("next")))
        name = request.path_params["name"]
        action = ACTIONS.get(name)
        if action is None:
            return PlainTextResponse("no such action", 404)
        targets = [str(v) for k, v in form.multi_items() if k in ("ids", "slots", "jobs")]
        try:
            code, counts = await action(self.client, targets)
        except SchedulerError as exc:
            # Bounded: the ids in a refusal's message are the request's own, of any length.
            log.warning("console action %s failed: %.300s", name, exc)
            return self.refusal(request, exc, back)
        log.info("console action %s: %s", name, counts)
        return RedirectResponse(f"{back.split('?', 1)[0]}?{results.query(code, **counts)}",
                                303)

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.render(request, "login.html", {
                "title": "Sign in", "next": guard.safe_next(request.query_params.get("next"))})
        form = await read_form(request)
        if isinstance(form, Response):
            return form
        back = guard.safe_next(_text(form.get("next")))
        admission = self.gate.sign_in(request, form.get("token"))
        if admission is Admission.LIMITED:
            return self.too_many(request)
        if admission is not Admission.IN:
            return self.render(request, "login.html", {"title": "Sign in", "next": back,
                                                       "failed": "wrong token"}, 401)
        response = RedirectResponse(back, 303)
        if self.gate.needs_token:
            self.gate.set_sign_in(request, response)
        return response

    async def logout(self, request: Request) -> Response:
        form = await read_form(request)
        if isinstance(form, Response):
            return form
        if not self.gate.csrf_ok(request, form):
            return _csrf_failed()
        response = RedirectResponse("/login", 303)
        self.gate.sign_out(request, response)
        return response

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(self.sampler.run())
        try:
            yield
        finally:
            self.sampler.stop()
            await task


def code(text: Any) -> Markup:
    """Text whose `backticked` parts are code (the SDK's messages name commands that way):
    escaped, with those parts in <code>."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick stays as it is
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return Markup("").join(Markup("<code>%s</code>") % part if i % 2 else escape(part)
                           for i, part in enumerate(parts))


def _here(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _csrf_failed() -> Response:
    return PlainTextResponse("this form did not come from the console (CSRF check failed): "
                             "reload the page and try again", 403)


async def read_form(request: Request) -> FormData | Response:
    """A POST's URL-encoded form, read to at most FORM_BYTES and FORM_FIELDS (413 past
    them: a chunked body names no length beforehand); the middleware has refused any other
    Content-Type and a larger Content-Length already."""
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > FORM_BYTES:
                return _too_large()
    except ClientDisconnect:
        return PlainTextResponse("the request's body did not arrive whole", 400)
    fields: list[tuple[str, str | UploadFile]]
    try:
        fields = list(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True,
                                encoding="utf-8", errors="replace", max_num_fields=FORM_FIELDS))
    except ValueError:
        return _too_large()
    return FormData(fields)


def _too_large() -> Response:
    return PlainTextResponse(f"refused: a console form is at most {FORM_BYTES:,} bytes and "
                             f"{FORM_FIELDS:,} fields; select fewer items", 413)


Counts = tuple[str, dict[str, int]]


async def _cancel(client: Any, ids: list[str]) -> Counts:
    said = list((await client.cancel(ids, "cancelled from the console")).values())
    return "cancel", {name: said.count(text) for name, text in results.CANCEL_COUNTS.items()}


async def _replay(client: Any, slots: list[str]) -> Counts:
    return "replay", {"replayed": await client.replay(slots), "of": len(slots)}


async def _purge(client: Any, slots: list[str]) -> Counts:
    return "purge", {"purged": await client.purge(slots), "of": len(slots)}


async def _delete(client: Any, jobs: list[str]) -> Counts:
    done = [await client.delete_job(j, "deleted from the console") for j in jobs]
    return "delete", {"deleted": sum(not d.before for d in done),
                      "cancelled": sum(d.cancelled for d in done)}


async def _trigger(client: Any, jobs: list[str]) -> Counts:
    slots = [await client.trigger(j) for j in jobs]
    return "trigger", {"triggered": len(slots)}


ACTIONS = {"cancel": _cancel, "replay": _replay, "purge": _purge, "delete": _delete,
           "trigger": _trigger}
