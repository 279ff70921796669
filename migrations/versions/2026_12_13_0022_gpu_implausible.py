"""gpu implausible: the metrics of a GPU's newest sample that the server dropped as implausible

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-13 10:00:00.000000

A null value had one look on the pages whether the GPU does not support the metric, the server
dropped an impossible reading (65535 °C) or the agent did not send it. The newest sample's
dropped metrics are now kept per GPU (metric → sampled_at), beside ``unavailable`` (the
driver's reason for what it cannot read).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpu") as batch:
        batch.add_column(sa.Column("implausible", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place, not batch mode: a batch copy of ``gpu`` would cascade deletes (see 0018).
    op.execute("ALTER TABLE gpu DROP COLUMN implausible")
