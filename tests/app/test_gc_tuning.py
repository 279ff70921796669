"""The collector pause around alert evaluations and ingest batches: overlapping sections across
threads, and the young collection a long unbroken pause still gets."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

import pytest

from app import gc_tuning
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


def _collections_during(work: Callable[[], None]) -> list[int]:
    """The generations collected while ``work`` runs (gc.callbacks)."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        work()
    finally:
        gc.callbacks.remove(note)
    return seen


@pytest.mark.parametrize(("max_pause_s", "collected"), [(0.0, [0]), (3600.0, [])])
def test_a_section_ending_under_a_long_unbroken_pause_collects_the_young_generation(
    monkeypatch: pytest.MonkeyPatch, max_pause_s: float, collected: list[int]
) -> None:
    """Sections that overlap without end (concurrent ingest batches) would keep the collector
    off for good: the one ending after MAX_PAUSE_S collects generation 0 once, and the
    collector stays off for the sections still running."""
    monkeypatch.setattr(gc_tuning, "MAX_PAUSE_S", max_pause_s)
    other_entered, other_may_leave = threading.Event(), threading.Event()

    def other() -> None:
        with collection_paused():
            other_entered.set()
            other_may_leave.wait(5)

    thread = threading.Thread(target=other)
    enabled_after: list[bool] = []

    def overlapping() -> None:
        with collection_paused():
            thread.start()
            assert other_entered.wait(5)
        enabled_after.append(gc.isenabled())

    try:
        seen = _collections_during(overlapping)
    finally:
        other_may_leave.set()
        thread.join(5)
    assert seen == collected
    assert enabled_after == [False]
    assert gc.isenabled()
