"""The SQL-bound shared aggregates of an evaluation read ahead on a second connection, while
the evaluator's own connection and thread go on with the rest.

At 1,000 nodes a steady timer tick of 500 rules spent ~0.2 s waiting for two statements that
no in-memory path serves: the GPU rates (one primary-key probe per GPU for the window's oldest
sample, ~0.12 s) and the host windows (disk and NFS averages over raw rows, ~0.09 s). Started
when the rules are planned, they run on the database's second core while the first serves the
arrival feed and this process computes the GPU windows from memory, so a tick no longer waits
for them in turn.

Only the scheduler's whole-fleet evaluation on Postgres reads ahead (the lane that keeps GPU
samples from the arrival feed): a node-scoped wake-up reads a few rows, and SQLite has one
writer and no second core to gain. The second connection reads its own snapshot, taken a
moment after the evaluator's; each statement reads every entity's window and its node's newest
sample in that one snapshot, so a batch committed in between is in both or neither.

A slot whose read-ahead failed is read again on the evaluator's own connection, so an error
reaches the rule that asks for it, as without read-ahead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.alerts.kinds.entity_values import EntityValues

log = logging.getLogger(__name__)

Slot = tuple[str, str, float]
Need = tuple[str, str]
#: What a read-ahead returns: per slot, per need, the values.
Result = dict[Slot, dict[Need, EntityValues]]
#: One read of the plan: given a context on the second connection, its slots' values.
Read = Callable[[Any], Result]


class OnSession:
    """An evaluation context (:class:`app.series.rule_windows.RuleFleet`) whose statements run
    on ``session``: every other attribute is the context's."""

    def __init__(self, ctx: Any, session: Session) -> None:
        self._ctx = ctx
        self.session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


class ReadAhead:
    """Reads started on one worker thread, in order, each in its own transaction on a
    connection of the evaluator's engine; :meth:`take` waits for the one holding a slot."""

    def __init__(self, ctx: Any, reads: list[tuple[frozenset[Slot], Read]], work_mem: str) -> None:
        engine = ctx.session.get_bind().engine
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alert-read-ahead")
        self._futures: list[tuple[frozenset[Slot], Future[Result]]] = []

        def run(read: Read) -> Result:
            with Session(engine) as session:
                session.execute(text(f"SET LOCAL work_mem = '{work_mem}'"))
                try:
                    return read(OnSession(ctx, session))
                finally:
                    session.rollback()

        for slots, read in reads:
            self._futures.append((slots, self._pool.submit(run, read)))

    @property
    def slots(self) -> frozenset[Slot]:
        """Every slot being read ahead."""
        return frozenset(s for slots, _ in self._futures for s in slots)

    @property
    def untaken(self) -> int:
        """How many reads no caller has taken yet."""
        return len(self._futures)

    def take(self, slot: Slot) -> Result | None:
        """The values of the read holding ``slot`` (every slot of that read), once; None when
        no read holds it, it was taken already, or it failed (logged: the caller reads it
        itself)."""
        for i, (slots, future) in enumerate(self._futures):
            if slot in slots:
                del self._futures[i]
                try:
                    return future.result()
                except Exception:
                    log.warning("reading %s ahead failed; reading it again", sorted(slots),
                                exc_info=True)  # fmt: skip
                    return None
        return None

    def close(self) -> None:
        """Wait for the reads still running (their connections go back to the pool) and
        drop what nobody took."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._futures.clear()


def merged(results: Mapping[Slot, dict[Need, EntityValues]], into: dict[Slot, Any]) -> None:
    """Add ``results`` to the evaluation's cache of aggregates ``into``, slot by slot."""
    for slot, values in results.items():
        into.setdefault(slot, {}).update(values)
