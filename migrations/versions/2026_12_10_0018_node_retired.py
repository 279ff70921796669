"""node retired_at / retired_reason: nodes an operator took out of the fleet

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-10 09:00:00.000000

A decommissioned node stayed Unknown with a critical "no telemetry" alert forever. A retired
node (``app.fleet.retire``) leaves the fleet's lists, counts, health and alert evaluation; its
history stays. NULL (every node at upgrade): in service.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("node") as batch:
        batch.add_column(sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("retired_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    # Not batch mode: on SQLite it would copy and drop ``node``, and the drop deletes every row
    # that references a node (gpu, tokens, samples …: ON DELETE CASCADE). SQLite ≥ 3.35 and
    # Postgres drop a column in place.
    op.execute("ALTER TABLE node DROP COLUMN retired_reason")
    op.execute("ALTER TABLE node DROP COLUMN retired_at")
