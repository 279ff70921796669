"""maintenance_window: planned maintenance of a node or a group of nodes

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-15 10:00:00.000000

While a window is in force its nodes' alerts are muted, automation leaves them alone and the
time is left out of availability. Empty at upgrade (maintenance was a silence before).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "maintenance_window",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_by", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_maintenance_window")),
    )
    op.create_index("ix_maintenance_window_ends_at", "maintenance_window", ["ends_at"])


def downgrade() -> None:
    op.drop_index("ix_maintenance_window_ends_at", table_name="maintenance_window")
    op.drop_table("maintenance_window")
