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
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: (generation 0 allocations, generation 1 and 2 collection counts): see the module docstring.
THRESHOLDS = (10_000, 50, 50)


def tune_gc() -> None:
    """Set :data:`THRESHOLDS`, process-wide."""
    gc.set_threshold(*THRESHOLDS)


class _Pauses:
    """How many :func:`collection_paused` sections are open, and whether the collector was
    enabled when the first of them began."""

    lock = threading.Lock()
    open = 0
    was_enabled = True


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the ``with`` block, process-wide. Sections may
    overlap across threads (an event-lane wake-up during a timer pass): the collector is
    enabled again when the last one ends, and only if it was enabled when the first began."""
    with _Pauses.lock:
        if _Pauses.open == 0:
            _Pauses.was_enabled = gc.isenabled()
            gc.disable()
        _Pauses.open += 1
    try:
        yield
    finally:
        with _Pauses.lock:
            _Pauses.open -= 1
            if _Pauses.open == 0 and _Pauses.was_enabled:
                gc.enable()


def without_collection(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run inside :func:`collection_paused`."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with collection_paused():
            return fn(*args, **kwargs)

    return run
