"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 16:08:23.523977
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "node",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=253), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("agent_version", sa.String(length=64), nullable=True),
        sa.Column("driver_version", sa.String(length=64), nullable=True),
        sa.Column("cuda_version", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_sample_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("clock_skew_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node")),
        sa.UniqueConstraint("hostname", name=op.f("uq_node_hostname")),
    )
    op.create_table(
        "gpu",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=96), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=True),
        sa.Column("pci_bus_id", sa.String(length=32), nullable=True),
        sa.Column("mem_total_bytes", sa.BigInteger(), nullable=True),
        sa.Column("mig_mode", sa.String(length=16), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("state_reason", sa.String(length=1024), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_sample_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_gpu_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu")),
        sa.UniqueConstraint("uuid", name=op.f("uq_gpu_uuid")),
    )
    with op.batch_alter_table("gpu", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpu_node_id"), ["node_id"], unique=False)

    op.create_table(
        "ingest_batch",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.String(length=64), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_ingest_batch_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("node_id", "batch_id", name=op.f("pk_ingest_batch")),
    )
    with op.batch_alter_table("ingest_batch", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_ingest_batch_received_at"), ["received_at"], unique=False
        )

    op.create_table(
        "node_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_node_token_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_token")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_node_token_token_sha256")),
    )
    with op.batch_alter_table("node_token", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_node_token_node_id"), ["node_id"], unique=False)

    op.create_table(
        "gpu_sample",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("util_gpu_pct", sa.Double(), nullable=True),
        sa.Column("util_mem_pct", sa.Double(), nullable=True),
        sa.Column("util_enc_pct", sa.Double(), nullable=True),
        sa.Column("util_dec_pct", sa.Double(), nullable=True),
        sa.Column("mem_used_bytes", sa.Double(), nullable=True),
        sa.Column("mem_free_bytes", sa.Double(), nullable=True),
        sa.Column("mem_reserved_bytes", sa.Double(), nullable=True),
        sa.Column("power_w", sa.Double(), nullable=True),
        sa.Column("power_limit_w", sa.Double(), nullable=True),
        sa.Column("energy_j", sa.Double(), nullable=True),
        sa.Column("temp_c", sa.Double(), nullable=True),
        sa.Column("mem_temp_c", sa.Double(), nullable=True),
        sa.Column("sm_clock_mhz", sa.Double(), nullable=True),
        sa.Column("mem_clock_mhz", sa.Double(), nullable=True),
        sa.Column("graphics_clock_mhz", sa.Double(), nullable=True),
        sa.Column("fan_pct", sa.Double(), nullable=True),
        sa.Column("pstate", sa.BigInteger(), nullable=True),
        sa.Column("clocks_event_reasons", sa.BigInteger(), nullable=True),
        sa.Column("pcie_tx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("pcie_rx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("nvlink_tx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("nvlink_rx_bytes_per_s", sa.Double(), nullable=True),
        sa.Column("ecc_corrected_volatile_count", sa.BigInteger(), nullable=True),
        sa.Column("ecc_uncorrected_volatile_count", sa.BigInteger(), nullable=True),
        sa.Column("ecc_corrected_aggregate_count", sa.BigInteger(), nullable=True),
        sa.Column("ecc_uncorrected_aggregate_count", sa.BigInteger(), nullable=True),
        sa.Column("pcie_replay_count", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpu.id"], name=op.f("fk_gpu_sample_gpu_id_gpu"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("gpu_id", "sampled_at", name=op.f("pk_gpu_sample")),
    )
    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_sample_sampled_at", ["sampled_at"], unique=False)

    op.create_table(
        "node_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("pci_bus_id", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpu.id"], name=op.f("fk_node_event_gpu_id_gpu"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_node_event_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_event")),
    )
    with op.batch_alter_table("node_event", schema=None) as batch_op:
        batch_op.create_index(
            "ix_node_event_node_id_occurred_at", ["node_id", "occurred_at"], unique=False
        )
        batch_op.create_index("ix_node_event_occurred_at", ["occurred_at"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("node_event", schema=None) as batch_op:
        batch_op.drop_index("ix_node_event_occurred_at")
        batch_op.drop_index("ix_node_event_node_id_occurred_at")

    op.drop_table("node_event")
    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_sample_sampled_at")

    op.drop_table("gpu_sample")
    with op.batch_alter_table("node_token", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_token_node_id"))

    op.drop_table("node_token")
    with op.batch_alter_table("ingest_batch", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ingest_batch_received_at"))

    op.drop_table("ingest_batch")
    with op.batch_alter_table("gpu", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_node_id"))

    op.drop_table("gpu")
    op.drop_table("node")
