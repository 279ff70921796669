"""node_lifecycle, lifecycle_transition, node_action: quarantine and return to service

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-14 09:00:00.000000

A node's lifecycle (in service → quarantined → remediating → validating → in service, or RMA),
every transition with its cause, and the action log of the scheduler commands transitions ask
for (Slurm drain / resume). Empty at upgrade: every node is in service.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "lifecycle_transition",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=False),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("cause", sa.String(16), nullable=False),
        sa.Column("cause_ref", sa.String(64), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_lifecycle_transition_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lifecycle_transition")),
    )
    op.create_index("ix_lifecycle_transition_node_id_at", "lifecycle_transition", ["node_id", "at"])
    op.create_table(
        "node_lifecycle",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("cause", sa.String(16), nullable=False),
        sa.Column("cause_ref", sa.String(64), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("transition_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name=op.f("fk_node_lifecycle_node_id_node"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_node_lifecycle")),
    )
    op.create_index("ix_node_lifecycle_state", "node_lifecycle", ["state"])
    op.create_table(
        "node_action",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("transition_id", sa.Integer(), nullable=True),
        sa.Column("system", sa.String(16), nullable=False),
        sa.Column("verb", sa.String(16), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("command", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("returncode", sa.Integer(), nullable=True),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_node_action_node_id_node"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["transition_id"],
            ["lifecycle_transition.id"],
            name=op.f("fk_node_action_transition_id_lifecycle_transition"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_action")),
    )
    op.create_index(
        "ix_node_action_node_id_requested_at", "node_action", ["node_id", "requested_at"]
    )
    op.create_index(
        "ix_node_action_status_next_attempt_at", "node_action", ["status", "next_attempt_at"]
    )


def downgrade() -> None:
    op.drop_table("node_action")
    op.drop_table("node_lifecycle")
    op.drop_table("lifecycle_transition")
