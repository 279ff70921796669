"""Scheduled jobs that must run once per database, whatever the number of server processes:
each run takes a Postgres session-level advisory lock named after the job on a connection of
its own, and a process that does not get it skips that run (another one is running it). SQLite
is one process: the job always runs."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    digest = hashlib.blake2b(f"fleetwatch job {name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def once_per_database(engine: Engine, name: str, job: Callable[..., Any]) -> Callable[..., None]:
    """``job`` wrapped to run only while this process holds the lock ``name`` (Postgres), the
    lock released when it returns. Errors taking the lock are logged, never raised into the
    scheduler (``job`` does its own error handling)."""
    if engine.dialect.name != "postgresql":
        return job
    key = lock_key(name)

    def run(*args: Any, **kwargs: Any) -> None:
        try:
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except Exception:
            log.exception("job %s: no database connection to take its lock", name)
            return
        try:
            if not conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}):
                log.debug("job %s runs in another process: skipped", name)
                return
            try:
                job(*args, **kwargs)
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        except Exception:
            log.exception("job %s: taking or releasing its lock failed", name)
        finally:
            conn.close()

    return run


@contextmanager
def holding(engine: Engine, name: str) -> Iterator[None]:
    """Hold the lock ``name`` for the ``with`` block, waiting for a server process that runs
    the same job to finish its run first (a CLI doing a job's work by hand: ``fleetwatch
    rollups rebuild`` while servers fold). No-op on SQLite."""
    if engine.dialect.name != "postgresql":
        yield
        return
    key = lock_key(name)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
