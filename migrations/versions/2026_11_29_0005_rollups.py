"""rollups: 1-minute and 1-hour aggregates of GPU, disk, NFS and IB port samples

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 19:30:00.000000

The GPU rollup columns follow the rule of :func:`app.series.rollups.models.gpu_fields` applied to
the catalog as it stands at this revision (frozen below): a metric added later brings its own
migration adding its rollup columns, as it adds its ``gpu_sample`` column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db import NAMING_CONVENTION
from app.series.rollups.models import (
    DISK_FIELDS,
    NFS_FIELDS,
    NIC_FIELDS,
    RESOLUTIONS_S,
    gpu_fields,
    rollup_table,
)

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GPU_METRICS_0005 = (
    ("util_gpu_pct", False),
    ("util_mem_pct", False),
    ("util_enc_pct", False),
    ("util_dec_pct", False),
    ("mem_used_bytes", False),
    ("mem_free_bytes", False),
    ("mem_reserved_bytes", False),
    ("power_w", False),
    ("power_limit_w", False),
    ("energy_j", False),
    ("temp_c", False),
    ("mem_temp_c", False),
    ("sm_clock_mhz", False),
    ("mem_clock_mhz", False),
    ("graphics_clock_mhz", False),
    ("fan_pct", False),
    ("pstate", True),
    ("clocks_event_reasons", True),
    ("pcie_tx_bytes_per_s", False),
    ("pcie_rx_bytes_per_s", False),
    ("nvlink_tx_bytes_per_s", False),
    ("nvlink_rx_bytes_per_s", False),
    ("ecc_corrected_volatile_count", True),
    ("ecc_uncorrected_volatile_count", True),
    ("ecc_corrected_aggregate_count", True),
    ("ecc_uncorrected_aggregate_count", True),
    ("pcie_replay_count", True),
    ("pcie_link_gen", True),
    ("pcie_link_gen_max", True),
    ("pcie_link_width", True),
    ("pcie_link_width_max", True),
    ("retired_pages_sbe_count", True),
    ("retired_pages_dbe_count", True),
    ("retired_pages_pending", True),
    ("remapped_rows_correctable_count", True),
    ("remapped_rows_uncorrectable_count", True),
    ("remapped_rows_pending", True),
    ("remapped_rows_failure", True),
)


def _tables() -> list[sa.Table]:
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    # Referenced by the rollups' foreign keys; they exist already and are not created here.
    sa.Table("gpu", metadata, sa.Column("id", sa.Integer, primary_key=True))
    sa.Table("node", metadata, sa.Column("id", sa.Integer, primary_key=True))
    kinds = (
        ("gpu_sample", "gpu", gpu_fields(GPU_METRICS_0005)),
        ("disk_sample", "disk", DISK_FIELDS),
        ("nfs_sample", "nfs", NFS_FIELDS),
        ("nic_port_sample", "nic", NIC_FIELDS),
    )
    return [
        rollup_table(metadata, raw, kind, fields, resolution)
        for raw, kind, fields in kinds
        for resolution in RESOLUTIONS_S
    ]


def upgrade() -> None:
    bind = op.get_bind()
    for table in _tables():
        table.create(bind)
    op.create_table(
        "rollup_watermark",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("mark_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_rollup_watermark")),
    )
    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_sample_received_at", ["received_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_sample_received_at")
    op.drop_table("rollup_watermark")
    bind = op.get_bind()
    for table in reversed(_tables()):
        table.drop(bind)
