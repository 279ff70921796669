"""The ``dcgm_endpoint`` table, owned by :mod:`app.dcgm`: one row per dcgm-exporter endpoint
ever scraped, with the outcome of its latest scrape and the Xid state of its series."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class DcgmEndpoint(Base):
    """A dcgm-exporter ``/metrics`` URL and what its latest scrape gave.

    ``node_id`` / ``hostname``: the node its series were stored under. ``last_scrape_at``: the
    latest try; ``last_success_at``: the latest stored scrape; ``last_error``: why the latest
    try stored nothing (down, timeout, HTTP status, …), null after a stored one.
    ``series_total`` / ``series_stored``: series read and series whose value (or null, for a
    DCGM blank) was stored; ``skipped`` and ``blanks``: ``[{series, reason, count}]``;
    ``workloads``: the pods on its GPUs (``[{gpu_uuid, gpu_index, gpu_instance_id, namespace,
    pod, container}]``); ``xid_state``: the last value of each Xid series
    (:mod:`app.dcgm.xid`), so a restart neither repeats nor loses an Xid.
    """

    __tablename__ = "dcgm_endpoint"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    url: Mapped[str] = mapped_column(String(2048), unique=True)
    node_id: Mapped[int | None] = mapped_column(ForeignKey("node.id", ondelete="SET NULL"))
    hostname: Mapped[str | None] = mapped_column(String(253))
    last_scrape_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    duration_s: Mapped[float | None] = mapped_column(Float)
    gpu_count: Mapped[int | None] = mapped_column(Integer)
    series_total: Mapped[int | None] = mapped_column(Integer)
    series_stored: Mapped[int | None] = mapped_column(Integer)
    events_raised: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    blanks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    workloads: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    xid_state: Mapped[dict[str, Any] | None] = mapped_column(JSON)
