"""incident, incident_event: one node's related fault events grouped into incidents

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-12 09:00:00.000000

``app.incidents`` groups a node's Xid and lost-GPU events that come within the quiet period of
each other into one incident. Empty at upgrade: events stored before it are grouped as the
node's next batch with events arrives (the grouping looks back a day), older ones never.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "incident",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event_count", sa.Integer(), nullable=False),
        sa.Column("gpu_indexes", sa.JSON(), nullable=False),
        sa.Column("xids", sa.JSON(), nullable=False),
        sa.Column("kinds", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("job_fatal", sa.Boolean(), nullable=False),
        sa.Column("action_code", sa.String(32), nullable=False),
        sa.Column("action_text", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"], ["node.id"], name=op.f("fk_incident_node_id_node"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incident")),
    )
    op.create_index("ix_incident_node_id_last_event_at", "incident", ["node_id", "last_event_at"])
    op.create_index("ix_incident_last_event_at", "incident", ["last_event_at"])
    op.create_table(
        "incident_event",
        sa.Column("event_id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["node_event.id"],
            name=op.f("fk_incident_event_event_id_node_event"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incident.id"],
            name=op.f("fk_incident_event_incident_id_incident"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_incident_event")),
    )
    op.create_index("ix_incident_event_incident_id", "incident_event", ["incident_id"])


def downgrade() -> None:
    op.drop_index("ix_incident_event_incident_id", table_name="incident_event")
    op.drop_table("incident_event")
    op.drop_index("ix_incident_last_event_at", table_name="incident")
    op.drop_index("ix_incident_node_id_last_event_at", table_name="incident")
    op.drop_table("incident")
