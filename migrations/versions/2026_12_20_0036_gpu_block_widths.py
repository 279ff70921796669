"""GPU blocks of slowly sampled series are 6 hours wide: ``gpu_sample_block.block_s``

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-20 09:00:00.000000

An hour block of 60-s samples holds 60 values per array, too few for pglz: 2.05 bytes per value
(1.40 × Prometheus 2.42) where hour blocks of 10-s samples take 1.20. Compaction now packs a
GPU whose samples come 30 s apart or more into 6-hour blocks and records the width per row
(``block_s``: NULL for an hour block, as every block packed before; 21600 for a 6-hour block,
``app.series.blocks.WIDE_BLOCK_S``). The downgrade turns the wide blocks back into raw rows
(Postgres), which the previous revision's compaction packs into hour blocks again.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Columns of a block that are not a metric's array.
META = {"gpu_id", "block_start", "sample_count", "received_until", "block_s"}
#: Stepped columns' scales (revision 0016): ``<name>_steps`` holds ``<name>`` × scale as steps.
SCALES = {"energy_j": 1000}


def upgrade() -> None:
    with op.batch_alter_table("gpu_sample_block") as batch:
        batch.add_column(sa.Column("block_s", sa.Integer(), nullable=True))


def _unpack_wide(metrics: Sequence[str], stepped: Sequence[str]) -> str:
    """Rows of the blocks with a ``block_s`` into ``gpu_sample`` (a block's value wins over a
    raw duplicate, as compaction's re-open does)."""
    arrays = ", ".join(f"b.{c}" for c in ("sampled_at_delta_us", *metrics))
    steps = "".join(f", b.{c}_steps" for c in stepped)
    alias = ", ".join(("dt_us", *metrics, *(f"{c}_steps" for c in stepped)))
    values = ", ".join(
        f"coalesce(d.{c}, CAST(CAST(sum(d.{c}_steps) OVER (ORDER BY d.ord) AS bigint) AS float8)"
        f" / {SCALES[c]}::float8) AS {c}"
        if c in stepped
        else f"d.{c}"
        for c in metrics
    )
    names = ", ".join(metrics)
    updates = ", ".join(f"{c} = excluded.{c}" for c in (*metrics, "received_at"))
    return (
        f"INSERT INTO gpu_sample (gpu_id, sampled_at, received_at, {names}) "
        "SELECT b.gpu_id, b.block_start + u.offset_us * interval '1 microsecond', "
        f"b.received_until, {', '.join(f'u.{c}' for c in metrics)} "
        "FROM gpu_sample_block b, LATERAL ("
        f"SELECT sum(d.dt_us) OVER (ORDER BY d.ord) AS offset_us, {values} "
        f"FROM unnest({arrays}{steps}) WITH ORDINALITY AS d({alias}, ord)) u "
        "WHERE b.block_s IS NOT NULL "
        f"ON CONFLICT (gpu_id, sampled_at) DO UPDATE SET {updates}"
    )


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        columns = [c["name"] for c in sa.inspect(bind).get_columns("gpu_sample_block")]
        stepped = [c.removesuffix("_steps") for c in columns if c.endswith("_steps")]
        metrics = [
            c
            for c in columns
            if c not in META and c != "sampled_at_delta_us" and not c.endswith("_steps")
        ]
        op.execute(_unpack_wide(metrics, stepped))
        op.execute("DELETE FROM gpu_sample_block WHERE block_s IS NOT NULL")
    with op.batch_alter_table("gpu_sample_block") as batch:
        batch.drop_column("block_s")
