"""The wide GPU time-series table ``gpu_sample``: one row per (gpu, sampled_at), one nullable
column per metric of :mod:`app.metrics.catalog` (``NULL`` = not available)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Double, ForeignKey, Index, Integer, Table

from app.db import Base, UTCDateTime
from app.metrics.catalog import METRICS

gpu_sample = Table(
    "gpu_sample",
    Base.metadata,
    Column("gpu_id", Integer, ForeignKey("gpu.id", ondelete="CASCADE"), primary_key=True),
    Column("sampled_at", UTCDateTime(), primary_key=True),
    Column("received_at", UTCDateTime(), nullable=False),
    *(Column(m.name, BigInteger if m.integer else Double, nullable=True) for m in METRICS),
    Index("ix_gpu_sample_sampled_at", "sampled_at"),
)
"""Primary key (gpu_id, sampled_at) makes a re-sent sample a no-op; received_at is server time."""
