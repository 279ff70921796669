"""gpu implausible_inventory: the inventory fields of a GPU the server left out of its latest batch

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-16 10:00:00.000000

One impossible inventory value (a total memory of 2**64-1, NVML's "not available" as an
unsigned 64-bit) refused the whole batch. The server now stores such a field as null and keeps
the value sent by field (field → JSON text), beside ``implausible`` (the newest sample's
dropped metrics), so the GPU's page can say why the value is missing.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpu") as batch:
        batch.add_column(sa.Column("implausible_inventory", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place, not batch mode: a batch copy of ``gpu`` would cascade deletes (see 0018).
    op.execute("ALTER TABLE gpu DROP COLUMN implausible_inventory")
