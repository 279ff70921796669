"""host sample blocks: a day of a node's disk, mount, NFS mount or IB port readings (and of
their 1-minute rollups) in one row of typed arrays

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 09:00:00.000000

At the agent's ``--host-interval`` of 60 s the four host tables took 4.4 MB per HGX node per
day as rows (179-229 bytes a row with their indexes), as much as the packed GPU samples. Their
block forms hold a day per entity (1,440 readings per array at 60 s), which Postgres compresses
like the GPU blocks. Raw rows are left where they are: the compaction job (or ``fleetwatch
storage compact``) moves them, in batches, resumably. Their 1-minute rollups (one reading per
minute at that interval: 4.2 MB per node per day) are packed by day like the GPU's
(``<raw>_1m_block``). On SQLite the tables are created (one schema) but never filled. Columns
are those of the raw tables at this revision (frozen below) and of the rollup fields, as 0005.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db import NAMING_CONVENTION
from app.series.rollups.models import DISK_FIELDS, NFS_FIELDS, NIC_FIELDS, rollup_table

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _array(element: sa.types.TypeEngine) -> sa.types.TypeEngine:
    return sa.ARRAY(element).with_variant(sa.Text(), "sqlite")


FLOAT = _array(sa.Double())
BIGINT = _array(sa.BigInteger())
TEXT = _array(sa.Text())
COUNTER = _array(sa.Numeric(20, 0).with_variant(sa.String(20), "sqlite"))

Columns = tuple[tuple[str, sa.types.TypeEngine], ...]
#: Raw table → (key columns after node_id, value columns with their array types), at 0012.
TABLES_0012: dict[str, tuple[Columns, Columns]] = {
    "disk_sample": (
        (("device", sa.String(64)),),
        (
            ("read_bytes_per_s", FLOAT),
            ("write_bytes_per_s", FLOAT),
            ("read_iops", FLOAT),
            ("write_iops", FLOAT),
            ("busy_pct", FLOAT),
            ("avg_wait_s", FLOAT),
        ),
    ),
    "mount_sample": (
        (("mountpoint", sa.String(512)),),
        (
            ("device", TEXT),
            ("fstype", TEXT),
            ("used_bytes", BIGINT),
            ("total_bytes", BIGINT),
        ),
    ),
    "nfs_sample": (
        (("mountpoint", sa.String(512)),),
        (
            ("export", TEXT),
            ("version", TEXT),
            ("read_bytes", COUNTER),
            ("write_bytes", COUNTER),
            ("ops", COUNTER),
            ("retransmits", COUNTER),
            ("read_bytes_per_s", FLOAT),
            ("write_bytes_per_s", FLOAT),
            ("ops_per_s", FLOAT),
            ("retransmits_per_s", FLOAT),
            ("avg_rtt_s", FLOAT),
        ),
    ),
    "nic_port_sample": (
        (("device", sa.String(64)), ("port", sa.Integer())),
        (
            ("link_layer", TEXT),
            ("state", TEXT),
            ("phys_state", TEXT),
            ("rate_gbps", FLOAT),
            ("tx_bytes_per_s", FLOAT),
            ("rx_bytes_per_s", FLOAT),
            ("symbol_error_count", BIGINT),
            ("link_downed_count", BIGINT),
            ("link_error_recovery_count", BIGINT),
            ("port_rcv_errors_count", BIGINT),
            ("port_xmit_discards_count", BIGINT),
        ),
    ),
}


def _minute_tables() -> list[sa.Table]:
    """The host 1-minute rollup tables as 0005 made them (to read their columns)."""
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    sa.Table("node", metadata, sa.Column("id", sa.Integer, primary_key=True))
    kinds = (
        ("disk_sample", "disk", DISK_FIELDS),
        ("nfs_sample", "nfs", NFS_FIELDS),
        ("nic_port_sample", "nic", NIC_FIELDS),
    )
    return [rollup_table(metadata, raw, kind, fields, 60) for raw, kind, fields in kinds]


def _minute_parts(minutes: sa.Table) -> tuple[list[sa.Column], list[str]]:
    keys = [c for c in minutes.primary_key.columns if c.name != "bucket_start_s"]
    values = [c.name for c in minutes.columns if c not in keys and c.name != "bucket_start_s"]
    return keys, values


def upgrade() -> None:
    for minutes in _minute_tables():
        keys, values = _minute_parts(minutes)
        block = f"{minutes.name}_block"
        op.create_table(
            block,
            *(sa.Column(k.name, k.type, nullable=False) for k in keys),
            sa.Column("block_start_s", sa.BigInteger(), autoincrement=False, nullable=False),
            sa.Column("bucket_count", sa.Integer(), nullable=False),
            sa.Column("bucket_start_delta_s", BIGINT, nullable=False),
            *(sa.Column(v, _array(minutes.c[v].type), nullable=False) for v in values),
            sa.ForeignKeyConstraint(
                ["node_id"], ["node.id"], name=op.f(f"fk_{block}_node_id_node"), ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint(
                *(k.name for k in keys), "block_start_s", name=op.f(f"pk_{block}")
            ),
        )
        op.create_index(f"ix_{block}_block_start_s", block, ["block_start_s"])
    for raw, (keys, values) in TABLES_0012.items():
        block = f"{raw}_block"
        op.create_table(
            block,
            sa.Column("node_id", sa.Integer(), nullable=False),
            *(sa.Column(name, kind, nullable=False) for name, kind in keys),
            sa.Column("block_start", sa.DateTime(timezone=True), nullable=False),
            sa.Column("sample_count", sa.Integer(), nullable=False),
            sa.Column("sampled_at_delta_us", BIGINT, nullable=False),
            *(sa.Column(name, kind, nullable=False) for name, kind in values),
            sa.ForeignKeyConstraint(
                ["node_id"], ["node.id"], name=op.f(f"fk_{block}_node_id_node"), ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint(
                "node_id", *(name for name, _ in keys), "block_start", name=op.f(f"pk_{block}")
            ),
        )
        op.create_index(f"ix_{block}_block_start", block, ["block_start"])


def _unpack(raw: str, keys: Sequence[str], values: Sequence[str]) -> str:
    """Every block of ``raw`` back into raw rows (the block's values win over a raw row of the
    same key)."""
    key_cols = ", ".join(("node_id", *keys))
    names = ", ".join(values)
    return (
        f"INSERT INTO {raw} ({key_cols}, sampled_at, {names}) "
        f"SELECT {', '.join(f'b.{k}' for k in ('node_id', *keys))}, "
        f"b.block_start + u.offset_us * interval '1 microsecond', "
        f"{', '.join(f'u.{v}' for v in values)} "
        f"FROM {raw}_block b, LATERAL (SELECT sum(d.dt) OVER (ORDER BY d.ord) AS offset_us, "
        f"{', '.join(f'd.{v}' for v in values)} "
        f"FROM unnest(b.sampled_at_delta_us, {', '.join(f'b.{v}' for v in values)}) "
        f"WITH ORDINALITY AS d(dt, {names}, ord)) u "
        # A raw row repeating a packed one (not merged by compaction yet) gives way to the
        # block's values, as compaction would have it: the first stored wins.
        f"ON CONFLICT ({key_cols}, sampled_at) DO UPDATE SET "
        f"{', '.join(f'{v} = excluded.{v}' for v in values)}"
    )


def _unpack_minutes(minutes: str, keys: Sequence[str], values: Sequence[str]) -> str:
    names = ", ".join(values)
    return (
        f"INSERT INTO {minutes} ({', '.join(keys)}, bucket_start_s, {names}) "
        f"SELECT {', '.join(f'b.{k}' for k in keys)}, b.block_start_s + u.offset_s, "
        f"{', '.join(f'u.{v}' for v in values)} "
        f"FROM {minutes}_block b, LATERAL (SELECT sum(d.dt) OVER (ORDER BY d.ord) AS offset_s, "
        f"{', '.join(f'd.{v}' for v in values)} FROM unnest(b.bucket_start_delta_s, "
        f"{', '.join(f'b.{v}' for v in values)}) WITH ORDINALITY AS d(dt, {names}, ord)) u "
        "ON CONFLICT DO NOTHING"
    )


def downgrade() -> None:
    """Unpack every block back into raw rows and minute rows (Postgres), then drop the block
    tables."""
    postgres = op.get_bind().dialect.name == "postgresql"
    for minutes in _minute_tables():
        keys, values = _minute_parts(minutes)
        if postgres:
            op.execute(_unpack_minutes(minutes.name, [k.name for k in keys], values))
        op.drop_index(f"ix_{minutes.name}_block_block_start_s", table_name=f"{minutes.name}_block")
        op.drop_table(f"{minutes.name}_block")
    for raw, (keys, values) in TABLES_0012.items():
        if postgres:
            op.execute(_unpack(raw, [k for k, _ in keys], [v for v, _ in values]))
        op.drop_index(f"ix_{raw}_block_block_start", table_name=f"{raw}_block")
        op.drop_table(f"{raw}_block")
