"""Helpers for HTTP tests: posting batches and counting stored rows."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
from sqlalchemy import func, select, table

from app.db import make_engine
from app.events.models import NodeEvent
from app.ingest.models import IngestBatch
from app.series.tables import gpu_sample


def post_batch(
    base_url: str, token: str | None, payload: Any, *, gzip_body: bool = False, **headers: str
) -> httpx.Response:
    """POST ``payload`` (a dict, or raw bytes sent as they are) to the ingest endpoint."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sent_headers = {"Content-Type": "application/json"}
    if gzip_body:
        body = gzip.compress(body)
        sent_headers["Content-Encoding"] = "gzip"
    if token is not None:
        sent_headers["Authorization"] = f"Bearer {token}"
    sent_headers.update({k.replace("_", "-"): v for k, v in headers.items()})
    return httpx.post(f"{base_url}/api/v1/ingest", content=body, headers=sent_headers, timeout=30)


def counts(url: str) -> dict[str, int]:
    """Rows in the tables ingest writes to."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {
                "samples": conn.scalar(select(func.count()).select_from(gpu_sample)) or 0,
                "events": conn.scalar(select(func.count()).select_from(NodeEvent)) or 0,
                "batches": conn.scalar(select(func.count()).select_from(IngestBatch)) or 0,
            }
    finally:
        engine.dispose()


def stored_samples(url: str) -> list[dict[str, Any]]:
    """Every stored sample row as a dict, ordered by gpu and time."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(gpu_sample).order_by(gpu_sample.c.gpu_id, gpu_sample.c.sampled_at)
            ).mappings()
            return [dict(r) for r in rows]
    finally:
        engine.dispose()


SECTION_TABLES = (
    "nvlink_sample",
    "disk_sample",
    "mount_sample",
    "nfs_sample",
    "nic_port_sample",
    "topology_snapshot",
    "topology_change",
)


def section_counts(url: str) -> dict[str, int]:
    """Rows in each node-section table (NVLinks, storage, NICs, topology)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {
                name: conn.scalar(select(func.count()).select_from(table(name))) or 0
                for name in SECTION_TABLES
            }
    finally:
        engine.dispose()
