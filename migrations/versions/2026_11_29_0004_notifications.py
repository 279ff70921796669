"""notifications: channels, routes and the delivery outbox

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 19:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "notify_channel",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=True),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("url_encrypted", sa.Text(), nullable=False),
        sa.Column("secret_encrypted", sa.Text(), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("broken", sa.Boolean(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_channel")),
        sa.UniqueConstraint("name", name=op.f("uq_notify_channel_name")),
    )
    op.create_table(
        "notify_route",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=True),
        sa.Column("severities", sa.JSON(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("group_by", sa.JSON(), nullable=False),
        sa.Column("group_wait_s", sa.Float(), nullable=False),
        sa.Column("repeat_interval_s", sa.Float(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["notify_channel.id"],
            name=op.f("fk_notify_route_channel_id_notify_channel"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_route")),
    )
    op.create_index(op.f("ix_notify_route_channel_id"), "notify_route", ["channel_id"])
    op.create_table(
        "notify_delivery",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("route_id", sa.Integer(), nullable=True),
        sa.Column("group_key", sa.String(length=512), nullable=False),
        sa.Column("instance_id", sa.Integer(), nullable=True),
        sa.Column("event_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("not_before", TS, nullable=False),
        sa.Column("leased_until", TS, nullable=True),
        sa.Column("deadline_at", TS, nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("delivered_at", TS, nullable=True),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["notify_channel.id"],
            name=op.f("fk_notify_delivery_channel_id_notify_channel"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["route_id"],
            ["notify_route.id"],
            name=op.f("fk_notify_delivery_route_id_notify_route"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["alert_instance.id"],
            name=op.f("fk_notify_delivery_instance_id_alert_instance"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["alert_event.id"],
            name=op.f("fk_notify_delivery_event_id_alert_event"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notify_delivery")),
    )
    op.create_index(
        "ix_notify_delivery_status_not_before", "notify_delivery", ["status", "not_before"]
    )
    op.create_index(
        "ix_notify_delivery_instance_id_channel_id",
        "notify_delivery",
        ["instance_id", "channel_id"],
    )
    op.create_index(
        "ix_notify_delivery_channel_id_created_at",
        "notify_delivery",
        ["channel_id", "created_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_notify_delivery_channel_id_created_at", table_name="notify_delivery")
    op.drop_index("ix_notify_delivery_instance_id_channel_id", table_name="notify_delivery")
    op.drop_index("ix_notify_delivery_status_not_before", table_name="notify_delivery")
    op.drop_table("notify_delivery")
    op.drop_index(op.f("ix_notify_route_channel_id"), table_name="notify_route")
    op.drop_table("notify_route")
    op.drop_table("notify_channel")
