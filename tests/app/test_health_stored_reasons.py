"""A stored health answer reads back with every field of its reasons: a self-test reason stays
a test one once the refresher has stored it (it became a real-looking alert, paged unmarked)."""

from __future__ import annotations

import orjson

from app.health.current import _reason
from app.health.rules import State
from app.health.schemas import ReasonOut


def test_a_self_test_reason_keeps_its_mark_through_the_stored_document() -> None:
    reason = ReasonOut(
        state=State.UNHEALTHY,
        code="xid_79",
        text="TEST: Xid 79 (GPU has fallen off the bus) ×1, a self-test fault",
        since=None,
        evidence="/nodes/n1#events-heading",
        gpu_index=0,
        test=True,
    )
    stored = orjson.loads(orjson.dumps(reason.model_dump(mode="json")))

    back = _reason(stored)

    assert (back.code, back.test, back.gpu_index) == ("xid_79", True, 0)
    assert _reason({**stored, "test": False}).test is False
    assert _reason({k: v for k, v in stored.items() if k != "test"}).test is False  # older docs
