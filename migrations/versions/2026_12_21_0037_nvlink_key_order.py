"""``nvlink_sample``: primary key (gpu_id, sampled_at, link), its (gpu_id, sampled_at) index gone

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-21 09:00:00.000000

With the key in this order one index serves every reader of the raw NVLink table: a GPU's
readings over a time range (charts, ``links_up_after``, compaction's newest reading per GPU
and its rows before the horizon) are a range of its prefix, and one link's (compaction's
re-open) the same range filtered by link, 18 entries per time at most. The index on
(gpu_id, sampled_at) it made redundant cost Postgres a third of the index work of each of the
1,440 NVLink rows of a 60-tick batch at the agent's defaults (``bench/ingest_inprocess.py``).
Measured in turns against revision 0036 (60-tick agent batches, 250-300 each): Postgres's CPU
per batch 0.82-0.89 of before, the server's unchanged. The key in this order is larger (a
GPU's range grows at its right end, so the pages it splits stay half full): 213 against 197
bytes per raw NVLink row with every index, on raw rows only, which compaction packs into
6-hour blocks within hours. The raw table holds those hours only, so the key is rebuilt in
place (at 1,000 HGX nodes, tens of millions of rows: minutes, while the agents spool).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nvlink_sample") as batch:
        batch.drop_index("ix_nvlink_sample_gpu_id_sampled_at")
        batch.drop_constraint("pk_nvlink_sample", type_="primary")
        batch.create_primary_key("pk_nvlink_sample", ["gpu_id", "sampled_at", "link"])


def downgrade() -> None:
    with op.batch_alter_table("nvlink_sample") as batch:
        batch.drop_constraint("pk_nvlink_sample", type_="primary")
        batch.create_primary_key("pk_nvlink_sample", ["gpu_id", "link", "sampled_at"])
        batch.create_index("ix_nvlink_sample_gpu_id_sampled_at", ["gpu_id", "sampled_at"])
