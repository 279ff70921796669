"""rollup fleet minutes: per minute, the sums of every disk, NFS mount and IB port together

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 16:40:00.000000

Filled at upgrade from the 1-minute rollups already stored, so the storage page's "all the
others" line reads them at once; the fold keeps them current from then on.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Raw table → its averaged gauges (app.series.rollups.models DISK_FIELDS, NFS_FIELDS, NIC_FIELDS).
GAUGES = {
    "disk_sample": ("read_bytes_per_s", "write_bytes_per_s", "avg_wait_s"),
    "nfs_sample": ("read_bytes_per_s", "write_bytes_per_s", "avg_rtt_s"),
    "nic_port_sample": ("rx_bytes_per_s", "tx_bytes_per_s"),
}


def upgrade() -> None:
    for raw, gauges in GAUGES.items():
        name = f"{raw}_fleet_1m"
        columns = []
        for gauge in gauges:
            columns += [
                sa.Column(f"{gauge}_sum", sa.Double(), nullable=True),
                sa.Column(f"{gauge}_n", sa.BigInteger(), nullable=False),
            ]
        op.create_table(
            name,
            sa.Column("bucket_start_s", sa.BigInteger(), autoincrement=False, nullable=False),
            sa.Column("series", sa.Integer(), nullable=False),
            sa.Column("samples", sa.Integer(), nullable=False),
            *columns,
            sa.PrimaryKeyConstraint("bucket_start_s", name=f"pk_{name}"),
        )
        parts = [f"{g}_{kind}" for g in gauges for kind in ("sum", "n")]
        op.execute(
            f"INSERT INTO {name} (bucket_start_s, series, samples, {', '.join(parts)}) "
            f"SELECT bucket_start_s, count(*), sum(samples), "
            f"{', '.join(f'sum({p})' for p in parts)} "
            f"FROM {raw}_1m GROUP BY bucket_start_s"
        )


def downgrade() -> None:
    for raw in GAUGES:
        op.drop_table(f"{raw}_fleet_1m")
