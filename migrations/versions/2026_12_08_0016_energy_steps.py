"""GPU blocks: energy as whole-millijoule steps

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-08 09:00:00.000000

``energy_j`` is NVML's millijoule counter over 1000: as doubles an hour block of it took 8
bytes per value that pglz could not shrink, a fifth of a GPU block at 10-s samples. Blocks
packed from now on keep it, where exact, as integer steps in ``energy_j_steps`` and ``NULL`` in
``energy_j`` (``app.series.blocks.GPU_STEPPED``); blocks packed before keep their doubles and
read as they did. The downgrade turns stepped blocks back into doubles.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INTEGERS = sa.ARRAY(sa.BigInteger()).with_variant(sa.Text(), "sqlite")
FLOATS = sa.ARRAY(sa.Double()).with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("gpu_sample_block") as batch:
        batch.add_column(sa.Column("energy_j_steps", INTEGERS, nullable=True))
        batch.alter_column("energy_j", existing_type=FLOATS, nullable=True)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "UPDATE gpu_sample_block b SET energy_j = ("
            " SELECT array_agg(CAST(CAST(d.total AS bigint) AS float8) / 1000::float8"
            "  ORDER BY d.ord)"
            " FROM (SELECT sum(s) OVER (ORDER BY ord) AS total, ord"
            "  FROM unnest(b.energy_j_steps) WITH ORDINALITY AS u(s, ord)) d)"
            " WHERE b.energy_j IS NULL"
        )
    with op.batch_alter_table("gpu_sample_block") as batch:
        batch.alter_column("energy_j", existing_type=FLOATS, nullable=False)
        batch.drop_column("energy_j_steps")
