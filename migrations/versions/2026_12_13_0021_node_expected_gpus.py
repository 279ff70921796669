"""node expected_gpu_count: the GPUs a node should have, as its agent reports them

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-13 09:00:00.000000

A GPU lost before the agent started never entered the node's inventory, so nothing counted it
missing. The agent now sends how many GPUs the node has (NVIDIA display controllers on PCI, or
``fleetwatch-agent --expected-gpus``); NULL until a node's agent says.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("node") as batch:
        batch.add_column(sa.Column("expected_gpu_count", sa.Integer(), nullable=True))


def downgrade() -> None:
    # In place, not batch mode (see revision 0018: a batch copy of ``node`` cascades deletes).
    op.execute("ALTER TABLE node DROP COLUMN expected_gpu_count")
