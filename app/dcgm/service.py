"""Storing a dcgm-exporter scrape through the ingest path, and the endpoints' outcomes.

A scrape becomes the batch an agent would have pushed (:func:`batch_document`) and goes through
:func:`app.ingest.rows.parse_batch` and :func:`app.ingest.service.store_batch`, so its node,
GPUs, samples and Xid events are stored, judged, alerted on and served like any pushed node's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import __version__
from app.dcgm import fields, xid
from app.dcgm.models import DcgmEndpoint
from app.dcgm.targets import Target, shown_url
from app.dcgm.translate import Translation
from app.fleet import service as fleet_service
from app.fleet.models import Node
from app.health.rules import DEFAULT_RULES, HealthRules
from app.ingest import service as ingest_service
from app.ingest.fields import clean_document
from app.ingest.rows import ParsedBatch, parse_batch
from app.ingest.schemas import IngestResult

COLLECTOR = "dcgm-exporter"
_MAX_ERROR_CHARS = 1024


@dataclass(frozen=True)
class IngestPolicy:
    """The ingest settings a pulled batch is stored under (those of ``POST /api/v1/ingest``)."""

    future_tolerance_s: float = 300.0
    retention_days: float = 30.0
    raw_retention_days: float | None = None
    stale_after_s: float = 120.0
    health_rules: HealthRules = DEFAULT_RULES
    incident_quiet_s: float = 180.0


@dataclass(frozen=True)
class Stored:
    """A stored scrape: the endpoint's row, its node's id, the batch and the ingest's answer."""

    endpoint: DcgmEndpoint
    node_id: int
    batch: ParsedBatch
    result: IngestResult


class NotStored(Exception):
    """A scrape that cannot be stored as its node (the message says why)."""


def get_or_create_endpoint(session: Session, *, url: str) -> DcgmEndpoint:
    """The endpoint row of ``url``, created if new (flushes)."""
    row = session.scalars(select(DcgmEndpoint).where(DcgmEndpoint.url == url)).one_or_none()
    if row is None:
        row = DcgmEndpoint(url=url, events_raised=0)
        session.add(row)
        session.flush()
    return row


def list_endpoints(session: Session) -> list[DcgmEndpoint]:
    """Every endpoint ever scraped, by URL."""
    return list(session.scalars(select(DcgmEndpoint).order_by(DcgmEndpoint.url)))


