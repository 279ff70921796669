"""A channel's delivery log page (``/notifications/channels/{id}``: status filter, pages of
:data:`PAGE_SIZE`, 5 s pausable htmx refresh), the test message's inline result, and the alert
page's "Notifications" section (template global ``alert_deliveries``)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import pass_context
from jinja2.runtime import Context
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.alerts.page_views import parse_id
from app.db import SessionDep, session_scope
from app.errors import BadRequest, NotFound
from app.notify import service
from app.notify.models import DELIVERY_STATUSES, NotifyDelivery
from app.notify.ui_common import box_of
from app.viewer_time import tz_query
from app.web import is_htmx, render, templates
from app.whole_numbers import parse_whole

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50


def _status(raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    if raw not in DELIVERY_STATUSES:
        raise BadRequest(f"status: one of {', '.join(DELIVERY_STATUSES)}, got {raw[:40]!r}")
    return raw


def _page(raw: str | None) -> int:
    if raw is None or raw == "":
        return 1
    page = parse_whole(raw, low=1, high=100_000)
    if page is None:
        raise BadRequest(f"page: expected a whole number from 1, got {raw[:20]!r}")
    return page


def log_query(request: Request, *, status: str | None, page: int) -> str:
    """``?status=failed&page=2&tz=…`` (defaults left out), or ``""``."""
    pairs = [("status", status or ""), ("page", str(page) if page > 1 else "")]
    query = urlencode([(k, v) for k, v in pairs if v])
    tzq = tz_query(request)
    joined = "&".join(q for q in (query, tzq) if q)
    return f"?{joined}" if joined else ""


def log_context(
    request: Request, session: Session, channel_id: int, status: str | None, page: int
) -> dict[str, Any]:
    """The log's rows and paging for ``status`` (``None``: all) and ``page`` (1-based)."""
    channel = service.channel_out(
        service.get_channel(session, channel_id=channel_id), box_of(request)
    )
    total = service.count_deliveries(session, channel_id=channel_id, status=status)
    pages = max(1, -(-total // PAGE_SIZE))
    rows = service.list_deliveries(
        session,
        channel_id=channel_id,
        status=status,
        limit=PAGE_SIZE,
        offset=(min(page, pages) - 1) * PAGE_SIZE,
    )
    base = f"/notifications/channels/{channel_id}"
    return {
        "nav": "notifications",
        "channel": channel,
        "rows": rows,
        "status": status or "",
        "statuses": DELIVERY_STATUSES,
        "page": min(page, pages),
        "pages": pages,
        "total": total,
        "base": base,
        "self_query": log_query(request, status=status, page=page),
        "prev_query": log_query(request, status=status, page=page - 1) if page > 1 else None,
        "next_query": log_query(request, status=status, page=page + 1) if page < pages else None,
    }


@router.get("/notifications/channels/{channel_id}", response_class=HTMLResponse)
def delivery_log(
    request: Request,
    session: SessionDep,
    channel_id: str,
    status: str | None = None,
    page: str | None = None,
) -> HTMLResponse:
    """The channel's delivery log, newest first; ``?status=`` queued/delivered/failed/
    suppressed, ``?page=`` (400 naming the parameter when wrong, 404 for no channel)."""
    cid = parse_id(channel_id, "channel id")
    context = log_context(request, session, cid, _status(status), _page(page))
    return render(request, "notify/deliveries.html", context)


@router.get("/notifications/channels/{channel_id}/_log", response_class=HTMLResponse)
def delivery_log_partial(
    request: Request,
    session: SessionDep,
    channel_id: str,
    status: str | None = None,
    page: str | None = None,
) -> HTMLResponse:
    """The log table alone (htmx refresh and filter); with ``push=1`` the page URL of this
    filter is pushed to the browser's history."""
    cid = parse_id(channel_id, "channel id")
    context = log_context(request, session, cid, _status(status), _page(page))
    response = render(request, "notify/_deliveries.html", context)
    if is_htmx(request) and request.query_params.get("push"):
        response.headers["HX-Push-Url"] = context["base"] + context["self_query"]
    return response


@router.get(
    "/notifications/channels/{channel_id}/deliveries/{delivery_id}/_result",
    response_class=HTMLResponse,
)
def test_result(
    request: Request, session: SessionDep, channel_id: str, delivery_id: str
) -> HTMLResponse:
    """The inline result of a test message: polled while it is queued."""
    cid = parse_id(channel_id, "channel id")
    row = session.get(NotifyDelivery, parse_id(delivery_id, "delivery id"))
    if row is None or row.channel_id != cid:
        raise NotFound(f"no delivery {delivery_id} of channel {cid}")
    context = {"channel_id": cid, "row": row, "error": None}
    return render(request, "notify/_test_result.html", context)


@pass_context
def _alert_deliveries(context: Context, alert_id: int) -> list[tuple[NotifyDelivery, str]] | None:
    """Template global for the alert page: the alert's deliveries with channel names, or
    None without a request or when the database cannot answer (the section says so; the
    alert page itself must not fail)."""
    request = context.get("request")
    state = getattr(getattr(request, "app", None), "state", None)
    factory = getattr(state, "read_session_factory", None)
    if factory is None:
        return None
    try:
        with session_scope(factory) as session:
            rows = service.list_alert_deliveries(session, alert_id=alert_id)
            session.expunge_all()
            return rows
    except SQLAlchemyError:
        log.warning("alert page: could not list notification deliveries", exc_info=True)
        return None


templates.env.globals["alert_deliveries"] = _alert_deliveries
