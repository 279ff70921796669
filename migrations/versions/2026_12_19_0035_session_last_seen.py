"""a login session's last request and origin: ``user_session.last_seen_at`` (the idle
timeout), ``user_session.via_sso`` (a logout also ends the identity provider's session)

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-19 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Open sessions count as seen at their login (NULL): none ends at once on the upgrade.
    with op.batch_alter_table("user_session") as batch:
        batch.add_column(sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("via_sso", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("user_session") as batch:
        batch.drop_column("via_sso")
        batch.drop_column("last_seen_at")
