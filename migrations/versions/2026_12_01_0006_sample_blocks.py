"""sample blocks: an hour of a GPU's or an NVLink's samples, a day of a GPU's 1-minute rollups,
in one row of typed arrays

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 11:00:00.000000

Raw rows are left where they are: the compaction job (or ``fleetwatch storage compact``) moves
them into blocks in batches, resumably, so the upgrade itself is instant on a large database.
On SQLite the tables are created (one schema) but never filled. The GPU metric columns are
those of the catalog at this revision (frozen below), as in 0005.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.series.rollups.models import gpu_fields, rollup_columns

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _array(element: sa.types.TypeEngine) -> sa.types.TypeEngine:
    return sa.ARRAY(element).with_variant(sa.Text(), "sqlite")


INTEGERS = _array(sa.BigInteger())
FLOATS = _array(sa.Double())
TEXTS = _array(sa.Text())

GPU_METRICS_0006 = (
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


def upgrade() -> None:
    op.create_table(
        "gpu_sample_block",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("block_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("received_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sampled_at_delta_us", INTEGERS, nullable=False),
        *(
            sa.Column(name, INTEGERS if integer else FLOATS, nullable=False)
            for name, integer in GPU_METRICS_0006
        ),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpu.id"], name=op.f("fk_gpu_sample_block_gpu_id_gpu"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("gpu_id", "block_start", name=op.f("pk_gpu_sample_block")),
    )
    op.create_index("ix_gpu_sample_block_block_start", "gpu_sample_block", ["block_start"])
    op.create_table(
        "nvlink_sample_block",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("link", sa.Integer(), nullable=False),
        sa.Column("block_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("sampled_at_delta_us", INTEGERS, nullable=False),
        sa.Column("state", TEXTS, nullable=False),
        sa.Column("speed_gbps", FLOATS, nullable=False),
        sa.Column("remote_pci_bus_id", TEXTS, nullable=False),
        sa.Column("remote_device_type", TEXTS, nullable=False),
        sa.Column("tx_bytes_per_s", FLOATS, nullable=False),
        sa.Column("rx_bytes_per_s", FLOATS, nullable=False),
        sa.Column("crc_errors", INTEGERS, nullable=False),
        sa.Column("replay_errors", INTEGERS, nullable=False),
        sa.Column("recovery_errors", INTEGERS, nullable=False),
        sa.ForeignKeyConstraint(
            ["gpu_id"],
            ["gpu.id"],
            name=op.f("fk_nvlink_sample_block_gpu_id_gpu"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "gpu_id", "link", "block_start", name=op.f("pk_nvlink_sample_block")
        ),
    )
    op.create_index("ix_nvlink_sample_block_block_start", "nvlink_sample_block", ["block_start"])
    minute_values = [
        sa.Column(c.name, _array(c.type), nullable=False)
        for c in rollup_columns(gpu_fields(GPU_METRICS_0006))
    ]
    op.create_table(
        "gpu_sample_1m_block",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("block_start_s", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("bucket_count", sa.Integer(), nullable=False),
        sa.Column("bucket_start_delta_s", INTEGERS, nullable=False),
        *minute_values,
        sa.ForeignKeyConstraint(
            ["gpu_id"],
            ["gpu.id"],
            name=op.f("fk_gpu_sample_1m_block_gpu_id_gpu"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("gpu_id", "block_start_s", name=op.f("pk_gpu_sample_1m_block")),
    )
    op.create_index(
        "ix_gpu_sample_1m_block_block_start_s", "gpu_sample_1m_block", ["block_start_s"]
    )


NVLINK_VALUES_0006 = (
    "state",
    "speed_gbps",
    "remote_pci_bus_id",
    "remote_device_type",
    "tx_bytes_per_s",
    "rx_bytes_per_s",
    "crc_errors",
    "replay_errors",
    "recovery_errors",
)


def _unpack(raw: str, block: str, keys: str, values: Sequence[str], arrival: bool) -> str:
    names = ", ".join(values)
    arrays = ", ".join(f"b.{v}" for v in values)
    unnested = ", ".join(f"u.{v}" for v in values)
    key_cols = ", ".join(f"b.{k.strip()}" for k in keys.split(","))
    return (
        f"INSERT INTO {raw} ({keys}, sampled_at{', received_at' if arrival else ''}, {names}) "
        f"SELECT {key_cols}, b.block_start + u.offset_us * interval '1 microsecond'"
        f"{', b.received_until' if arrival else ''}, {unnested} "
        f"FROM {block} b, LATERAL (SELECT sum(d.dt) OVER (ORDER BY d.ord) AS offset_us, "
        f"{', '.join(f'd.{v}' for v in values)} "
        f"FROM unnest(b.sampled_at_delta_us, {arrays}) WITH ORDINALITY AS d(dt, {names}, ord)) u "
        "ON CONFLICT DO NOTHING"
    )


def _unpack_minutes(values: Sequence[str]) -> str:
    names = ", ".join(values)
    return (
        f"INSERT INTO gpu_sample_1m (gpu_id, bucket_start_s, {names}) "
        f"SELECT b.gpu_id, b.block_start_s + u.offset_s, {', '.join(f'u.{v}' for v in values)} "
        f"FROM gpu_sample_1m_block b, LATERAL (SELECT sum(d.dt) OVER (ORDER BY d.ord) AS offset_s, "
        f"{', '.join(f'd.{v}' for v in values)} FROM unnest(b.bucket_start_delta_s, "
        f"{', '.join(f'b.{v}' for v in values)}) WITH ORDINALITY AS d(dt, {names}, ord)) u "
        "ON CONFLICT DO NOTHING"
    )


def downgrade() -> None:
    """Unpack every block back into raw rows (Postgres), then drop the block tables."""
    if op.get_bind().dialect.name == "postgresql":
        minutes = [c.name for c in rollup_columns(gpu_fields(GPU_METRICS_0006))]
        op.execute(_unpack_minutes(minutes))
        gpu_values = [name for name, _ in GPU_METRICS_0006]
        op.execute(_unpack("gpu_sample", "gpu_sample_block", "gpu_id", gpu_values, True))
        links = "gpu_id, link"
        nvlink = _unpack("nvlink_sample", "nvlink_sample_block", links, NVLINK_VALUES_0006, False)
        op.execute(nvlink)
    op.drop_index("ix_gpu_sample_1m_block_block_start_s", table_name="gpu_sample_1m_block")
    op.drop_table("gpu_sample_1m_block")
    op.drop_index("ix_nvlink_sample_block_block_start", table_name="nvlink_sample_block")
    op.drop_table("nvlink_sample_block")
    op.drop_index("ix_gpu_sample_block_block_start", table_name="gpu_sample_block")
    op.drop_table("gpu_sample_block")
