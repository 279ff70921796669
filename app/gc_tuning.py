"""The garbage collector's thresholds for a server process.

A fleet page at 5,000 nodes makes tens of thousands of objects that live through the request
(node states, parsed answers, tiles), so with CPython's default thresholds (700, 10, 10) many
survive two young collections, reach the oldest generation, and trigger a full collection every
other request that walks every cached answer and tile of the process: 240 ms of a 200-ms page
(measured with ``gc.callbacks``). Most of a request's garbage is freed by reference counting
anyway; collecting the young generation every 10,000 allocations instead of every 700 lets those
objects die young, and full collections come about 50 times less often.

An alert evaluation at 1,000 nodes allocates a few hundred thousand objects that live until it
ends (active instance rows, observations, their labels): even with those thresholds the
collections it triggered walked them and every long-lived object of the process, ~0.4 s of a
2-s evaluation. :func:`collection_paused` holds the cyclic collector off while it runs;
reference counting still frees everything that forms no cycle, and the collector resumes, with
its counts, when the last paused section ends.

An ingest batch is the same case in small: decoding a 60-tick HGX batch makes ~15,000 lists,
dicts and tuples that live until it is stored, so with the thresholds above a young collection
ran about once a batch and walked every batch then in flight (16 concurrent agents: 4.4 ms per
collection, a quarter of the server's CPU at 20,000 GPU samples/s, measured with
``gc.callbacks``). The ingest pauses the collector too. Under a steady stream of overlapping
sections the collector might never be enabled again, so a section that ends after the collector
has been off for :data:`MAX_PAUSE_S` collects the young generation once (cyclic garbage, from
sessions and tracebacks, then waits at most that long for a collection).
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: (generation 0 allocations, generation 1 and 2 collection counts): see the module docstring.
THRESHOLDS = (10_000, 50, 50)
#: Longest the collector stays off under overlapping paused sections before the section ending
#: then collects the young generation (seconds). Such a collection walks every batch then in
#: flight (~50 ms at 16 concurrent 60-tick batches), so not often; cyclic garbage waits as long.
MAX_PAUSE_S = 10.0


def tune_gc() -> None:
    """Set :data:`THRESHOLDS`, process-wide."""
    gc.set_threshold(*THRESHOLDS)


class _Pauses:
    """How many :func:`collection_paused` sections are open, and whether the collector was
    enabled when the first of them began."""

    lock = threading.Lock()
    open = 0
    was_enabled = True
    #: ``time.monotonic()`` when the collector was last disabled or made to collect.
    since = 0.0


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the ``with`` block, process-wide. Sections may
    overlap across threads (an event-lane wake-up during a timer pass, concurrent ingest
    batches): the collector is enabled again when the last one ends, and only if it was enabled
    when the first began; a section ending while others still run, the collector off for
    :data:`MAX_PAUSE_S` or more, collects the young generation once."""
    with _Pauses.lock:
        if _Pauses.open == 0:
            _Pauses.was_enabled = gc.isenabled()
            _Pauses.since = time.monotonic()
            gc.disable()
        _Pauses.open += 1
    try:
        yield
    finally:
        overdue = False
        with _Pauses.lock:
            _Pauses.open -= 1
            if _Pauses.open == 0 and _Pauses.was_enabled:
                gc.enable()
            elif _Pauses.was_enabled and time.monotonic() - _Pauses.since >= MAX_PAUSE_S:
                _Pauses.since, overdue = time.monotonic(), True
        if overdue:
            gc.collect(0)


def without_collection(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run inside :func:`collection_paused`."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with collection_paused():
            return fn(*args, **kwargs)

    return run
