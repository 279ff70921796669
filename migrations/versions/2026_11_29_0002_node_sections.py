"""node sections: more GPU metrics, GPU MIG/processes/unavailable, node collection, NVLink,
storage, NFS, NIC port and topology tables

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 16:42:26.814817

Every new column is nullable, so upgrading a database that already holds data from 0001 needs no
backfill. NFS counters are unsigned 64-bit: NUMERIC(20,0) on Postgres; SQLite would turn a
NUMERIC above 2**63-1 into a lossy REAL, so there they are VARCHAR(20) (app.db.UInt64).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UINT64 = sa.Numeric(20, 0).with_variant(sa.String(20), "sqlite")


def upgrade() -> None:
    op.create_table(
        "disk_sample",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("read_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("write_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("read_iops", sa.Double(), nullable=True),
        sa.Column("write_iops", sa.Double(), nullable=True),
        sa.Column("busy_pct", sa.Double(), nullable=True),
        sa.Column("avg_wait_s", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_disk_sample_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("node_id", "device", "sampled_at", name=op.f("pk_disk_sample")),
    )
    with op.batch_alter_table("disk_sample", schema=None) as batch_op:
        batch_op.create_index(
            "ix_disk_sample_node_id_sampled_at", ["node_id", "sampled_at"], unique=False
        )
        batch_op.create_index("ix_disk_sample_sampled_at", ["sampled_at"], unique=False)

    op.create_table(
        "mount_sample",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("mountpoint", sa.String(length=512), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("device", sa.String(length=256), nullable=True),
        sa.Column("fstype", sa.String(length=32), nullable=True),
        sa.Column("used_bytes", sa.BigInteger(), nullable=True),
        sa.Column("total_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_mount_sample_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint(
            "node_id", "mountpoint", "sampled_at", name=op.f("pk_mount_sample")
        ),
    )
    with op.batch_alter_table("mount_sample", schema=None) as batch_op:
        batch_op.create_index(
            "ix_mount_sample_node_id_sampled_at", ["node_id", "sampled_at"], unique=False
        )
        batch_op.create_index("ix_mount_sample_sampled_at", ["sampled_at"], unique=False)

    op.create_table(
        "nfs_sample",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("mountpoint", sa.String(length=512), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("export", sa.String(length=512), nullable=True),
        sa.Column("version", sa.String(length=16), nullable=True),
        sa.Column("read_bytes", UINT64, nullable=True),
        sa.Column("write_bytes", UINT64, nullable=True),
        sa.Column("ops", UINT64, nullable=True),
        sa.Column("retransmits", UINT64, nullable=True),
        sa.Column("read_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("write_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("ops_per_s", sa.Double(), nullable=True),
        sa.Column("retransmits_per_s", sa.Double(), nullable=True),
        sa.Column("avg_rtt_s", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_nfs_sample_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("node_id", "mountpoint", "sampled_at", name=op.f("pk_nfs_sample")),
    )
    with op.batch_alter_table("nfs_sample", schema=None) as batch_op:
        batch_op.create_index(
            "ix_nfs_sample_node_id_sampled_at", ["node_id", "sampled_at"], unique=False
        )
        batch_op.create_index("ix_nfs_sample_sampled_at", ["sampled_at"], unique=False)

    op.create_table(
        "nic_port_sample",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("link_layer", sa.String(length=32), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=True),
        sa.Column("phys_state", sa.String(length=32), nullable=True),
        sa.Column("rate_gbps", sa.Double(), nullable=True),
        sa.Column("tx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("rx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("symbol_error_count", sa.BigInteger(), nullable=True),
        sa.Column("link_downed_count", sa.BigInteger(), nullable=True),
        sa.Column("link_error_recovery_count", sa.BigInteger(), nullable=True),
        sa.Column("port_rcv_errors_count", sa.BigInteger(), nullable=True),
        sa.Column("port_xmit_discards_count", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_nic_port_sample_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "node_id", "device", "port", "sampled_at", name=op.f("pk_nic_port_sample")
        ),
    )
    with op.batch_alter_table("nic_port_sample", schema=None) as batch_op:
        batch_op.create_index(
            "ix_nic_port_sample_node_id_sampled_at", ["node_id", "sampled_at"], unique=False
        )
        batch_op.create_index("ix_nic_port_sample_sampled_at", ["sampled_at"], unique=False)

    op.create_table(
        "topology_snapshot",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("partial", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=True),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_topology_snapshot_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_topology_snapshot")),
        sa.UniqueConstraint("node_id", "digest", name=op.f("uq_topology_snapshot_node_id_digest")),
    )
    op.create_table(
        "nvlink_sample",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("link", sa.Integer(), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("speed_gbps", sa.Double(), nullable=True),
        sa.Column("remote_pci_bus_id", sa.String(length=32), nullable=True),
        sa.Column("remote_device_type", sa.String(length=16), nullable=True),
        sa.Column("tx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("rx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("crc_errors", sa.BigInteger(), nullable=True),
        sa.Column("replay_errors", sa.BigInteger(), nullable=True),
        sa.Column("recovery_errors", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpu.id"], name=op.f("fk_nvlink_sample_gpu_id_gpu"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("gpu_id", "link", "sampled_at", name=op.f("pk_nvlink_sample")),
    )
    with op.batch_alter_table("nvlink_sample", schema=None) as batch_op:
        batch_op.create_index(
            "ix_nvlink_sample_gpu_id_sampled_at", ["gpu_id", "sampled_at"], unique=False
        )
        batch_op.create_index("ix_nvlink_sample_sampled_at", ["sampled_at"], unique=False)

    op.create_table(
        "topology_change",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("snapshot_id", sa.Integer(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_topology_change_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            ["topology_snapshot.id"],
            name=op.f("fk_topology_change_snapshot_id_topology_snapshot"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_topology_change")),
    )
    with op.batch_alter_table("topology_change", schema=None) as batch_op:
        batch_op.create_index(
            "ix_topology_change_node_id_received_at", ["node_id", "received_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_topology_change_snapshot_id"), ["snapshot_id"], unique=False
        )

    with op.batch_alter_table("gpu", schema=None) as batch_op:
        batch_op.add_column(sa.Column("unavailable", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("mig_instances", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("processes", sa.JSON(), nullable=True))

    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pcie_link_gen", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("pcie_link_gen_max", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("pcie_link_width", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("pcie_link_width_max", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("retired_pages_sbe_count", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("retired_pages_dbe_count", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("retired_pages_pending", sa.BigInteger(), nullable=True))
        batch_op.add_column(
            sa.Column("remapped_rows_correctable_count", sa.BigInteger(), nullable=True)
        )
        batch_op.add_column(
            sa.Column("remapped_rows_uncorrectable_count", sa.BigInteger(), nullable=True)
        )
        batch_op.add_column(sa.Column("remapped_rows_pending", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("remapped_rows_failure", sa.BigInteger(), nullable=True))

    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.add_column(sa.Column("collector", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("collection_errors", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.drop_column("collection_errors")
        batch_op.drop_column("collector")

    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.drop_column("remapped_rows_failure")
        batch_op.drop_column("remapped_rows_pending")
        batch_op.drop_column("remapped_rows_uncorrectable_count")
        batch_op.drop_column("remapped_rows_correctable_count")
        batch_op.drop_column("retired_pages_pending")
        batch_op.drop_column("retired_pages_dbe_count")
        batch_op.drop_column("retired_pages_sbe_count")
        batch_op.drop_column("pcie_link_width_max")
        batch_op.drop_column("pcie_link_width")
        batch_op.drop_column("pcie_link_gen_max")
        batch_op.drop_column("pcie_link_gen")

    with op.batch_alter_table("gpu", schema=None) as batch_op:
        batch_op.drop_column("processes")
        batch_op.drop_column("mig_instances")
        batch_op.drop_column("unavailable")

    with op.batch_alter_table("topology_change", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_topology_change_snapshot_id"))
        batch_op.drop_index("ix_topology_change_node_id_received_at")

    op.drop_table("topology_change")
    with op.batch_alter_table("nvlink_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_nvlink_sample_sampled_at")
        batch_op.drop_index("ix_nvlink_sample_gpu_id_sampled_at")

    op.drop_table("nvlink_sample")
    op.drop_table("topology_snapshot")
    with op.batch_alter_table("nic_port_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_nic_port_sample_sampled_at")
        batch_op.drop_index("ix_nic_port_sample_node_id_sampled_at")

    op.drop_table("nic_port_sample")
    with op.batch_alter_table("nfs_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_nfs_sample_sampled_at")
        batch_op.drop_index("ix_nfs_sample_node_id_sampled_at")

    op.drop_table("nfs_sample")
    with op.batch_alter_table("mount_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_mount_sample_sampled_at")
        batch_op.drop_index("ix_mount_sample_node_id_sampled_at")

    op.drop_table("mount_sample")
    with op.batch_alter_table("disk_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_disk_sample_sampled_at")
        batch_op.drop_index("ix_disk_sample_node_id_sampled_at")

    op.drop_table("disk_sample")
