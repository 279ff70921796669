"""The template context of the fleet overview (``/`` and its ``/fleet/_nodes`` refresh): one
pass over the fleet per request, the same for the full page and the partial."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from fastapi import Request
from sqlalchemy.orm import Session

from app.db import utcnow
from app.fleet import service as fleet_service
from app.health import current as health_state
from app.health import service as health_service
from app.health.rules import SEVERITY, HealthRules, rules_from_settings
from app.incidents import offenders
from app.lifecycle import service as lifecycle
from app.overview import service as overview_service
from app.overview import tiles
from app.overview.filters import (
    GROUPINGS,
    OVERLAYS,
    PAGE_ROWS,
    SERVICES,
    STATES,
    VIEWS,
    OverviewFilters,
)
from app.overview.row_cache import ROWS
from app.overview.service_marks import ServiceMark, in_service_state, service_marks
from app.overview.table import StateRow, fleet_counts, health_rank
from app.overview.tile_cache import TILES

EVENTS_SHOWN = 20
#: Repeat offenders shown on the overview, of each kind.
OFFENDERS_SHOWN = 5
#: Label filters offered as lists (others can still be typed as key=value).
LABEL_CHOICES = ("cluster", "ib_pod", "rack", "team")
#: A label with more values than this is typed, not picked from a list.
MAX_CHOICES = 200


def overview_context(
    request: Request,
    session: Session,
    filters: OverviewFilters,
    *,
    label_columns: tuple[str, ...],
    sorts: dict[str, str],
    skew_shown_above_s: float,
) -> dict[str, Any]:
    """Everything the overview templates read. Health is that of the nodes matching the
    search, labels and model (the counts at the top are over those), then narrowed by state;
    the filter choices come from the whole fleet.

    The health overlay and the table read the stored health (:mod:`app.health.state`: one
    row per node, tiles cached per process by stored answer); the value overlays read each
    GPU's latest sample as well."""
    settings = request.app.state.settings
    now = utcnow()
    rules = rules_from_settings(settings)
    context: dict[str, Any] = {
        "filters": filters,
        "label_choices": LABEL_CHOICES,
        "max_choices": MAX_CHOICES,
        "overlays": OVERLAYS,
        "views_allowed": VIEWS,
        "groupings": GROUPINGS,
        "states": STATES,
        "services": SERVICES,
        "events": overview_service.recent_events(session, limit=EVENTS_SHOWN),
        "repeat_nodes": offenders.repeat_nodes(session, now=now, limit=OFFENDERS_SHOWN),
        "repeat_gpus": offenders.repeat_gpus(session, now=now, limit=OFFENDERS_SHOWN),
        "now": now,
        "nav": "fleet",
        "sorts": sorts,
        "label_columns": label_columns,
        "skew_shown_above_s": skew_shown_above_s,
    }
    out = lifecycle.out_of_service_nodes(session)
    marks = service_marks(session, now=now, out=out)
    context.update(
        out_of_service=out[:OFFENDERS_SHOWN],
        out_of_service_total=len(out),
        in_maintenance_total=sum(m.maintenance for m in marks.values()),
    )
    if filters.view != "table" and filters.overlay != "health":
        context.update(_values_grid(session, filters, rules=rules, now=now, marks=marks))
        return context
    everyone = health_state.list_states(
        session, stale_after_s=settings.stale_after_s, now=now, search=filters.q or None
    )
    nodes = [n for n in everyone if all(n.labels.get(k) == v for k, v in filters.labels.items())]
    if filters.service:
        nodes = [n for n in nodes if in_service_state(marks.get(n.hostname), filters.service)]
    health, nodes = health_state.health_of(session, nodes=nodes, rules=rules, now=now)
    context["options"] = tiles.state_filter_options(
        everyone, LABEL_CHOICES, models=fleet_service.gpu_models(session)
    )
    if filters.model:
        nodes = [n for n in nodes if filters.model in n.summary.get("models", ())]
    context["health_counts"] = health_service.count_states(
        [health[n.hostname].state for n in nodes]
    )
    if filters.state:
        nodes = [n for n in nodes if n.state == filters.state]
    if filters.view == "table":
        rows = [StateRow(n) for n in nodes]
        if filters.problems:
            rows = [r for r in rows if health[r.node.hostname].state != "healthy"]
        if filters.sort == "health":
            rows.sort(
                key=lambda r: (
                    -SEVERITY[health[r.node.hostname].state],
                    health_rank(r),
                    r.node.hostname,
                )
            )
        context.update(
            health=health,
            counts=fleet_counts(rows),
            row_head=ROWS.bound(filters, label_columns, marks),
            **_table_page(rows, filters.page),
        )
        return context
    entries = [
        tiles.GridEntry(
            hostname=n.hostname,
            labels=n.labels,
            state=health[n.hostname].state,
            tile=partial(TILES.tile, n, health[n.hostname]),
            mark=marks.get(n.hostname),
        )
        for n in nodes
    ]
    collapse = not filters.expand and len(entries) > settings.grid_collapse_above_nodes
    clusters = tiles.group_tiles(
        entries, problems_only=filters.problems, grouping=filters.group, collapse_healthy=collapse
    )
    context.update(_grid(clusters, filters))
    return context


