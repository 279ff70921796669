"""alert instance value_at: when an active instance's value and texts were last written

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 09:00:00.000000

A steady alert's value changes nearly every tick (a window's average moves with each sample):
rewriting it each time was thousands of instance rows updated every 10 s at 1,000 nodes. The
evaluator now refreshes a steady instance's value and texts at most once per
``app.alerts.evaluator.VALUE_REFRESH_S``, counted from this column. NULL (rows written before
this revision): refreshed at the next evaluation.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("alert_instance") as batch:
        batch.add_column(sa.Column("value_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("alert_instance") as batch:
        batch.drop_column("value_at")
