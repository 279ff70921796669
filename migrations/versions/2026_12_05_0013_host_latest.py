"""host and NVLink current state: the newest reading of every disk, mount, NFS mount and IB
port, one row per (node, entity), and of every NVLink, one row per (GPU, link), kept current by
the ingest

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 09:00:00.000000

The fleet's storage page read the newest row of 8,000 IB ports, 3,000 disks and their mounts
from the raw tables on every request (``DISTINCT ON`` plus a minute-rollup scan for entities
that went quiet: ~300 ms of a 400 ms page at 1,000 nodes). ``<raw>_latest`` holds each
entity's newest row; the upgrade fills it from the raw rows (the newest per key; entities only
in packed day blocks are older than any reader's window). NVLinks likewise: the node page, the
health check and topology drift read each link's newest reading (a changed link comes alone
between full rounds), a newest-row-per-key scan of ``nvlink_sample`` per read. Columns are the
raw tables' at this revision (frozen below).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNTER = sa.Numeric(20, 0).with_variant(sa.String(20), "sqlite")
Columns = tuple[tuple[str, sa.types.TypeEngine], ...]
#: Raw table → (key columns after the owner, value columns), at 0013.
TABLES_0013: dict[str, tuple[Columns, Columns]] = {
    "disk_sample": (
        (("device", sa.String(64)),),
        (
            ("read_bytes_per_s", sa.Double()),
            ("write_bytes_per_s", sa.Double()),
            ("read_iops", sa.Double()),
            ("write_iops", sa.Double()),
            ("busy_pct", sa.Double()),
            ("avg_wait_s", sa.Double()),
        ),
    ),
    "mount_sample": (
        (("mountpoint", sa.String(512)),),
        (
            ("device", sa.String(256)),
            ("fstype", sa.String(32)),
            ("used_bytes", sa.BigInteger()),
            ("total_bytes", sa.BigInteger()),
        ),
    ),
    "nfs_sample": (
        (("mountpoint", sa.String(512)),),
        (
            ("export", sa.String(512)),
            ("version", sa.String(16)),
            ("read_bytes", COUNTER),
            ("write_bytes", COUNTER),
            ("ops", COUNTER),
            ("retransmits", COUNTER),
            ("read_bytes_per_s", sa.Double()),
            ("write_bytes_per_s", sa.Double()),
            ("ops_per_s", sa.Double()),
            ("retransmits_per_s", sa.Double()),
            ("avg_rtt_s", sa.Double()),
        ),
    ),
    "nic_port_sample": (
        (("device", sa.String(64)), ("port", sa.Integer())),
        (
            ("link_layer", sa.String(32)),
            ("state", sa.String(32)),
            ("phys_state", sa.String(32)),
            ("rate_gbps", sa.Double()),
            ("tx_bytes_per_s", sa.Double()),
            ("rx_bytes_per_s", sa.Double()),
            ("symbol_error_count", sa.BigInteger()),
            ("link_downed_count", sa.BigInteger()),
            ("link_error_recovery_count", sa.BigInteger()),
            ("port_rcv_errors_count", sa.BigInteger()),
            ("port_xmit_discards_count", sa.BigInteger()),
        ),
    ),
    "nvlink_sample": (
        (("link", sa.Integer()),),
        (
            ("state", sa.String(16)),
            ("speed_gbps", sa.Double()),
            ("remote_pci_bus_id", sa.String(32)),
            ("remote_device_type", sa.String(16)),
            ("tx_bytes_per_s", sa.Double()),
            ("rx_bytes_per_s", sa.Double()),
            ("crc_errors", sa.BigInteger()),
            ("replay_errors", sa.BigInteger()),
            ("recovery_errors", sa.BigInteger()),
        ),
    ),
}
#: The owner column of each raw table (a node's, but a GPU's NVLinks).
OWNERS = {"nvlink_sample": ("gpu_id", "gpu")}


def _fill(raw: str, keys: Sequence[str], values: Sequence[str], postgres: bool) -> str:
    """The newest raw row of each key into ``<raw>_latest``."""
    owner, _ = OWNERS.get(raw, ("node_id", "node"))
    key_cols = ", ".join((owner, *keys))
    names = ", ".join((*keys, "sampled_at", *values))
    if postgres:
        return (
            f"INSERT INTO {raw}_latest ({owner}, {names}) "
            f"SELECT DISTINCT ON ({key_cols}) {owner}, {names} FROM {raw} "
            f"ORDER BY {key_cols}, sampled_at DESC"
        )
    on = " AND ".join(f"r.{k} = n.{k}" for k in (owner, *keys))
    return (
        f"INSERT INTO {raw}_latest ({owner}, {names}) "
        f"SELECT {', '.join(f'r.{c}' for c in (owner, *keys, 'sampled_at', *values))} "
        f"FROM {raw} r JOIN (SELECT {key_cols}, max(sampled_at) AS newest FROM {raw} "
        f"GROUP BY {key_cols}) n ON {on} AND r.sampled_at = n.newest"
    )


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for raw, (keys, values) in TABLES_0013.items():
        table = f"{raw}_latest"
        owner, parent = OWNERS.get(raw, ("node_id", "node"))
        op.create_table(
            table,
            sa.Column(owner, sa.Integer(), nullable=False),
            *(sa.Column(name, kind, nullable=False) for name, kind in keys),
            sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
            *(sa.Column(name, kind, nullable=True) for name, kind in values),
            sa.ForeignKeyConstraint(
                [owner],
                [f"{parent}.id"],
                name=op.f(f"fk_{table}_{owner}_{parent}"),
                ondelete="CASCADE",
            ),
            sa.PrimaryKeyConstraint(owner, *(name for name, _ in keys), name=op.f(f"pk_{table}")),
        )
        op.execute(_fill(raw, [k for k, _ in keys], [v for v, _ in values], postgres))


def downgrade() -> None:
    for raw in TABLES_0013:
        op.drop_table(f"{raw}_latest")
