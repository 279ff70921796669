"""Instances and events written by an evaluation as one statement per table on Postgres
(``app.alerts.bulk_writes``) and through the ORM on SQLite hold the same values: labels and
texts with quotes, backslashes and non-ASCII, no value, every timestamp; with no notification
route the events are written as seen by the notifier, and no delivery is queued."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from app.alerts.models import AlertEvent, AlertInstance
from app.db import make_engine, make_session_factory, session_scope
from app.notify.models import NotifyDelivery
from tests.factories import add_rules, batch, evaluate_at, gpu, sample, store_payload, wipe_alerts

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
ODD = 'rack "7" \\ Zürich 東京 ✓'


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    yield db_url
    wipe_alerts(db_url)


def test_new_instances_and_events_keep_every_value(url: str) -> None:
    gpus = [gpu(0), gpu(1)]
    payload = batch("node-a", gpus=gpus, samples_per_gpu=0, labels={"rack": ODD})
    payload["samples"] = [
        sample(gpus[0], NOW, temp_c=91),
        sample(gpus[1], NOW, temp_c=None),  # no value: fires on no_data
    ]
    store_payload(url, payload, received_at=NOW)
    add_rules(
        url,
        {
            "name": "hot",
            "for": "1m",
            "no_data": "firing",
            "summary": "{hostname} in {rack} at {value} °C",
            "condition": {
                "kind": "threshold",
                "target": "gpu",
                "metric": "temp_c",
                "aggregation": "last",
                "op": ">",
                "threshold": 85,
            },
        },
    )
    evaluate_at(url, NOW)
    evaluate_at(url, NOW + timedelta(seconds=70))  # pending → firing: an update of states
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            instances = {i.labels["gpu_index"]: i for i in session.scalars(select(AlertInstance))}
            assert set(instances) == {"0", "1"}
            hot, blank = instances["0"], instances["1"]
            assert hot.labels["rack"] == ODD and hot.labels["alertname"] == "hot"
            assert hot.summary == f"node-a in {ODD} at 91 °C"
            assert (hot.value, blank.value) == (91.0, None)
            assert blank.summary == f"node-a in {ODD} at n/a °C"
            for inst in (hot, blank):
                assert inst.state == "firing"
                assert inst.active_since == NOW
                assert inst.fired_at == NOW + timedelta(seconds=70)
                assert inst.resolved_at is None and inst.acked is False
            events = session.execute(
                select(AlertEvent.instance_id, AlertEvent.to_state, AlertEvent.labels).order_by(
                    AlertEvent.id
                )
            ).all()
            assert sorted((e.instance_id, e.to_state) for e in events) == sorted(
                [
                    (hot.id, "pending"),
                    (blank.id, "pending"),
                    (hot.id, "firing"),
                    (blank.id, "firing"),
                ]
            )
            assert all(e.labels["rack"] == ODD for e in events)
            unseen = select(func.count()).where(AlertEvent.notified_at.is_(None))
            assert session.scalar(unseen) == 0  # no route: seen as written
            assert session.scalar(select(func.count()).select_from(NotifyDelivery)) == 0
    finally:
        engine.dispose()
