"""automation_decision, circuit_breaker: rules that quarantine nodes, within limits

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-14 11:00:00.000000

A rule may ask for ``action: quarantine`` (recommend, automatic or dry_run); every firing alert
of such a rule gets one decision. The circuit breaker stops automatic quarantine when too many
nodes went at once, until a person resets it. Empty at upgrade: no rule has an action yet.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "automation_decision",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("alert_event_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=True),
        sa.Column("hostname", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("transition_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["alert_event_id"],
            ["alert_event.id"],
            name=op.f("fk_automation_decision_alert_event_id_alert_event"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_automation_decision_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["transition_id"],
            ["lifecycle_transition.id"],
            name=op.f("fk_automation_decision_transition_id_lifecycle_transition"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_automation_decision")),
        sa.UniqueConstraint("alert_event_id", name=op.f("uq_automation_decision_alert_event_id")),
    )
    op.create_index("ix_automation_decision_at", "automation_decision", ["at"])
    op.create_table(
        "circuit_breaker",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("open", sa.Boolean(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("reset_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reset_by", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_circuit_breaker")),
    )


def downgrade() -> None:
    op.drop_table("circuit_breaker")
    op.drop_table("automation_decision")