def _table_page(rows: list[StateRow], page: int) -> dict[str, Any]:
    """The rows of ``page`` (:data:`PAGE_ROWS` each; past the last page, the last) and the
    pager's numbers: ``views``, ``page``, ``pages``, ``first_row`` and ``last_row`` (1-based),
    ``total_rows``."""
    pages = max(1, -(-len(rows) // PAGE_ROWS))
    page = min(page, pages)
    start = (page - 1) * PAGE_ROWS
    shown = rows[start : start + PAGE_ROWS]
    return {
        "views": shown,
        "page": page,
        "pages": pages,
        "first_row": start + 1 if shown else 0,
        "last_row": start + len(shown),
        "total_rows": len(rows),
    }


def _grid(clusters: list[tiles.Cluster], filters: OverviewFilters) -> dict[str, Any]:
    shown = [n for c in clusters for g in c.groups for n in g.nodes]
    return {
        "clusters": clusters,
        "legend": tiles.legend(filters.overlay),
        "shown_nodes": len(shown),
        "shown_gpus": sum(len(n.cells) for n in shown),
        "collapsed_nodes": sum(c.collapsed_nodes for c in clusters),
    }


def _values_grid(
    session: Session,
    filters: OverviewFilters,
    *,
    rules: HealthRules,
    now: datetime,
    marks: dict[str, ServiceMark],
) -> dict[str, Any]:
    """The grid of a value overlay (utilization, memory, temperature, power): every GPU's
    latest sample is read, and tiles are made on each request (values change every batch)."""
    everyone = overview_service.list_views(
        session, stale_after_s=rules.stale_after_s, now=now, search=filters.q or None
    )
    options = tiles.filter_options(everyone, LABEL_CHOICES)
    views = [
        v
        for v in everyone
        if all((v.node.labels or {}).get(k) == val for k, val in filters.labels.items())
        and (not filters.service or in_service_state(marks.get(v.node.hostname), filters.service))
    ]
    views = tiles.select_nodes(views, {}, model=filters.model) if filters.model else views
    # Health from the stored answers (parsed once per process), for the nodes shown.
    ids = {v.node.id for v in views}
    states = health_state.list_states(session, stale_after_s=rules.stale_after_s, now=now)
    nodes = [n for n in states if n.node_id in ids]
    health, _ = health_state.health_of(session, nodes=nodes, rules=rules, now=now)
    views = [v for v in views if v.node.hostname in health]
    health_counts = health_service.count_states([h.state for h in health.values()])
    views = tiles.select_nodes(views, health, state=filters.state)
    clusters = tiles.build_grid(
        views,
        health,
        overlay=filters.overlay,
        problems_only=filters.problems,
        grouping=filters.group,
        marks=marks,
    )
    return {"options": options, "health_counts": health_counts, **_grid(clusters, filters)}
