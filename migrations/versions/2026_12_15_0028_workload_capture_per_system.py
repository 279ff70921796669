"""workload_capture per system, incident_job.job_id wider: Kubernetes pods as jobs hit

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-15 11:00:00.000000

An incident's node may be in Slurm and in Kubernetes: each system is asked once and has its own
capture row (when, which node name, or its error), so ``workload_capture``'s key becomes
(incident_id, system). A pod's job id is ``<namespace>/<name>`` (at most 63 + 1 + 253
characters): ``incident_job.job_id`` grows from 64 to 320. Rows are kept: every capture so far
is Slurm's.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Batch mode copies the tables on SQLite: nothing references them, so nothing cascades.
    with op.batch_alter_table("workload_capture") as batch:
        batch.drop_constraint("pk_workload_capture", type_="primary")
        batch.create_primary_key("pk_workload_capture", ["incident_id", "system"])
    with op.batch_alter_table("incident_job") as batch:
        batch.alter_column(
            "job_id", existing_type=sa.String(64), type_=sa.String(320), existing_nullable=False
        )


def downgrade() -> None:
    # Revision 0026 holds one capture per incident: Slurm's is kept where there are two.
    op.execute(
        "DELETE FROM workload_capture WHERE system <> 'slurm' AND incident_id IN "
        "(SELECT incident_id FROM workload_capture WHERE system = 'slurm')"
    )
    op.execute("UPDATE incident_job SET job_id = substr(job_id, 1, 64) WHERE length(job_id) > 64")
    with op.batch_alter_table("incident_job") as batch:
        batch.alter_column(
            "job_id", existing_type=sa.String(320), type_=sa.String(64), existing_nullable=False
        )
    with op.batch_alter_table("workload_capture") as batch:
        batch.drop_constraint("pk_workload_capture", type_="primary")
        batch.create_primary_key("pk_workload_capture", ["incident_id"])
