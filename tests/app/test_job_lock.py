"""Scheduled jobs run once per database: while one process holds a job's lock, another
process's run of the same job is skipped (Postgres); SQLite (one process) always runs it."""

from __future__ import annotations

from sqlalchemy import text

from app.db import make_engine
from app.job_lock import holding, lock_key, once_per_database


def test_a_job_is_skipped_while_another_process_runs_it(db_url: str) -> None:
    engine = make_engine(db_url)
    runs: list[str] = []
    job = once_per_database(engine, "rollup-fold", lambda tag: runs.append(tag))
    other = once_per_database(engine, "series-compaction", lambda tag: runs.append(tag))
    try:
        if engine.dialect.name != "postgresql":
            job("alone")
            assert runs == ["alone"]
            return
        holding = make_engine(db_url)  # "another process" running the job
        try:
            with holding.connect() as holder:
                key = {"k": lock_key("rollup-fold")}
                holder.execute(text("SELECT pg_advisory_lock(:k)"), key)
                job("while held")
                other("other job")  # a different job's lock is free
                holder.execute(text("SELECT pg_advisory_unlock(:k)"), key)
        finally:
            holding.dispose()
        job("after")
        job("again")  # the lock was released after the previous run
        assert runs == ["other job", "after", "again"]
    finally:
        engine.dispose()


def test_lock_keys_are_stable_and_distinct() -> None:
    names = ["retention-prune", "series-compaction", "topology-drift", "rollup-fold"]
    keys = [lock_key(n) for n in names]
    assert len(set(keys)) == len(keys)
    assert all(-(2**63) <= k < 2**63 for k in keys)
    assert lock_key("rollup-fold") == lock_key("rollup-fold")


def test_a_cli_holding_a_jobs_lock_keeps_the_servers_run_of_it_off(db_url: str) -> None:
    """``fleetwatch rollups rebuild`` holds "rollup-fold": a server's fold run is skipped."""
    engine = make_engine(db_url)
    runs: list[str] = []
    job = once_per_database(engine, "rollup-fold", lambda: runs.append("server"))
    try:
        with holding(engine, "rollup-fold"):
            job()
        job()
        expected = ["server"] if engine.dialect.name == "postgresql" else ["server", "server"]
        assert runs == expected
    finally:
        engine.dispose()
