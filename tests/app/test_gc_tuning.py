"""The collector pause around alert evaluations: overlapping sections across threads."""

from __future__ import annotations

import gc
import threading

import pytest

from app.gc_tuning import collection_paused, without_collection


def test_overlapping_sections_enable_the_collector_when_the_last_ends() -> None:
    assert gc.isenabled()
    inner_entered, outer_may_leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other() -> None:
        with collection_paused():
            inner_entered.set()
            outer_may_leave.wait(5)
            seen.append(gc.isenabled())  # the first section ended meanwhile

    with collection_paused():
        assert not gc.isenabled()
        thread = threading.Thread(target=other)
        thread.start()
        assert inner_entered.wait(5)
    outer_may_leave.set()
    thread.join(5)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_decorator_pauses_and_passes_results_and_errors() -> None:
    @without_collection
    def enabled_inside(x: int) -> tuple[int, bool]:
        return x + 1, gc.isenabled()

    @without_collection
    def fails() -> None:
        raise ValueError("boom")

    assert enabled_inside(1) == (2, False)
    with pytest.raises(ValueError, match="boom"):
        fails()
    assert gc.isenabled()
