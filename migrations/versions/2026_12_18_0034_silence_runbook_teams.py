"""silences and runbook edits belong to teams: ``alert_silence.team``, ``runbook.team``

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-18 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing silences and runbook edits stay shared (no team), as they were.
    with op.batch_alter_table("alert_silence") as batch:
        batch.add_column(sa.Column("team", sa.String(128), nullable=True))
    with op.batch_alter_table("runbook") as batch:
        batch.add_column(sa.Column("team", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runbook") as batch:
        batch.drop_column("team")
    with op.batch_alter_table("alert_silence") as batch:
        batch.drop_column("team")
