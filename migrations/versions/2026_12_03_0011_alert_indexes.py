"""alert event unnotified index: the outbox finds a rule's new events without scanning a tick's

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 19:40:00.000000

``enqueue_events`` looks up ``rule_id = ? AND at = ? AND notified_at IS NULL`` once per rule
with transitions. Through ``ix_alert_event_at`` that visited every event of the tick for every
rule: 500 rules × 9,000 events of a mass transition took ~75 s of one evaluation. The partial
index holds only events the notifier has not seen yet, so it stays tiny.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_alert_event_unnotified",
        "alert_event",
        ["rule_id", "at"],
        postgresql_where=sa.text("notified_at IS NULL"),
        sqlite_where=sa.text("notified_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_alert_event_unnotified", table_name="alert_event")
