"""raw sample tables without foreign keys to node and gpu

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-11 09:00:00.000000

Postgres checked each raw sample row's foreign key with a query per row: at 1,686 rows a batch
(bench/ingest_rate.py) that was a third of the ingest's statement time. The ingest writes rows
only for the node and GPUs it has just upserted under the node's row lock, and nothing deletes
a node or GPU (``app.series.tables``). Blocks, rollups and current readings keep theirs. The
downgrade deletes rows whose node or GPU is gone, then restores the constraints.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: table → (column, referenced table)
RAW = {
    "gpu_sample": ("gpu_id", "gpu"),
    "nvlink_sample": ("gpu_id", "gpu"),
    "disk_sample": ("node_id", "node"),
    "mount_sample": ("node_id", "node"),
    "nfs_sample": ("node_id", "node"),
    "nic_port_sample": ("node_id", "node"),
}


def upgrade() -> None:
    for table, (column, target) in RAW.items():
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_{column}_{target}", type_="foreignkey")


def downgrade() -> None:
    for table, (column, target) in RAW.items():
        op.execute(f"DELETE FROM {table} WHERE {column} NOT IN (SELECT id FROM {target})")
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(
                f"fk_{table}_{column}_{target}", target, [column], ["id"], ondelete="CASCADE"
            )
