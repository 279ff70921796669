"""topology drift state: the fleet's drift computed in the background, read by the pages

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 14:30:00.000000

Empty at upgrade: until the server's drift job has stored one, the pages compute drift on read.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)
    op.create_table(
        "topology_drift_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("computed_at", ts, nullable=False),
        sa.Column("topology_seen_at", ts, nullable=True),
        sa.Column("document", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_topology_drift_state"),
    )


def downgrade() -> None:
    op.drop_table("topology_drift_state")
