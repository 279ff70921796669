"""notify parts and pacing: a delivery row's message and part, truncation notes, and the pace
of each destination

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 10:00:00.000000

Rows already in the outbox get no message: the worker groups them as before on their next
attempt and numbers their parts then.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)
    with op.batch_alter_table("notify_delivery", schema=None) as batch_op:
        batch_op.add_column(sa.Column("message_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("part", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("parts", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("truncated", sa.Text(), nullable=True))
        batch_op.create_index("ix_notify_delivery_message_id", ["message_id"], unique=False)
    op.create_table(
        "notify_destination",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("next_allowed_at", ts, nullable=False),
        sa.Column("held_until", ts, nullable=True),
        sa.Column("updated_at", ts, nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_notify_destination")),
    )


def downgrade() -> None:
    op.drop_table("notify_destination")
    with op.batch_alter_table("notify_delivery", schema=None) as batch_op:
        batch_op.drop_index("ix_notify_delivery_message_id")
        batch_op.drop_column("truncated")
        batch_op.drop_column("parts")
        batch_op.drop_column("part")
        batch_op.drop_column("message_id")
