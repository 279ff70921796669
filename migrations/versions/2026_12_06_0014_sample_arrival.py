"""sample arrival feed: what the ingest stored since the alert evaluator last read, so its
recent GPU windows read only new rows

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 09:00:00.000000

The evaluator scanned every GPU's widest rule window each tick (464,000 raw rows at 1,000
nodes, ~1 s of a 10-s interval). It now keeps those rows in memory and takes the new ones from
this queue (``app.series.arrivals``): one row per GPU and batch naming the ``sampled_at``
range stored, appended by the ingest in the same transaction, removed by the reader with
``DELETE … RETURNING``. Empty at upgrade: the reader loads whole on its first tick.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sample_arrival",
        sa.Column("series", sa.String(32), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "arrived_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("CURRENT_TIMESTAMP"),
        ),
    )


def downgrade() -> None:
    op.drop_table("sample_arrival")
