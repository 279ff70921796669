"""workload_capture, incident_job: the Slurm jobs an incident hit

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-14 10:00:00.000000

Soon after an incident opens on a node of a Slurm cluster Fleetwatch manages, the jobs that ran
there during it are captured once (app.workloads). Empty at upgrade: earlier incidents list no
job.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workload_capture",
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("captured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("system", sa.String(16), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incident.id"],
            name=op.f("fk_workload_capture_incident_id_incident"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("incident_id", name=op.f("pk_workload_capture")),
    )
    op.create_table(
        "incident_job",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("system", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("partition", sa.String(128), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpu_indexes", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incident.id"],
            name=op.f("fk_incident_job_incident_id_incident"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incident_job")),
    )
    op.create_index("ix_incident_job_incident_id", "incident_job", ["incident_id"])


def downgrade() -> None:
    op.drop_table("incident_job")
    op.drop_table("workload_capture")
