"""HTML pages of the fleet: the overview (``/``, built in :mod:`app.overview`), the node page
(``/nodes/{hostname}``) and the htmx partials that refresh them every few seconds."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.db import SessionDep, utcnow
from app.errors import BadRequest
from app.events import service as event_service
from app.fleet import node_charts
from app.fleet import service as fleet_service
from app.fleet.charts import PRESETS
from app.health import service as health_service
from app.health.rules import rules_from_settings
from app.incidents import service as incidents_service
from app.lifecycle import pages as lifecycle_pages
from app.nics import service as nic_service
from app.nvlinks import service as nvlink_service
from app.overview.context import overview_context
from app.overview.filters import OverviewFilters
from app.overview.table import fleet_counts as fleet_counts  # re-exported
from app.overview.table import health_rank as health_rank  # re-exported
from app.remediation.service import Backends
from app.storage import service as storage_service
from app.topology import service as topology_service
from app.topology.matrix import LEGEND, build_matrix
from app.web import render

router = APIRouter(include_in_schema=False)

LABEL_COLUMNS = ("cluster", "ib_pod", "rack", "team")
SORTS = {"hostname": "Hostname", "health": "Unhealthy first"}
SKEW_SHOWN_ABOVE_S = 2.0
EVENTS_SHOWN = 50
#: The node page's incidents: the last week's, newest first.
INCIDENTS_SHOWN = 20
INCIDENTS_SHOWN_S = timedelta(days=7)
TOPOLOGY_CHANGES = 5
SLOW_IO_S = 0.02  # disk wait or NFS RTT from which the node page marks storage as slow
FULL_PCT = 90.0  # filesystem use from which the node page marks it as nearly full
Labels = Annotated[list[str], Query()]


@dataclass(frozen=True)
class FleetFilters:
    """What the fleet list is narrowed and ordered by, as read from the URL."""

    q: str
    labels: dict[str, str]
    sort: str
    invalid: tuple[str, ...] = ()

    @classmethod
    def parse(cls, q: str | None, label: list[str], sort: str | None) -> FleetFilters:
        """Lenient: blank entries are dropped and a label entry without ``=`` is reported back
        (``invalid``) instead of failing the page."""
        labels: dict[str, str] = {}
        invalid = []
        for item in label:
            key, sep, value = item.strip().partition("=")
            if sep and key.strip():
                labels[key.strip()] = value.strip()
            elif item.strip():
                invalid.append(item.strip())
        return cls(
            q=(q or "").strip()[:253],
            labels=labels,
            sort=sort if sort in SORTS else "hostname",
            invalid=tuple(invalid),
        )

    def query(self, **changes: Any) -> str:
        """The URL query string of these filters (``?q=…&label=k=v``), with ``changes`` applied
        (``label_add=(k, v)``, ``label_drop=k``); empty when nothing is set."""
        labels = dict(self.labels)
        if "label_drop" in changes:
            labels.pop(changes["label_drop"], None)
        if "label_add" in changes:
            key, value = changes["label_add"]
            labels[key] = value
        params: list[tuple[str, str]] = []
        if self.q:
            params.append(("q", self.q))
        params += [("label", f"{k}={v}") for k, v in labels.items()]
        if self.sort != "hostname":
            params.append(("sort", self.sort))
        return "?" + urlencode(params) if params else ""


def _overview_filters(
    q: str | None,
    label: list[str],
    sort: str | None,
    state: str | None,
    model: str | None,
    overlay: str | None,
    view: str | None,
    problems: str | None,
    group: str | None = None,
    page: str | None = None,
    expand: str | None = None,
    service: str | None = None,
) -> OverviewFilters:
    return OverviewFilters.parse(
        FleetFilters.parse(q, label, sort),
        state=state,
        model=model,
        overlay=overlay,
        view=view,
        problems=problems,
        group=group,
        page=page,
        expand=expand,
        service=service,
    )


def _fleet_context(request: Request, session: Session, filters: OverviewFilters) -> dict[str, Any]:
    return overview_context(
        request,
        session,
        filters,
        label_columns=LABEL_COLUMNS,
        sorts=SORTS,
        skew_shown_above_s=SKEW_SHOWN_ABOVE_S,
    )


@router.get("/", response_class=HTMLResponse)
def fleet_page(
    request: Request,
    session: SessionDep,
    q: str | None = None,
    label: Labels = [],  # noqa: B006
    sort: str | None = None,
    state: str | None = None,
    model: str | None = None,
    overlay: str | None = None,
    view: str | None = None,
    problems: str | None = None,
    group: str | None = None,
    page: str | None = None,
    expand: str | None = None,
    service: str | None = None,
) -> HTMLResponse:
    """The fleet overview: node counts per health state, the tile grid (cluster → IB pod →
    node, a cell per GPU coloured by ``overlay``) or the node table (``view=table``, ``page``
    of 500 rows), and the recent events; narrowed by ``q``, ``label=k=v``, ``model``,
    ``state``, ``service`` (in / out / maintenance) and ``problems=1``. An unknown
    ``state``/``overlay``/``view``/``problems``/``service`` value
    or a ``page`` that is not a number from 1 is a 400 page naming it."""
    filters = _overview_filters(
        q, label, sort, state, model, overlay, view, problems, group, page, expand, service
    )
    return render(request, "fleet/page.html", _fleet_context(request, session, filters))


@router.get("/fleet")
def fleet_alias(request: Request) -> RedirectResponse:
    """``/fleet`` → ``/`` with the same query string."""
    query = request.url.query
    return RedirectResponse("/" + (f"?{query}" if query else ""), status_code=308)


@router.get("/fleet/_nodes", response_class=HTMLResponse)
def fleet_nodes_partial(
    request: Request,
    session: SessionDep,
    q: str | None = None,
    label: Labels = [],  # noqa: B006
    sort: str | None = None,
    state: str | None = None,
    model: str | None = None,
    overlay: str | None = None,
    view: str | None = None,
    problems: str | None = None,
    group: str | None = None,
    page: str | None = None,
    expand: str | None = None,
    service: str | None = None,
    push: str | None = None,
    seen: str | None = None,
) -> Response:
    """The overview's live region alone (counts, grid or table, events), for the 5 s htmx
    refresh and the filter form; with ``push=1`` (a filter change) the browser's URL is set to
    the page URL of the new filters.

    ``X-Live-Version`` identifies what the answer shows (a hash of it, the "updated at" line
    left out); a refresh that sends it back as ``seen`` gets 204 No Content when nothing
    changed: at 1,000 nodes the browser is spared re-drawing 8,000 cells every 5 s. A filter
    change (``push=1``) shows the table's first page."""
    page = None if push == "1" else page
    filters = _overview_filters(
        q, label, sort, state, model, overlay, view, problems, group, page, expand, service
    )
    response = render(request, "overview/_live.html", _fleet_context(request, session, filters))
    version = live_version(bytes(response.body))
    if seen is not None and seen == version and push != "1":
        return Response(status_code=204, headers={"X-Live-Version": version})
    response.headers["X-Live-Version"] = version
    if push == "1":
        response.headers["HX-Push-Url"] = "/" + filters.query()
    return response


