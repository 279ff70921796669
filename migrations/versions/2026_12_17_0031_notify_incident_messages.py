"""notify incident messages: the incident of each delivery row, and the chat message posted for
an incident on a channel that can edit it

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-17 10:00:00.000000

``notify_delivery.incident_id`` is the incident (app.incidents) the row's alert belongs to, so
every notice of one incident goes to the same message. ``notify_incident_message`` keeps the
reference of that message per channel (Slack's channel and ``ts``, Discord's message id) so
later changes update it, what of the incident it last told (``seen``: GPUs, Xids, state) and
when the incident's close was told. Rows already in the outbox
have no incident: they are sent as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)
    with op.batch_alter_table("notify_delivery", schema=None) as batch_op:
        batch_op.add_column(sa.Column("incident_id", sa.Integer(), nullable=True))
        batch_op.create_index(
            "ix_notify_delivery_incident_id_channel_id", ["incident_id", "channel_id"]
        )
    op.create_table(
        "notify_incident_message",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("ref", sa.JSON(), nullable=False),
        sa.Column("posted_at", ts, nullable=False),
        sa.Column("updated_at", ts, nullable=False),
        sa.Column("updates", sa.Integer(), nullable=False),
        sa.Column("seen", sa.String(length=512), nullable=False),
        sa.Column("closed_told_at", ts, nullable=True),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["notify_channel.id"],
            name=op.f("fk_notify_incident_message_channel_id_notify_channel"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incident.id"],
            name=op.f("fk_notify_incident_message_incident_id_incident"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_incident_message")),
        sa.UniqueConstraint(
            "channel_id", "incident_id", name=op.f("uq_notify_incident_message_channel_id")
        ),
    )


def downgrade() -> None:
    op.drop_table("notify_incident_message")
    with op.batch_alter_table("notify_delivery", schema=None) as batch_op:
        batch_op.drop_index("ix_notify_delivery_incident_id_channel_id")
        batch_op.drop_column("incident_id")
