"""Inhibition (Alertmanager ``inhibit_rules`` semantics) on Postgres and SQLite: which alerts a
firing alert mutes, the worker holding back their pages and sending them once the inhibition
ends, the rule document in YAML and its errors, and the default set."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.alerts import inhibition
from app.alerts.inhibit_spec import InhibitRuleSpec
from app.alerts.models import AlertInstance, AlertRule
from app.alerts.rulefiles import (
    DEFAULT_RULES_DIR,
    RuleFilesInvalid,
    apply_path,
    export_yaml,
    load_all,
)
from app.alerts.silences import matches
from app.db import session_scope, utcnow
from app.notify.outbox import enqueue_repeats
from tests.app import test_notify_delivery as delivery
from tests.app.test_notify_delivery import SECRET_PATH, Env, add_channel, drain, make_worker, rows
from tests.notify_helpers import receiver

env = delivery.env  # the delivery tests' fixture: settings, sessions, secret box, alert writer

GPU_LOST = {
    "name": "gpu-lost-mutes-its-gpu",
    "source_matchers": ['alertname="gpu-lost"'],
    "target_matchers": ['alertname=~"gpu-.+"', 'alertname!="gpu-lost"'],
    "equal": ["hostname", "gpu_uuid"],
}


def put(session: Session, document: dict[str, Any]) -> None:
    inhibition.put_rule(session, spec=InhibitRuleSpec.model_validate(document))


def alert(session: Session, rule: str, state: str, **labels: str) -> int:
    """An instance of ``rule`` (created once) in ``state`` with ``labels``."""
    found = session.query(AlertRule).filter_by(name=rule).one_or_none()
    if found is None:
        now = utcnow()
        found = AlertRule(
            name=rule,
            kind="threshold",
            severity="critical",
            enabled=True,
            spec={"name": rule},
            source="api",
            created_at=now,
            updated_at=now,
        )
        session.add(found)
        session.flush()
    inst = AlertInstance(
        rule_id=found.id,
        fingerprint="/".join(labels.values()) or rule,
        state=state,
        labels={"alertname": rule, **labels},
        last_evaluated_at=utcnow(),
    )
    session.add(inst)
    session.flush()
    return inst.id


def muted(session: Session, *ids: int) -> dict[int, str]:
    labels = {i: session.get(AlertInstance, i).labels for i in ids}  # type: ignore[union-attr]
    return {i: f.reason() for i, f in inhibition.inhibitors(session, labels).items()}


def test_a_firing_alert_mutes_the_targets_that_share_its_equal_labels(
    db_url: str, env: Env
) -> None:
    with session_scope(env.factory) as s:
        put(s, GPU_LOST)
        lost = alert(s, "gpu-lost", "firing", hostname="n1", gpu_uuid="GPU-a")
        xid = alert(s, "gpu-critical-xid", "firing", hostname="n1", gpu_uuid="GPU-a")
        other_gpu = alert(s, "gpu-critical-xid", "firing", hostname="n1", gpu_uuid="GPU-b")
        other_host = alert(s, "gpu-critical-xid", "firing", hostname="n2", gpu_uuid="GPU-a")
        node_alert = alert(s, "node-agent-stale", "firing", hostname="n1", gpu_uuid="GPU-a")

        assert muted(s, lost, xid, other_gpu, other_host, node_alert) == {
            xid: f"inhibited by gpu-lost (alert {lost}, rule gpu-lost-mutes-its-gpu)"
        }


@pytest.mark.parametrize("state", ["pending", "resolved", "inactive"])
def test_only_a_firing_source_inhibits(db_url: str, env: Env, state: str) -> None:
    with session_scope(env.factory) as s:
        put(s, GPU_LOST)
        alert(s, "gpu-lost", state, hostname="n1", gpu_uuid="GPU-a")
        xid = alert(s, "gpu-critical-xid", "firing", hostname="n1", gpu_uuid="GPU-a")

        assert muted(s, xid) == {}


def test_a_label_absent_on_both_counts_as_equal_and_a_disabled_rule_mutes_nothing(
    db_url: str, env: Env
) -> None:
    with session_scope(env.factory) as s:
        put(s, {**GPU_LOST, "equal": ["hostname", "rack"]})
        alert(s, "gpu-lost", "firing", hostname="n1")
        target = alert(s, "gpu-temperature-high", "firing", hostname="n1")
        racked = alert(s, "gpu-nvlink-down", "firing", hostname="n1", rack="r7")
        assert set(muted(s, target, racked)) == {target}

        put(s, {**GPU_LOST, "equal": ["hostname", "rack"], "enabled": False})
        assert muted(s, target, racked) == {}


def test_alerts_matching_both_sides_of_one_rule_never_mute_each_other(
    db_url: str, env: Env
) -> None:
    with session_scope(env.factory) as s:
        put(
            s,
            {
                "name": "gpu-alerts-mute-each-other",
                "source_matchers": ['alertname=~"gpu-.+"'],
                "target_matchers": ['alertname=~"gpu-.+"'],
                "equal": ["hostname"],
            },
        )
        a = alert(s, "gpu-lost", "firing", hostname="n1")
        b = alert(s, "gpu-critical-xid", "firing", hostname="n1")
        assert muted(s, a, b) == {}


def test_a_silenced_source_still_inhibits(db_url: str, env: Env) -> None:
    with session_scope(env.factory) as s:
        put(s, GPU_LOST)
        lost = alert(s, "gpu-lost", "firing", hostname="n1", gpu_uuid="GPU-a")
        s.get(AlertInstance, lost).silenced = True  # type: ignore[union-attr]
        xid = alert(s, "gpu-critical-xid", "firing", hostname="n1", gpu_uuid="GPU-a")
        assert set(muted(s, xid)) == {xid}


def test_the_worker_holds_back_an_inhibited_page_and_the_end_of_it_pages_nobody_at_once(
    db_url: str, env: Env
) -> None:
    gpu = {"gpu_uuid": "GPU-a"}
    with session_scope(env.factory) as s:
        put(s, GPU_LOST)
    with receiver() as hook:
        add_channel(env, hook.url + SECRET_PATH)
        lost = env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending", extra=gpu)
        env.alerts.transition("gpu-critical-xid", "n1", "firing", from_state="pending", extra=gpu)
        worker = make_worker(env)
        drain(env, worker)
        sent = [a["labels"]["alertname"] for b in hook.bodies() for a in b["alerts"]]
        assert sent == ["gpu-lost"]
        reason = f"inhibited by gpu-lost (alert {lost}, rule gpu-lost-mutes-its-gpu)"
        assert [(r.kind, r.status, r.last_error) for r in rows(env)] == [
            ("firing", "delivered", None),
            ("firing", "suppressed", reason),
        ]

        # The GPU is back: gpu-lost resolves, the Xid's alert keeps firing (health's window).
        # That is the same fault: no second page now...
        env.alerts.transition("gpu-lost", "n1", "resolved", extra=gpu)
        with session_scope(env.factory) as s:
            assert enqueue_repeats(s) == 0
        drain(env, worker)
        # ... but a reminder at the route's repeat interval, as for any alert still firing.
        with session_scope(env.factory) as s:
            assert enqueue_repeats(s, now=utcnow() + timedelta(hours=5)) == 1
        drain(env, worker)
        worker.close()
        notices = [
            (a["labels"]["alertname"], a["status"]) for b in hook.bodies() for a in b["alerts"]
        ]
    assert notices == [
        ("gpu-lost", "firing"),
        ("gpu-lost", "resolved"),
        ("gpu-critical-xid", "firing"),
    ]


def test_matchers_in_alertmanager_text_and_as_objects_mean_the_same() -> None:
    text = InhibitRuleSpec.model_validate(
        {
            "name": "x",
            "source_matchers": ['alertname="gpu-lost"', 'severity =~ "crit.*"', "team!=ml"],
            "target_matchers": [r'summary="say \"hi\""'],
        }
    )
    objects = InhibitRuleSpec.model_validate(
        {
            "name": "x",
            "source_matchers": [
                {"name": "alertname", "op": "=", "value": "gpu-lost"},
                {"name": "severity", "op": "=~", "value": "crit.*"},
                {"name": "team", "op": "!=", "value": "ml"},
            ],
            "target_matchers": [{"name": "summary", "value": 'say "hi"'}],
        }
    )
    assert text == objects
    assert InhibitRuleSpec.model_validate(text.document()) == text


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("source_matchers", ["alertname"], "not a matcher: 'alertname' (expected name"),
        ("source_matchers", ['alertname=~"(unclosed"'], "not a valid regular expression"),
        ("source_matchers", [], "at least 1 item"),
        ("target_matchers", ['9bad="x"'], "not a matcher"),
        ("equal", ["host-name"], "'host-name' is not a label name"),
        ("equal", ["hostname", "hostname"], "a label is named twice"),
        ("name", "bad name", "a name is a letter or digit"),
    ],
)
def test_a_bad_inhibition_rule_names_the_field_and_the_form(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        InhibitRuleSpec.model_validate({**GPU_LOST, field: value})
    [error] = caught.value.errors()
    assert error["loc"][0] == field
    assert message in str(error["msg"])


def test_rule_files_take_inhibit_rules_with_lines_and_export_gives_them_back(
    db_url: str, env: Env, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "inhibit_rules:\n"
        "  - name: a\n"
        "    source_matchers: ['alertname=\"gpu-lost\"']\n"
        "    target_matchers: ['alertname']\n"
        "  - name: a\n"
        "    source_matchers: ['alertname=\"x\"']\n"
        "    target_matchers: ['alertname=\"y\"']\n"
    )
    with pytest.raises(RuleFilesInvalid) as caught:
        load_all(bad)
    assert [str(e) for e in caught.value.errors] == [
        f"{bad}:4: inhibit_rules[0].target_matchers.0: not a matcher: 'alertname' (expected name,"
        ' one of = != =~ !~, and a value in double quotes, e.g. alertname="gpu-lost")'
    ]
    bad.write_text(bad.read_text().replace("['alertname']", "['alertname=\"z\"']"))
    with pytest.raises(RuleFilesInvalid) as caught:
        load_all(bad)
    assert [str(e) for e in caught.value.errors] == [
        f"{bad}:5: a: inhibition rule name already defined at {bad}:2"
    ]

    with session_scope(env.factory) as s:
        first = apply_path(s, path=DEFAULT_RULES_DIR, defaults=True)
        exported = export_yaml(s)
    assert sorted(first.inhibit.created) == sorted(
        spec.name for spec, _ in load_all(DEFAULT_RULES_DIR)[1]
    )
    back = tmp_path / "back.yaml"
    back.write_text(exported)
    with session_scope(env.factory) as s:
        again = apply_path(s, path=back)
    assert again.inhibit.created == again.inhibit.updated == []
    assert len(again.inhibit.unchanged) == len(first.inhibit.created)


def test_every_default_inhibition_rule_names_rules_of_the_default_pack() -> None:
    rules, inhibits = load_all(DEFAULT_RULES_DIR)
    names = [{"alertname": spec.name} for spec, _ in rules]
    for spec, _ in inhibits:
        for side in (spec.source_matchers, spec.target_matchers):
            on_name = [m.model_dump() for m in side if m.name == "alertname"]
            assert on_name, spec.name
            assert any(matches(on_name, n) for n in names), (spec.name, on_name)


LAUGHS = "x0: &a0 [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"x{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        # 10**9 leaves through aliases: refused at once (each node is walked once)
        (LAUGHS, "1: a rule file's top-level keys are rules, inhibit_rules"),
        ("inhibit_rules: &a [*a]\n", "1: inhibit_rules[0]: Input should be a valid dictionary"),
        ("rules: []\n\x00\n", "2: YAML: character U+0000 is not allowed in a YAML file"),
        (
            'inhibit_rules:\n  - name: a\n    description: "a\\0b"\n'
            "    source_matchers: ['alertname=\"x\"']\n    target_matchers: ['alertname=\"y\"']\n",
            "3: inhibit_rules[0].description: contains the character U+0000",
        ),
        (
            "inhibit_rules:\n  - name: a\n    enabled: 'yes'\n"
            "    source_matchers: ['alertname=\"x\"']\n    target_matchers: ['alertname=\"y\"']\n",
            "3: inhibit_rules[0].enabled: Input should be a valid boolean",
        ),
        (
            "inhibit_rules:\n  - name: a\n    equal: [" + "h" * 129 + "]\n"
            "    source_matchers: ['alertname=\"x\"']\n    target_matchers: ['alertname=\"y\"']\n",
            "3: inhibit_rules[0].equal.0: String should have at most 128 characters",
        ),
    ],
)
def test_hostile_rule_files_are_refused_naming_the_line(
    tmp_path: Path, text: str, error: str
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    with pytest.raises(RuleFilesInvalid) as caught:
        load_all(path)
    assert str(caught.value.errors[0]).startswith(f"{path}:{error}")


def test_a_top_level_merge_key_brings_its_inhibit_rules(tmp_path: Path) -> None:
    path = tmp_path / "merged.yaml"
    path.write_text(
        "<<: {inhibit_rules: [{name: m, source_matchers: ['alertname=\"a\"'],"
        " target_matchers: [alertname=b]}]}\n"
    )
    rules, inhibits = load_all(path)
    assert rules == []
    assert [(s.name, s.target_matchers[0].value) for s, _ in inhibits] == [("m", "b")]
