"""node health state: each node's health as last evaluated, kept current as batches arrive

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 14:00:00.000000

Empty at upgrade: the first refresh (a server's job, within seconds of start) fills it, and
until a node has a row its health is evaluated on read as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)
    op.create_table(
        "node_health_state",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", ts, nullable=False),
        sa.Column("seen_at", ts, nullable=True),
        sa.Column("evaluated_at", ts, nullable=False),
        sa.Column("digest", sa.String(32), nullable=False),
        sa.Column("doc", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"],
            ["node.id"],
            name="fk_node_health_state_node_id_node",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("node_id", name="pk_node_health_state"),
    )
    op.create_index("ix_node_health_state_version", "node_health_state", ["version"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE SEQUENCE node_health_state_version_seq")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP SEQUENCE IF EXISTS node_health_state_version_seq")
    op.drop_index("ix_node_health_state_version", table_name="node_health_state")
    op.drop_table("node_health_state")
