"""``fleetwatch rules apply`` in the audit trail: one ``rules.apply`` event per apply that
changed something, naming every rule and inhibition rule it created or changed, with their
states kept up to :data:`app.audit.service.MAX_STATES_BYTES` (a directory of hundreds of rules
must not write megabytes into one row and into the /audit page); a refused apply records and
changes nothing; the /audit page shows such an event. Both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.alerts.models import AlertInhibitRule, AlertRule
from app.audit.models import AuditEvent
from app.audit.service import MAX_STATES_BYTES, change_detail
from app.db import session_scope
from tests.app.test_cli import fleetwatch
from tests.conftest import make_settings
from tests.dbs import session_factory, wipe
from tests.factories import wipe_alerts
from tests.live_server import LiveServer

RULES = 300
INHIBITS = 40


def rules_yaml(threshold: int) -> str:
    rules = "".join(
        f"""  - name: apply-hot-{i:04d}
    severity: warning
    for: 5m
    description: "GPU {i} above {threshold} C: check the cooling and the fans of its rack first"
    condition:
      kind: threshold
      target: gpu
      metric: temp_c
      aggregation: avg
      window: 1m
      op: ">"
      threshold: {threshold}
"""
        for i in range(RULES)
    )
    return "rules:\n" + rules


def inhibits_yaml() -> str:
    return "inhibit_rules:\n" + "".join(
        f"""  - name: apply-mute-{i:03d}
    source_matchers: ['alertname="apply-lost-{i}"']
    target_matchers: ['alertname="apply-hot"']
    equal: [hostname]
"""
        for i in range(INHIBITS)
    )


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    yield db_url
    wipe_alerts(db_url)
    wipe(db_url)


def applies(url: str) -> list[tuple[Any, Any]]:
    with session_factory(url) as factory, session_scope(factory) as session:
        rows = session.execute(
            select(AuditEvent.target, AuditEvent.detail)
            .where(AuditEvent.action == "rules.apply")
            .order_by(AuditEvent.id)
        ).all()
    return [tuple(r) for r in rows]


def test_a_large_apply_is_one_bounded_event_naming_every_change(url: str, tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "gpu.yaml").write_text(rules_yaml(85))
    (folder / "mutes.yml").write_text(inhibits_yaml())

    first = fleetwatch("rules", "apply", str(folder), "--database-url", url)
    assert first.returncode == 0, first.stderr
    ((target, detail),) = applies(url)
    assert target == {"path": str(folder)}
    changes = detail["changes"]
    names = [f"apply-hot-{i:04d}" for i in range(RULES)]
    mutes = [f"apply-mute-{i:03d}" for i in range(INHIBITS)]
    assert sorted((c["object"], c["key"]) for c in changes) == sorted(
        [("rule", n) for n in names] + [("inhibit_rule", n) for n in mutes]
    )
    full = [c for c in changes if "after" in c]
    short = [c for c in changes if c.get("states_omitted") is True]
    assert full and full[0]["before"] is None and full[0]["after"]["spec"]["name"] in names
    assert len(full) + len(short) == RULES + INHIBITS and detail["states_omitted"] == len(short)
    # The states stay within the bound; each further change costs its name only.
    assert len(json.dumps(full)) <= MAX_STATES_BYTES
    assert len(json.dumps(detail)) <= MAX_STATES_BYTES + 100 * len(short)

    # A refused apply (one bad file beside an edited good one) changes and records nothing.
    (folder / "gpu.yaml").write_text(rules_yaml(90))
    (folder / "zz-bad.yaml").write_text(rules_yaml(85).replace("apply-hot", "bad-hot", 1)[:-40])
    refused = fleetwatch("rules", "apply", str(folder), "--database-url", url)
    assert refused.returncode == 1 and "zz-bad.yaml" in refused.stderr
    assert len(applies(url)) == 1
    with session_factory(url) as factory, session_scope(factory) as session:
        thresholds = {
            rule.spec["condition"]["threshold"]
            for rule in session.scalars(select(AlertRule).where(AlertRule.name.in_(names)))
        }
        stored = session.scalars(
            select(AlertInhibitRule.name).where(AlertInhibitRule.name.in_(mutes))
        ).all()
    assert thresholds == {85} and len(stored) == INHIBITS

    # The edit applied: before and after for the rules whose states fit, then names only.
    (folder / "zz-bad.yaml").unlink()
    edited = fleetwatch("rules", "apply", str(folder), "--database-url", url)
    assert edited.returncode == 0, edited.stderr
    (_, first_detail), (_, detail) = applies(url)
    assert sorted(c["key"] for c in detail["changes"]) == names
    shown = next(c for c in detail["changes"] if "after" in c)
    assert shown["before"]["spec"]["condition"]["threshold"] == 85
    assert shown["after"]["spec"]["condition"]["threshold"] == 90

    # The /audit page shows both events.
    server = LiveServer(make_settings(url, tmp_path))
    server.start()
    try:
        page = httpx.get(f"{server.url}/audit", params={"action": "rules.apply"}, timeout=60)
    finally:
        server.stop()
    assert page.status_code == 200
    assert page.text.count("<code>rules.apply</code>") == 2
    assert "apply-mute-039" in page.text and "states_omitted" in page.text
    assert len(page.content) < 3 * (MAX_STATES_BYTES + 100 * (RULES + INHIBITS))
    assert first_detail["states_omitted"] > 0


def test_change_detail_keeps_the_first_change_and_names_past_the_bound() -> None:
    big = {"object": "rule", "key": "a", "before": None, "after": {"text": "x" * 500}}
    secret = {
        "object": "channel",
        "key": "hook",
        "before": {"url": "…"},
        "after": {"url": "…"},
        "redacted_changed": ["url"],
    }
    assert change_detail([big], max_states_bytes=100) == big
    detail = change_detail([big, big | {"key": "b"}, secret], max_states_bytes=100)
    assert detail == {
        "changes": [
            big,
            {"object": "rule", "key": "b", "states_omitted": True},
            {
                "object": "channel",
                "key": "hook",
                "states_omitted": True,
                "redacted_changed": ["url"],
            },
        ],
        "states_omitted": 2,
    }
    assert change_detail([secret, secret]) == {"changes": [secret, secret]}
    assert change_detail([]) is None