#: What changes with the clock alone, left out of a live region's version: the "Updated …"
#: line and the text of ``<time data-ago>`` ages (the browser keeps those current itself).
_CLOCK_TEXT = re.compile(rb'<p class="updated"[^>]*>[^<]*</p>|(<time [^>]*data-ago[^>]*>)[^<]*')


def live_version(body: bytes) -> str:
    """A short hash of a live region's HTML without what changes with the clock alone."""
    stripped = _CLOCK_TEXT.sub(lambda m: m.group(1) or b"", body)
    return hashlib.blake2b(stripped, digest_size=12).hexdigest()


def _node_context(request: Request, session: Session, hostname: str) -> dict[str, Any]:
    now = utcnow()
    view = fleet_service.get_node_view(
        session,
        hostname=hostname,
        stale_after_s=request.app.state.settings.stale_after_s,
        now=now,
    )
    gpus = [g.gpu for g in view.gpus]
    rules = rules_from_settings(request.app.state.settings)
    health = health_service.evaluate_node(session, view=view, rules=rules, now=now)
    topology = topology_service.get_history(session, node_id=view.node.id, limit=TOPOLOGY_CHANGES)
    return {
        "view": view,
        "health": health,
        "gpu_health": {g.index: g for g in health.gpus},
        "events": event_service.list_node_events(session, node_id=view.node.id, limit=EVENTS_SHOWN),
        "incidents": incidents_service.list_incidents(
            session,
            quiet_s=request.app.state.settings.incident_quiet_s,
            now=now,
            hostname=view.node.hostname,
            since=now - INCIDENTS_SHOWN_S,
            limit=INCIDENTS_SHOWN,
        ),
        "gpu_links": nvlink_service.group_by_gpu(
            gpus, nvlink_service.list_latest_links(session, gpus=gpus)
        ),
        "storage": storage_service.get_node_storage(session, node_id=view.node.id),
        "nic_ports": nic_service.list_latest_ports(session, node_id=view.node.id),
        "topology": topology,
        "matrix": build_matrix(topology.latest.snapshot.document) if topology.latest else None,
        "topology_legend": LEGEND,
        "slow_io_s": SLOW_IO_S,
        "full_pct": FULL_PCT,
        "gpu_index_by_id": {g.gpu.id: g.gpu.index for g in view.gpus},
        "label_columns": LABEL_COLUMNS,
        "skew_shown_above_s": SKEW_SHOWN_ABOVE_S,
        "now": now,
    }


def check_range_preset(preset: str | None) -> None:
    """Refuse a ``?range=`` that is not a chart preset (``1h``, ``6h``, …; blank = default).

    Raises:
        BadRequest: the message names ``range`` and lists the presets.
    """
    if preset and preset not in PRESETS:
        raise BadRequest(f"range: unknown preset {preset[:40]!r}; one of {', '.join(PRESETS)}")


@router.get("/nodes/{hostname}", response_class=HTMLResponse)
def node_page(
    request: Request,
    session: SessionDep,
    hostname: str,
    range_: Annotated[str | None, Query(alias="range")] = None,
    start: str | None = None,
    end: str | None = None,
) -> HTMLResponse:
    """One node: versions, freshness, per-GPU current values, events and the charts over the
    range of ``?range=1h`` or ``?start=…&end=…``. 404 page for an unknown node."""
    context = _node_context(request, session, hostname)
    check_range_preset(range_)
    chart = node_charts.chart_context(
        request,
        session,
        view=context["view"],
        now=context["now"],
        preset=range_,
        start=start,
        end=end,
    )
    panel = lifecycle_pages.panel_context(
        session, context["view"].node, Backends.of(request.app.state.settings)
    )
    return render(request, "fleet/node.html", {**context, **chart, **panel})


@router.get("/nodes/{hostname}/_live", response_class=HTMLResponse)
def node_live_partial(request: Request, session: SessionDep, hostname: str) -> HTMLResponse:
    """The node's status, GPU table and events alone, for the 5 s htmx refresh."""
    return render(request, "fleet/_node_live.html", _node_context(request, session, hostname))
