"""Revision 0028 on Postgres and SQLite: an incident's Slurm capture and jobs stored at 0026
survive the upgrade, a Kubernetes capture of the same incident then fits beside it, and a pod's
long ``<namespace>/<name>`` fits whole; the downgrade keeps Slurm's capture and cuts ids to 64
characters."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import insert, select, text

from app.db import make_engine
from app.fleet.models import Node
from app.incidents.models import Incident
from app.migrate import alembic_config, upgrade
from app.workloads.models import IncidentJob, WorkloadCapture
from tests.dbs import database_at

AT = datetime(2026, 12, 14, 9, 0, tzinfo=UTC)
POD_ID = "ml-research-team-a/llm-pretrain-70b-2026-12-14-worker-0-with-a-long-suffix"


@pytest.fixture(params=["postgres", "sqlite"])
def at_0026(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of either backend at revision 0026."""
    with database_at(request.param, "0026", tmp_path) as url:
        yield url


def _capture(system: str) -> dict[str, object]:
    return {"incident_id": 1, "captured_at": AT, "system": system, "target": "dgx-07"}


def _job(job_id: str, system: str) -> dict[str, object]:
    return {
        "incident_id": 1,
        "system": system,
        "job_id": job_id,
        "user": "alice",
        "name": "llm-pretrain",
        "partition": "gpu",
        "state": "RUNNING",
        "started_at": AT,
    }


def test_the_upgrade_keeps_slurm_captures_and_makes_room_for_kubernetes(at_0026: str) -> None:
    engine = make_engine(at_0026)
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(Node.__table__).values(id=1, hostname="dgx-07", labels={}, created_at=AT)
            )
            conn.execute(
                insert(Incident.__table__).values(
                    id=1,
                    node_id=1,
                    opened_at=AT,
                    last_event_at=AT,
                    event_count=1,
                    gpu_indexes=[3],
                    xids=[79],
                    kinds=["xid"],
                    state="unhealthy",
                    job_fatal=True,
                    action_code="RESET_GPU",
                    action_text="reset",
                    updated_at=AT,
                )
            )
            conn.execute(insert(WorkloadCapture.__table__).values(_capture("slurm")))
            conn.execute(insert(IncidentJob.__table__).values(_job("4242", "slurm")))
        upgrade(at_0026)
        with engine.begin() as conn:
            conn.execute(insert(WorkloadCapture.__table__).values(_capture("kubernetes")))
            conn.execute(insert(IncidentJob.__table__).values(_job(POD_ID, "kubernetes")))
            captures = conn.execute(
                select(WorkloadCapture.system, WorkloadCapture.target).order_by(
                    WorkloadCapture.system
                )
            ).all()
            jobs = conn.scalars(select(IncidentJob.job_id).order_by(IncidentJob.id)).all()
        assert [tuple(c) for c in captures] == [("kubernetes", "dgx-07"), ("slurm", "dgx-07")]
        assert jobs == ["4242", POD_ID]
        assert len(POD_ID) > 64

        command.downgrade(alembic_config(at_0026), "0026")
        with engine.connect() as conn:
            kept = conn.execute(text("SELECT system FROM workload_capture")).scalars().all()
            ids = conn.execute(text("SELECT job_id FROM incident_job ORDER BY id")).scalars().all()
        assert kept == ["slurm"]
        assert ids == ["4242", POD_ID[:64]]
        upgrade(at_0026)
    finally:
        engine.dispose()
