"""The ``workload_capture`` and ``incident_job`` tables, owned by :mod:`app.workloads`.

When an incident opens on a node whose schedulers Fleetwatch reads (Slurm, Kubernetes), each
system is asked once for the jobs on that node (``workload_capture``, one row per incident and
system: when, which node name, or the error); each job whose run overlaps the incident is an
``incident_job`` row, with the GPUs Slurm allocated it on that node where it allocates GPUs by
index (a Kubernetes pod's are never known).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class WorkloadCapture(Base):
    """An incident's capture of its node's jobs from one ``system`` (``slurm``,
    ``kubernetes``), which knows the node as ``target``: ``error`` where it could not be asked
    (then the incident lists no job of it, and says why)."""

    __tablename__ = "workload_capture"

    incident_id: Mapped[int] = mapped_column(
        ForeignKey("incident.id", ondelete="CASCADE"), primary_key=True
    )
    system: Mapped[str] = mapped_column(String(16), primary_key=True)
    captured_at: Mapped[datetime] = mapped_column(UTCDateTime())
    target: Mapped[str] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class IncidentJob(Base):
    """A job that ran on the incident's node during it (a Kubernetes pod: ``job_id``
    ``<namespace>/<name>``). ``gpu_indexes``: the node's GPUs allocated to it, ``None`` where
    the scheduler does not say (Slurm allocating none by index: the whole node; Kubernetes)."""

    __tablename__ = "incident_job"
    __table_args__ = (Index("ix_incident_job_incident_id", "incident_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incident.id", ondelete="CASCADE"))
    system: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[str] = mapped_column(String(320))
    user: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(Text)
    partition: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    gpu_indexes: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
