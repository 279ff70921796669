"""The template context of the fleet overview (``/`` and its ``/fleet/_nodes`` refresh): one
pass over the fleet per request, the same for the full page and the partial."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from sqlalchemy.orm import Session

from app.db import utcnow
from app.health import service as health_service
from app.health.rules import SEVERITY, rules_from_settings
from app.overview import service as overview_service
from app.overview import tiles
from app.overview.filters import OVERLAYS, STATES, VIEWS, OverviewFilters
from app.overview.table import fleet_counts, health_rank

EVENTS_SHOWN = 20
#: Label filters offered as lists (others can still be typed as key=value).
LABEL_CHOICES = ("cluster", "ib_pod", "rack", "team")


def overview_context(
    request: Request,
    session: Session,
    filters: OverviewFilters,
    *,
    label_columns: tuple[str, ...],
    sorts: dict[str, str],
    skew_shown_above_s: float,
) -> dict[str, Any]:
    """Everything the overview templates read. Health is evaluated for the nodes matching the
    search, labels and model (the counts at the top are over those), then narrowed by state;
    the filter choices come from the whole fleet."""
    settings = request.app.state.settings
    now = utcnow()
    everyone = overview_service.list_views(
        session, stale_after_s=settings.stale_after_s, now=now, search=filters.q or None
    )
    options = tiles.filter_options(everyone, LABEL_CHOICES)
    views = [
        v
        for v in everyone
        if all((v.node.labels or {}).get(k) == val for k, val in filters.labels.items())
    ]
    views = tiles.select_nodes(views, {}, model=filters.model) if filters.model else views
    rules = rules_from_settings(settings)
    health = health_service.evaluate_views(session, views=views, rules=rules, now=now)
    health_counts = health_service.count_states([h.state for h in health.values()])
    views = tiles.select_nodes(views, health, state=filters.state)
    context: dict[str, Any] = {
        "filters": filters,
        "options": options,
        "label_choices": LABEL_CHOICES,
        "overlays": OVERLAYS,
        "views_allowed": VIEWS,
        "states": STATES,
        "health_counts": health_counts,
        "events": overview_service.recent_events(session, limit=EVENTS_SHOWN),
        "now": now,
        "nav": "fleet",
        "sorts": sorts,
        "label_columns": label_columns,
        "skew_shown_above_s": skew_shown_above_s,
    }
    if filters.view == "table":
        if filters.problems:
            views = [v for v in views if health[v.node.hostname].state != "healthy"]
        if filters.sort == "health":
            views.sort(
                key=lambda v: (
                    -SEVERITY[health[v.node.hostname].state],
                    health_rank(v),
                    v.node.hostname,
                )
            )
        context.update(views=views, health=health, counts=fleet_counts(views))
    else:
        clusters = tiles.build_grid(
            views, health, overlay=filters.overlay, problems_only=filters.problems
        )
        shown = [n for c in clusters for g in c.groups for n in g.nodes]
        context.update(
            clusters=clusters,
            legend=tiles.legend(filters.overlay),
            shown_nodes=len(shown),
            shown_gpus=sum(len(n.cells) for n in shown),
        )
    return context
