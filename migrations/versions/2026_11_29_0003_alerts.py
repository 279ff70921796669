"""alerts: rules, instances, events (transitions), silences, acknowledgements and runbooks

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 18:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "alert_rule",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("owner_team", sa.String(length=128), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=512), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_rule")),
        sa.UniqueConstraint("name", name=op.f("uq_alert_rule_name")),
    )
    op.create_table(
        "alert_instance",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=32), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("active_since", TS, nullable=True),
        sa.Column("last_active_at", TS, nullable=True),
        sa.Column("fired_at", TS, nullable=True),
        sa.Column("resolved_at", TS, nullable=True),
        sa.Column("last_evaluated_at", TS, nullable=False),
        sa.Column("silenced", sa.Boolean(), nullable=False),
        sa.Column("acked", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["rule_id"],
            ["alert_rule.id"],
            name=op.f("fk_alert_instance_rule_id_alert_rule"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_instance")),
        sa.UniqueConstraint("rule_id", "fingerprint", name="uq_alert_instance_rule_id_fingerprint"),
    )
    op.create_index("ix_alert_instance_state", "alert_instance", ["state"])
    op.create_table(
        "alert_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.Integer(), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=False),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("silenced", sa.Boolean(), nullable=False),
        sa.Column("acked", sa.Boolean(), nullable=False),
        sa.Column("notified_at", TS, nullable=True),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["alert_instance.id"],
            name=op.f("fk_alert_event_instance_id_alert_instance"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["rule_id"],
            ["alert_rule.id"],
            name=op.f("fk_alert_event_rule_id_alert_rule"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_event")),
    )
    op.create_index("ix_alert_event_instance_id_at", "alert_event", ["instance_id", "at"])
    op.create_index("ix_alert_event_at", "alert_event", ["at"])
    op.create_table(
        "alert_silence",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("starts_at", TS, nullable=False),
        sa.Column("ends_at", TS, nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_silence")),
    )
    op.create_index(op.f("ix_alert_silence_ends_at"), "alert_silence", ["ends_at"])
    op.create_table(
        "alert_ack",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["alert_instance.id"],
            name=op.f("fk_alert_ack_instance_id_alert_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_ack")),
    )
    op.create_index(op.f("ix_alert_ack_instance_id"), "alert_ack", ["instance_id"])
    op.create_table(
        "runbook",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("markdown", sa.Text(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_runbook")),
    )


def downgrade() -> None:
    op.drop_table("runbook")
    op.drop_index(op.f("ix_alert_ack_instance_id"), table_name="alert_ack")
    op.drop_table("alert_ack")
    op.drop_index(op.f("ix_alert_silence_ends_at"), table_name="alert_silence")
    op.drop_table("alert_silence")
    op.drop_index("ix_alert_event_at", table_name="alert_event")
    op.drop_index("ix_alert_event_instance_id_at", table_name="alert_event")
    op.drop_table("alert_event")
    op.drop_index("ix_alert_instance_state", table_name="alert_instance")
    op.drop_table("alert_instance")
    op.drop_table("alert_rule")
