"""a login session's last request and origin: ``user_session.last_seen_at`` (the idle
timeout), ``user_session.via_sso`` (a logout also ends the identity provider's session)

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-19 10:00:00.000000
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("user_session") as batch:
        batch.add_column(sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("via_sso", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    # Open sessions count as seen at the upgrade: a NULL counts from the login, and a session
    # opened 9 hours ago and in use since would end at once (idle for the 8-hour default).
    now = datetime.now(UTC)
    if op.get_bind().dialect.name == "sqlite":
        now = now.replace(tzinfo=None)  # stored as naive UTC there (app.db.UTCDateTime)
    sessions = sa.table(
        "user_session",
        sa.column("last_seen_at", sa.DateTime(timezone=True)),
        sa.column("expires_at", sa.DateTime(timezone=True)),
        sa.column("revoked_at", sa.DateTime(timezone=True)),
    )
    op.execute(
        sessions.update()
        .where(sessions.c.revoked_at.is_(None), sessions.c.expires_at > now)
        .values(last_seen_at=now)
    )


def downgrade() -> None:
    with op.batch_alter_table("user_session") as batch:
        batch.drop_column("via_sso")
        batch.drop_column("last_seen_at")
