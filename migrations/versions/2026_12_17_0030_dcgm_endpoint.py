"""dcgm_endpoint: dcgm-exporter endpoints scraped in pull mode, their latest outcome, Xid state

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-17 10:00:00.000000

Pull mode (docs/dcgm-pull.md) scrapes dcgm-exporter endpoints into the ingest path. Each
endpoint's row says what its latest scrape stored or why it stored nothing, which series were
skipped and why, the pods on its GPUs, and the last value of each Xid series, so a restarted
server does not raise the same Xid again.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dcgm_endpoint",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=True),
        sa.Column("hostname", sa.String(length=253), nullable=True),
        sa.Column("last_scrape_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=True),
        sa.Column("series_total", sa.Integer(), nullable=True),
        sa.Column("series_stored", sa.Integer(), nullable=True),
        sa.Column("events_raised", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("skipped", sa.JSON(), nullable=True),
        sa.Column("blanks", sa.JSON(), nullable=True),
        sa.Column("workloads", sa.JSON(), nullable=True),
        sa.Column("xid_state", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_dcgm_endpoint_node_id_node"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dcgm_endpoint")),
        sa.UniqueConstraint("url", name=op.f("uq_dcgm_endpoint_url")),
    )


def downgrade() -> None:
    op.drop_table("dcgm_endpoint")