def batch_document(
    translation: Translation,
    *,
    batch_id: str,
    scraped_at: datetime,
    events: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ingest batch (payload schema version 1, ``docs/ingest.md``) of a translated scrape.

    Series skipped for a problem (a line that does not parse, a series without a GPU, another
    host's, a conflicting value) are summed up in ``collection.errors``, one entry per series
    name and reason, so the node's page says a value may be missing and why; the fields left
    out by design (:data:`app.dcgm.fields.NOT_TAKEN` …) are listed on the endpoint only.
    """
    errors = [
        {"source": COLLECTOR, "message": f"{s['series']} ×{s['count']} skipped: {s['reason']}"}
        for s in translation.skipped
        if not fields.by_design(s["reason"])
    ][:100]
    return {
        "schema_version": 1,
        "batch_id": batch_id,
        "sent_at": scraped_at.isoformat(),
        "node": {
            "hostname": translation.hostname,
            "labels": translation.node_labels,
            "agent_version": f"fleetwatch {__version__} dcgm pull",
            "driver_version": translation.driver_version,
        },
        "gpus": translation.gpus,
        "samples": translation.samples,
        "events": events,
        "collection": {"collector": COLLECTOR, "errors": errors},
    }


def store_scrape(
    session: Session,
    *,
    target: Target,
    translation: Translation,
    scraped_at: datetime,
    duration_s: float,
    received_at: datetime,
    policy: IngestPolicy,
    configured_urls: Collection[str] = (),
) -> Stored:
    """Store a translated scrape of ``target`` as its node's batch and record the outcome.

    ``configured_urls``: the endpoints configured now. One of them (other than ``target``)
    whose latest scrape stored this node within ``policy.stale_after_s`` keeps it: two
    endpoints naming one node would otherwise take turns with its inventory, each marking the
    other's GPUs missing. An endpoint no longer configured (a pod restarted under a new IP)
    or whose latest try failed hands the node over at once.

    Raises:
        NotStored: the node name is not a host name, the node is retired, or it is pushed by
            an agent (a node is either pushed or pulled: two sources would fight over its
            inventory), or
            the translation is not a valid batch (a bug: the message says where).
    """
    endpoint = get_or_create_endpoint(session, url=target.url)
    try:
        node = fleet_service.get_or_create_node(session, hostname=translation.hostname)
    except ValueError as exc:
        raise NotStored(
            f"{exc}: give the target a hostname label, or set NODE_NAME on the exporter for "
            "its Hostname label (docs/dcgm-pull.md)"
        ) from None
    node = session.get_one(Node, node.id, with_for_update={"key_share": True})
    if node.retired_at is not None:
        # A pushed batch brings a retired node back (a new token was issued for it); a scrape
        # would do so every interval, undoing the operator's decision behind their back.
        raise NotStored(
            f"node {node.hostname} is retired: remove this endpoint from the configuration, "
            "or return the node (fleetwatch node return) to scrape it again"
        )
    pushed_since = received_at - timedelta(seconds=policy.stale_after_s)
    if (
        node.collector != COLLECTOR
        and node.last_seen_at is not None
        and node.last_seen_at >= pushed_since
    ):
        collector = node.collector or "not said"
        raise NotStored(
            f"node {node.hostname} is pushed by an agent (collector {collector}); a node is "
            "either pushed or pulled, so this scrape is not stored"
        )
    holder = _other_live_endpoint(
        session,
        node_id=node.id,
        endpoint_id=endpoint.id,
        configured_urls=configured_urls,
        since=pushed_since,
    )
    if holder is not None:
        raise NotStored(
            f"node {node.hostname} is scraped at {shown_url(holder)} too: two endpoints name "
            "one node; give each target its own hostname label (docs/dcgm-pull.md)"
        )
    state = endpoint.xid_state
    if state is None:
        state = _inherited_xid_state(session, node_id=node.id, endpoint_id=endpoint.id)
    events, xid_state = xid.events(
        translation.xids, state, at=scraped_at, url=shown_url(target.url)
    )
    batch_id = f"dcgm-{endpoint.id}-{int(scraped_at.timestamp() * 1000)}"
    document = batch_document(translation, batch_id=batch_id, scraped_at=scraped_at, events=events)
    try:
        batch = parse_batch(clean_document(document))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise NotStored(f"the scrape is not a valid batch at {where}: {first['msg']}") from None
    result = ingest_service.store_batch(
        session,
        node=node,
        batch=batch,
        received_at=received_at,
        future_tolerance_s=policy.future_tolerance_s,
        retention_days=policy.retention_days,
        raw_retention_days=policy.raw_retention_days,
        stale_after_s=policy.stale_after_s,
        health_rules=policy.health_rules,
        incident_quiet_s=policy.incident_quiet_s,
    )
    endpoint.node_id = node.id
    endpoint.hostname = node.hostname
    endpoint.last_scrape_at = scraped_at
    endpoint.last_success_at = scraped_at
    endpoint.last_error = None
    endpoint.duration_s = round(duration_s, 3)
    endpoint.gpu_count = len(translation.gpus)
    endpoint.series_total = translation.series_total
    endpoint.series_stored = translation.series_stored
    endpoint.skipped = translation.skipped + [
        {
            "series": f"GPU {conflict.uuid}",
            "reason": f"node {conflict.node} reports this GPU: not taken over (docs/ingest.md)",
            "count": 1,
        }
        for conflict in sorted(result.gpu_conflicts, key=lambda c: c.uuid)
    ]
    endpoint.blanks = translation.blanks
    endpoint.workloads = translation.workloads
    endpoint.xid_state = xid_state
    endpoint.events_raised = (endpoint.events_raised or 0) + result.events_stored
    session.flush()
    return Stored(endpoint=endpoint, node_id=node.id, batch=batch, result=result)


def _other_live_endpoint(
    session: Session,
    *,
    node_id: int,
    endpoint_id: int,
    configured_urls: Collection[str],
    since: datetime,
) -> str | None:
    """The URL of another configured endpoint whose latest try stored node ``node_id`` at or
    after ``since``, or None."""
    if not configured_urls:
        return None
    stmt = (
        select(DcgmEndpoint.url)
        .where(
            DcgmEndpoint.node_id == node_id,
            DcgmEndpoint.id != endpoint_id,
            DcgmEndpoint.last_error.is_(None),
            DcgmEndpoint.last_success_at >= since,
        )
        .order_by(DcgmEndpoint.url)
    )
    # A node's endpoints are one or two rows: filtered here, not by an IN of every URL.
    return next((url for url in session.scalars(stmt) if url in configured_urls), None)


def _inherited_xid_state(
    session: Session, *, node_id: int, endpoint_id: int
) -> dict[str, Any] | None:
    """The Xid state of the node's most recently stored other endpoint: a dcgm-exporter pod
    restarted under a new IP (a regenerated targets file) is a new URL for the same GPUs, whose
    last Xid must not be raised again."""
    stmt = (
        select(DcgmEndpoint.xid_state)
        .where(
            DcgmEndpoint.node_id == node_id,
            DcgmEndpoint.id != endpoint_id,
            DcgmEndpoint.xid_state.is_not(None),
        )
        .order_by(DcgmEndpoint.last_success_at.desc())
        .limit(1)
    )
    state: dict[str, Any] | None = session.scalars(stmt).first()
    return state


def record_failure(
    session: Session, *, url: str, error: str, scraped_at: datetime, duration_s: float
) -> DcgmEndpoint:
    """Record that the latest scrape of ``url`` stored nothing, and why (flushes). What the
    last stored scrape gave (its counts, pods, Xid state) is kept."""
    endpoint = get_or_create_endpoint(session, url=url)
    endpoint.last_scrape_at = scraped_at
    endpoint.last_error = error[:_MAX_ERROR_CHARS]
    endpoint.duration_s = round(duration_s, 3)
    session.flush()
    return endpoint
