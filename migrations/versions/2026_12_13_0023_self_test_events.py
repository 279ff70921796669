"""node_event test / incident test: self-test faults marked through the alert path

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-13 11:00:00.000000

``fleetwatch-agent --once --inject-test-xid N`` sends a synthetic Xid marked ``test``; it flows
through health, rules, incidents and notifications marked TEST (docs/health.md, "Self-test").
Every stored event and incident is not a test.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("node_event", "incident"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("test", sa.Boolean(), nullable=False, server_default=sa.false())
            )


def downgrade() -> None:
    # In place, not batch mode (see revision 0018).
    op.execute("ALTER TABLE incident DROP COLUMN test")
    op.execute("ALTER TABLE node_event DROP COLUMN test")
