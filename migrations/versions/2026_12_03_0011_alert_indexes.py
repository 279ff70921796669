"""alert indexes: a rule's unseen events and its active instances, without scanning every rule's

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 19:40:00.000000

``enqueue_events`` looks up ``rule_id = ? AND at = ? AND notified_at IS NULL`` once per rule
with transitions. Through ``ix_alert_event_at`` that visited every event of the tick for every
rule: 500 rules × 9,000 events of a mass transition took ~75 s of one evaluation. The partial
index holds only events the notifier has not seen yet, so it stays tiny.

Each rule also reads its pending and firing instances every tick: through
``ix_alert_instance_state`` that visited every active instance of every rule (18,000 at 500
rules × 8,000 GPUs) for each rule; ``(rule_id, state)`` reads only the rule's own.
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
    op.create_index("ix_alert_instance_rule_id_state", "alert_instance", ["rule_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_alert_instance_rule_id_state", table_name="alert_instance")
    op.drop_index("ix_alert_event_unnotified", table_name="alert_event")
