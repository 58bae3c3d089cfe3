"""The console's pages and actions: each a translation of one or a few API calls into HTML, nothing more.

Every number on a page is what the API answered for the page's request (the tests compare them); every action is
one API call (a bulk one: the API's own selection, or one call per operation it lists) and the API audits it.
Filters live in the URL, so a view can be shared; a page's live part (`#live`) is fetched again every few seconds.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import escape

from sitedispatch.client import ApiClient
from sitedispatch.console.server import PREVIEW_CSP, Request, Response
from sitedispatch.domain.errors import Forbidden, InvalidInput, NotFound, SiteDispatchError
from sitedispatch.domain.model import Kind, Status
from sitedispatch.publication.live import receipt_key

LIST_LIMIT = 50  # rows a list page shows at most (one API page: it links the next when there is more)
SITES = 50  # sites a page shows at most
SITE_OPERATIONS = 20  # a site's newest operations on its page
DEPENDENCY_SITES_READ = 10  # of a dependency's sites, those whose waiting operations its page lists
DEAD_LETTERS = 100  # the newest dead letters the dead-letters page groups (the page says when there are more)
BULK_LIMIT = 1000  # operations a bulk cancel or replay selects at most
CHART_MINUTES = 60
NOTHING = "\u2013"  # an en dash: no value
STATUS_CLASSES = {
    "succeeded": "ok",
    "dead": "bad",
    "cancelled": "muted",
    "superseded": "muted",
    "running": "busy",
    "queued": "wait",
    "accepted": "wait",
}
OPERATION_FILTERS = ("site_id", "status", "kind", "principal", "tenant", "error_code", "newer_than_s")


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Callable[..., Response]


class Console:
    """The pages of one console: `api` is the caller's client (its identity is whoever the API says it is)."""

    def __init__(self, api: ApiClient, *, read_only: bool = False, caller: str = "") -> None:
        self.api = api
        self.read_only = read_only
        self.caller = caller
        self.templates = Environment(
            loader=PackageLoader("sitedispatch.console"), autoescape=select_autoescape(default=True)
        )
        self.templates.filters.update(age=_age, when=_when, seconds=_seconds)
        self.routes = [
            Route("GET", re.compile(r"/"), self.overview),
            Route("GET", re.compile(r"/sites"), self.sites),
            Route("GET", re.compile(r"/sites/(?P<site_id>[a-z0-9-]+)"), self.site),
            Route("GET", re.compile(r"/sites/(?P<site_id>[a-z0-9-]+)/preview"), self.preview),
            Route("POST", re.compile(r"/sites/(?P<site_id>[a-z0-9-]+)/(?P<action>pause|resume)"), self.pause),
            Route("GET", re.compile(r"/operations"), self.operations),
            Route("GET", re.compile(r"/operations/bulk"), self.bulk_preview),
            Route("POST", re.compile(r"/operations/bulk"), self.bulk),
            Route("GET", re.compile(r"/operations/(?P<operation_id>[A-Za-z0-9_-]+)"), self.operation),
            Route(
                "POST", re.compile(r"/operations/(?P<operation_id>[A-Za-z0-9_-]+)/(?P<action>cancel|replay)"), self.act
            ),
            Route("GET", re.compile(r"/dead-letters"), self.dead_letters),
            Route("GET", re.compile(r"/dead-letters/redrive"), self.redrive_preview),
            Route("POST", re.compile(r"/dead-letters/redrive"), self.redrive),
            Route("GET", re.compile(r"/audit"), self.audit),
            Route("GET", re.compile(r"/quotas"), self.quotas),
            Route("POST", re.compile(r"/quotas"), self.set_quota),
            Route("GET", re.compile(r"/dependencies"), self.dependencies),
            Route("GET", re.compile(r"/dependencies/(?P<dependency_id>[a-z0-9]+:[a-z0-9._-]+)"), self.dependency),
            Route(
                "POST",
                re.compile(r"/dependencies/(?P<dependency_id>[a-z0-9]+:[a-z0-9._-]+)/(?P<action>pause|resume)"),
                self.pause_dependency,
            ),
            Route("GET", re.compile(r"/events"), self.events),
            Route("GET", re.compile(r"/webhooks"), self.webhooks),
            Route("GET", re.compile(r"/webhooks/(?P<endpoint_id>[A-Za-z0-9_-]+)"), self.webhook),
            Route("POST", re.compile(r"/webhooks/(?P<endpoint_id>[A-Za-z0-9_-]+)/redeliver"), self.redeliver),
        ]

    # -- plumbing ------------------------------------------------------------------------------------------------

    def route(self, request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        for route in self.routes:
            match = route.pattern.fullmatch(request.path)
            if match and route.method == method:
                return route.handler(request, **match.groupdict())
        raise NotFound(f"no page {request.path}")

    def render(self, request: Request, template: str, **context: Any) -> Response:
        page = self.templates.get_template(template).render(
            request=request,
            csrf=request.session.csrf,
            flash=request.session.take_flash(),
            read_only=self.read_only,
            caller=self.caller,
            here=_here(request),
            status_class=STATUS_CLASSES,
            receipt_key=receipt_key,
            **context,
        )
        return Response(HTTPStatus.OK, page.encode())

    def error_page(self, status: int, message: str) -> bytes:
        return self.templates.get_template("error.html").render(status=status, message=message).encode()

    def _act(self, request: Request, back: str, call: Callable[[], str]) -> Response:
        """Run one action, say how it went on the next page (the API's refusal word for word), and go `back`."""
        try:
            request.session.say("ok", call())
        except SiteDispatchError as exc:
            request.session.say("bad", f"refused by the API ({type(exc).__name__}): {exc}")
        return Response.redirect(back)

    # -- overview -------------------------------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        status = self.api.call("GET", "/status", query={"sites": "false"})  # per principal and tenant, not site
        try:
            minutes = self.api.call("GET", "/status/minutes", query={"minutes": CHART_MINUTES})["minutes"]
        except Forbidden:  # a principal reads its own rows, not the fleet's counts
            minutes = None
        charts = _charts(minutes) if minutes is not None else None
        return self.render(request, "overview.html", status=status, charts=charts)

    # -- sites ----------------------------------------------------------------------------------------------------

    def sites(self, request: Request) -> Response:
        search, paused, cursor = request.arg("search"), request.arg("paused"), request.arg("cursor")
        filters = {k: v for k, v in (("search", search), ("paused", paused)) if v}
        sites, following = self.api.page("/sites", {**filters, "limit": SITES, "cursor": cursor})
        return self.render(
            request,
            "sites.html",
            sites=sites,
            search=search or "",
            paused=paused or "",
            now=time.time(),
            first=cursor is None,
            filter_query=urlencode(filters),
            following=f"/sites?{urlencode({**filters, 'cursor': following})}" if following else None,
        )

    def site(self, request: Request, site_id: str) -> Response:
        site = self.api.call("GET", f"/sites/{site_id}")
        history = self.api.call("GET", f"/sites/{site_id}/history", query={"limit": 20})
        operations, _ = self.api.page("/operations", {"site_id": site_id, "limit": SITE_OPERATIONS})
        audit = self.api.call("GET", "/audit", query={"site_id": site_id, "since_s": 30 * 86400, "limit": 50})
        route = request.arg("route") or "/"
        return self.render(
            request,
            "site.html",
            site=site,
            history=history,
            operations=operations,
            audit=audit,
            route=route,
            preview=f"/sites/{site_id}/preview?{urlencode({'route': route})}",
            now=time.time(),
        )

    def preview(self, request: Request, site_id: str) -> Response:
        try:
            live = self.api.call("GET", f"/sites/{site_id}/live", query={"route": request.arg("route") or "/"})
            body = str(live["content"]).encode()
        except NotFound as exc:
            body = f"<p>{escape(str(exc))}</p>".encode()
        return Response(HTTPStatus.OK, body, headers={"Content-Security-Policy": PREVIEW_CSP})

    def pause(self, request: Request, site_id: str, action: str) -> Response:
        def call(reason: str) -> str:
            site = self.api.call("POST", f"/sites/{site_id}/{action}", body={"reason": reason})
            return f"{site_id} {'paused' if site['paused'] else 'resumed'}: {reason}"

        return self._act_with_reason(request, f"/sites/{site_id}", f"{action} a site", call)

    def _act_with_reason(self, request: Request, back: str, what: str, call: Callable[[str], str]) -> Response:
        """An action the audit trail records with its reason: refused here without one, else run as `_act`."""
        reason = request.form.get("reason", "").strip()
        if not reason:
            request.session.say("bad", f"a reason is required to {what} (it goes into the audit trail)")
            return Response.redirect(back)
        return self._act(request, back, lambda: call(reason))

    # -- operations -----------------------------------------------------------------------------------------------

    def operations(self, request: Request) -> Response:
        filters = _operation_filters(request)
        cursor = request.arg("cursor")
        operations, following = self.api.page("/operations", {**filters, "limit": LIST_LIMIT, "cursor": cursor})
        # a site's or a status's page comes newest first; the whole table's comes in its order: each page is shown
        # newest first too
        operations = sorted(operations, key=lambda op: float(op["created_at"]), reverse=True)
        return self.render(
            request,
            "operations.html",
            operations=operations,
            filters=filters,
            kinds=[k.value for k in Kind],
            statuses=[s.value for s in Status],
            limit=LIST_LIMIT,
            filter_query=urlencode(filters),
            first=cursor is None,
            following=f"/operations?{urlencode({**filters, 'cursor': following})}" if following else None,
        )

    def operation(self, request: Request, operation_id: str) -> Response:
        op = self.api.call("GET", f"/operations/{operation_id}")
        evidence = self.api.call("GET", f"/dead-letters/{operation_id}") if op["status"] == "dead" else None
        audit = self.api.call("GET", "/audit", query={"target": operation_id, "since_s": 30 * 86400, "limit": 50})
        return self.render(
            request,
            "operation.html",
            op=op,
            evidence=evidence,
            audit=audit,
            timeline=_timeline(op, audit),
            now=time.time(),
        )

    def act(self, request: Request, operation_id: str, action: str) -> Response:
        reason = request.form.get("reason", "").strip()

        def call() -> str:
            answer = self.api.call("POST", f"/operations/{operation_id}/{action}", body={"reason": reason})
            if action == "cancel":
                return f"{operation_id}: {answer['status']}" + (
                    " (cancel requested)" if answer.get("cancel_requested") else ""
                )
            return f"{operation_id}: replayed ({len(answer['redriven'])} queued again)"

        return self._act(request, f"/operations/{operation_id}", call)

    def bulk_preview(self, request: Request) -> Response:
        action = request.arg("action")
        if action not in ("cancel", "replay"):
            raise InvalidInput("action must be cancel or replay", field="action")
        filters = _operation_filters(request)
        if action == "replay":
            filters["status"] = Status.DEAD.value
        selected = self._bulk_selection(action, filters)
        return self.render(
            request,
            "bulk.html",
            action=action,
            filters=filters,
            selected=selected,
            limit=BULK_LIMIT,
            filter_query=urlencode(filters),
        )

    def bulk(self, request: Request) -> Response:
        action = request.form.get("action", "")
        if action not in ("cancel", "replay"):
            raise InvalidInput("action must be cancel or replay", field="action")
        filters = {k: v for k in OPERATION_FILTERS if (v := request.form.get(k, "").strip())}
        reason = request.form.get("reason", "").strip()
        expected = int(request.form.get("expected") or -1)
        back = f"/operations?{urlencode(filters)}"
        selected = self._bulk_selection(action, filters)
        if len(selected) != expected:
            request.session.say(
                "bad", f"the selection changed ({expected} previewed, {len(selected)} now): look again and confirm"
            )
            return Response.redirect(f"/operations/bulk?{urlencode({'action': action, **filters})}")
        done: Counter[str] = Counter()
        refusals: list[str] = []
        for op in selected:
            try:
                self.api.call("POST", f"/operations/{op['operation_id']}/{action}", body={"reason": reason})
                done["done"] += 1
            except SiteDispatchError as exc:
                done["refused"] += 1
                refusals.append(f"{op['operation_id']}: {exc}")
        verb = "cancelled" if action == "cancel" else "replayed"
        message = f"{done['done']} of {len(selected)} {verb}" + (
            f"; {done['refused']} refused ({refusals[0]}{' …' if len(refusals) > 1 else ''})" if refusals else ""
        )
        request.session.say("bad" if refusals else "ok", message)
        return Response.redirect(back)

    def _bulk_selection(self, action: str, filters: dict[str, str]) -> list[dict[str, Any]]:
        found = self.api.every("/operations", filters, limit=BULK_LIMIT)
        if action == "cancel":
            return [op for op in found if not Status(op["status"]).terminal]
        return [op for op in found if op["status"] == Status.DEAD.value]

    # -- dead letters ---------------------------------------------------------------------------------------------

    def dead_letters(self, request: Request) -> Response:
        site_id, kind = request.arg("site_id"), request.arg("kind")
        dead = self.api.call("GET", "/dead-letters", query={"site_id": site_id, "kind": kind, "limit": DEAD_LETTERS})
        classes: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for op in dead:
            classes[_error_code(op)].append(op)
        grouped = sorted(classes.items(), key=lambda item: (-len(item[1]), item[0]))
        return self.render(
            request,
            "dead_letters.html",
            classes=grouped,
            total=len(dead),
            limit=DEAD_LETTERS,
            site_id=site_id or "",
            kind=kind or "",
        )

    def redrive_preview(self, request: Request) -> Response:
        selection = _redrive_selection(request.query)
        report = self.api.call("POST", "/dead-letters/redrive", body={**selection, "dry_run": True})
        return self.render(request, "redrive.html", selection=selection, report=report)

    def redrive(self, request: Request) -> Response:
        selection = _redrive_selection(request.form)
        expected = int(request.form.get("expected") or -1)
        reason = request.form.get("reason", "").strip()

        def call() -> str:
            preview = self.api.call("POST", "/dead-letters/redrive", body={**selection, "dry_run": True})
            if len(preview["selected"]) != expected:
                raise InvalidInput(
                    f"the selection changed ({expected} previewed, {len(preview['selected'])} now): look again"
                )
            report = self.api.call("POST", "/dead-letters/redrive", body={**selection, "reason": reason})
            refused = f", {len(report['refused'])} refused" if report["refused"] else ""
            return f"redrove {len(report['redriven'])} of {len(report['selected'])}{refused} ({_describe(selection)})"

        return self._act(request, "/dead-letters", call)

    # -- audit, quotas, events, webhooks --------------------------------------------------------------------------

    def audit(self, request: Request) -> Response:
        filters = {name: request.arg(name) for name in ("actor", "action", "target", "site_id")}
        since_s = float(request.arg("since_s") or 86400)
        entries = self.api.call("GET", "/audit", query={**filters, "since_s": since_s, "limit": LIST_LIMIT})
        return self.render(request, "audit.html", entries=entries, filters=filters, since_s=since_s, limit=LIST_LIMIT)

    def quotas(self, request: Request) -> Response:
        principal, tenant = request.arg("principal"), request.arg("tenant")
        status = self.api.call("GET", "/status", query={"sites": "false"})
        principals = sorted(set(status["backlog_by_principal"]) | ({principal} if principal else set()))
        if not principals and self.caller:
            principals = [self.caller]
        limits = []
        for name in principals:
            try:
                limits.append(self.api.call("GET", "/quotas", query={"principal": name, "tenant": tenant}))
            except SiteDispatchError as exc:
                request.session.say("bad", f"{name}: {exc}")
        return self.render(request, "quotas.html", limits=limits, principal=principal or "", tenant=tenant or "")

    def set_quota(self, request: Request) -> Response:
        form = request.form
        principal, tenant = form.get("principal", "").strip(), form.get("tenant", "").strip() or None
        reason = form.get("reason", "").strip()
        back = f"/quotas?{urlencode({'principal': principal})}"

        def call() -> str:
            if form.get("clear"):
                self.api.call("DELETE", "/quotas", query={"principal": principal, "tenant": tenant, "reason": reason})
                return f"{principal}: override cleared"
            body: dict[str, Any] = {"principal": principal, "tenant": tenant, "reason": reason}
            for name in ("max_outstanding", "max_running"):
                if form.get(name, "").strip():
                    body[name] = int(form[name])
            self.api.call("PUT", "/quotas", body=body)
            return f"{principal}: limits set"

        return self._act(request, back, call)

    def dependencies(self, request: Request) -> Response:
        listed = self.api.call("GET", "/dependencies")
        return self.render(request, "dependencies.html", dependencies=listed, now=time.time())

    def dependency(self, request: Request, dependency_id: str) -> Response:
        dependency = self.api.call("GET", f"/dependencies/{dependency_id}")
        waiting = [
            op
            for site in dependency["sites"][:DEPENDENCY_SITES_READ]
            for op in self.api.page("/operations", {"site_id": site, "status": "queued", "limit": 20})[0]
        ]
        return self.render(request, "dependency.html", dependency=dependency, waiting=waiting, now=time.time())

    def pause_dependency(self, request: Request, dependency_id: str, action: str) -> Response:
        def call(reason: str) -> str:
            view = self.api.call("POST", f"/dependencies/{dependency_id}/{action}", body={"reason": reason})
            return f"{dependency_id} {view['state']}: {reason}"

        return self._act_with_reason(request, f"/dependencies/{dependency_id}", f"{action} a dependency", call)

    def events(self, request: Request) -> Response:
        principal = request.arg("principal")
        after = int(request.arg("after") or 0)
        page = self.api.call(
            "GET",
            "/events",
            query={"after": after, "principal": principal, "tenant": request.arg("tenant"), "limit": 100},
        )
        return self.render(request, "events.html", page=page, after=after, principal=principal or "")

    def webhooks(self, request: Request) -> Response:
        endpoints = self.api.call("GET", "/webhooks")["endpoints"]
        return self.render(request, "webhooks.html", endpoints=endpoints, now=time.time())

    def webhook(self, request: Request, endpoint_id: str) -> Response:
        endpoint = self.api.call("GET", f"/webhooks/{endpoint_id}")
        deliveries = self.api.call("GET", f"/webhooks/{endpoint_id}/deliveries", query={"limit": 50})
        return self.render(request, "webhook.html", endpoint=endpoint, deliveries=deliveries, now=time.time())

    def redeliver(self, request: Request, endpoint_id: str) -> Response:
        def call() -> str:
            body = {"from_seq": int(request.form["from_seq"]), "count": int(request.form.get("count") or 1)}
            self.api.call("POST", f"/webhooks/{endpoint_id}/redeliver", body=body)
            return f"{endpoint_id}: places {body['from_seq']}..{body['from_seq'] + body['count'] - 1} sent again"

        return self._act(request, f"/webhooks/{endpoint_id}", call)


def _operation_filters(request: Request) -> dict[str, str]:
    return {name: value for name in OPERATION_FILTERS if (value := request.arg(name))}


def _redrive_selection(values: dict[str, str]) -> dict[str, Any]:
    selection: dict[str, Any] = {
        name: value.strip() for name in ("error_code", "site_id") if (value := values.get(name, "")).strip()
    }
    if not selection:
        if values.get("all") != "true":
            raise InvalidInput("name an error class or a site (or all=true) to redrive", field="error_code")
        selection["all"] = True
    return selection


def _describe(selection: dict[str, Any]) -> str:
    return ", ".join("every dead operation" if k == "all" else f"{k}={v}" for k, v in selection.items())


def _error_code(op: dict[str, Any]) -> str:
    evidence = op.get("evidence") or {}
    return str(evidence.get("error_code") or (op.get("error") or {}).get("code") or "unknown")


def _timeline(op: dict[str, Any], audit: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """What happened to the operation, oldest first: its own times (the current attempt epoch's), the next attempt a
    retry waits for, and what callers did to it (its audit entries: a redrive or replay starts a new epoch)."""
    steps = [(name, float(op[key])) for name, key in _TIMELINE if op.get(key)]
    if op.get("not_before") and op.get("status") in ("accepted", "queued"):
        steps.append((f"attempt {int(op.get('attempt') or 0) + 1} not before", float(op["not_before"])))
    for entry in audit:
        outcome = "" if entry.get("outcome") == "ok" else f" ({entry.get('outcome')})"
        steps.append((f"{entry.get('action')} by {entry.get('actor')}{outcome}", float(entry["at"])))
    return sorted(steps, key=lambda step: step[1])


_TIMELINE = (
    ("accepted", "created_at"),
    ("queued", "queued_at"),
    ("attempt started", "started_at"),
    ("finished", "finished_at"),
)


def _charts(minutes: list[dict[str, Any]]) -> dict[str, Any]:
    """The overview's series (per minute: succeeded, dead, attempts, retries) and their totals over the window."""
    series = {name: [int(m[name]) for m in minutes] for name in ("succeeded", "dead", "attempts", "retries")}
    totals: dict[str, float | None] = {name: sum(values) for name, values in series.items()}
    ok, failed, attempts, retries = (sum(series[name]) for name in ("succeeded", "dead", "attempts", "retries"))
    totals["success_rate"] = round(100 * ok / (ok + failed), 1) if ok + failed else None
    totals["retry_rate"] = round(100 * retries / attempts, 1) if attempts else None
    return {"minutes": [int(m["minute"]) for m in minutes], **series, "totals": totals}


def _here(request: Request) -> str:
    return request.path + (f"?{urlencode(request.query)}" if request.query else "")


def _age(at: float | None, now: float | None = None) -> str:
    if at is None:
        return NOTHING
    return _seconds((now or time.time()) - float(at)) + " ago"


def _seconds(value: float | None) -> str:
    if value is None:
        return NOTHING
    s = max(0.0, float(value))
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _when(at: float | None) -> str:
    if at is None:
        return NOTHING
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(at))) + "Z"
