"""alert inhibition rules (Alertmanager ``inhibit_rules``)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-09 09:00:00.000000

While an alert matching a rule's source is firing, alerts matching its target with the same
values of its ``equal`` labels are not notified (``app.alerts.inhibition``). Empty at upgrade:
``fleetwatch rules apply --defaults`` (and the demo) install the default set.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alert_inhibit_rule",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(512), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_inhibit_rule")),
        sa.UniqueConstraint("name", name=op.f("uq_alert_inhibit_rule_name")),
    )


def downgrade() -> None:
    op.drop_table("alert_inhibit_rule")
