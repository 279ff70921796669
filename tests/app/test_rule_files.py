"""Rules as YAML files: errors with file and line, idempotent apply (created / updated /
unchanged), export that applies back unchanged, the default pack, and the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.alerts.rulefiles import (
    DEFAULT_RULES_DIR,
    RuleFilesInvalid,
    apply_path,
    export_yaml,
    load_path,
)
from app.audit.models import AuditEvent
from app.db import make_engine, make_session_factory, session_scope
from tests.app.test_cli import fleetwatch
from tests.dbs import session_factory
from tests.factories import wipe_alerts

GOOD = """\
rules:
  - name: hot-gpu
    severity: warning
    for: 5m
    condition:
      kind: threshold
      target: gpu
      metric: temp_c
      aggregation: avg
      window: 1m
      op: ">"
      threshold: 85
"""


def errors_of(path: Path) -> list[str]:
    """The error lines ``load_path`` raises for ``path``."""
    with pytest.raises(RuleFilesInvalid) as info:
        load_path(path)
    return [str(e) for e in info.value.errors]


def test_an_unknown_metric_is_reported_at_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(GOOD.replace("metric: temp_c", "metric: tmp_c"))

    (error,) = errors_of(path)

    assert error.startswith(f"{path}:8: rules[0].condition.threshold.metric: 'tmp_c' is not a")


def test_every_error_of_every_rule_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        GOOD
        + """\
  - name: stale
    severity: urgent
    for: soon
    condition:
      kind: absence
      target: node
      colour: red
"""
    )

    assert errors_of(path) == [
        f"{path}:14: rules[1].severity: Input should be 'critical', 'warning' or 'info'",
        f"{path}:15: rules[1].for: not a duration: 'soon' (use seconds or text like '30s', "
        "'5m', '1h')",
        f"{path}:19: rules[1].condition.absence.colour: Extra inputs are not permitted",
    ]


def test_yaml_syntax_errors_and_duplicate_keys_give_the_line(tmp_path: Path) -> None:
    broken = tmp_path / "a.yaml"
    broken.write_text("rules:\n  - name: x\n    condition: {kind: event\n")
    twice = tmp_path / "b.yaml"
    twice.write_text(GOOD.replace("    for: 5m\n", "    for: 5m\n    for: 1m\n"))

    got = errors_of(tmp_path)

    assert got[0].startswith(f"{broken}:4: YAML syntax:")
    assert got[1] == f"{twice}:5: for: duplicate key"


def test_a_rule_name_defined_in_two_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yml").write_text(GOOD)

    assert errors_of(tmp_path) == [
        f"{tmp_path / 'b.yml'}:2: hot-gpu: rule name already defined at {tmp_path / 'a.yaml'}:2"
    ]


def test_the_default_pack_validates_and_names_a_runbook_for_every_rule() -> None:
    specs = load_path(DEFAULT_RULES_DIR, source_prefix="defaults")

    names = [s.name for s, _ in specs]
    assert names == [
        "gpu-lost",
        "gpu-unresponsive",
        "gpu-critical-xid",
        "gpu-double-bit-ecc",
        "gpu-row-remap-failure",
        "gpu-row-remap-pending",
        "gpu-xid-degraded",
        "gpu-nvlink-down",
        "gpu-temperature-high",
        "gpu-thermal-throttling",
        "gpu-power-throttling",
        "gpu-pcie-link-downtrained",
        "gpu-repeat-offender",
        "node-gpu-count-below-inventory",
        "node-agent-stale",
        "node-clock-skew",
        "node-ib-port-down",
        "node-ib-port-flapping",
        "storage-latency-high",
        "storage-nfs-latency-high",
        "node-repeat-offender",
        "node-quarantine-blocked",
        "node-remediation-failed",
    ]
    assert all(s.runbook for s, _ in specs)


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    """``db_url`` with the alert tables wiped after the test."""
    yield db_url
    wipe_alerts(db_url)


def test_apply_is_idempotent_and_reports_created_updated_unchanged(
    url: str, tmp_path: Path
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(GOOD)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    try:
        with session_scope(factory) as session:
            first = apply_path(session, path=path)
        with session_scope(factory) as session:
            second = apply_path(session, path=path)
        path.write_text(GOOD.replace("threshold: 85", "threshold: 87"))
        with session_scope(factory) as session:
            third = apply_path(session, path=path)
            exported = export_yaml(session)
        (tmp_path / "exported").mkdir()
        (tmp_path / "exported" / "all.yaml").write_text(exported)
        with session_scope(factory) as session:
            fourth = apply_path(session, path=tmp_path / "exported")
    finally:
        engine.dispose()

    assert (first.created, first.updated, first.unchanged) == (["hot-gpu"], [], [])
    assert (second.created, second.updated, second.unchanged) == ([], [], ["hot-gpu"])
    assert (third.created, third.updated, third.unchanged) == ([], ["hot-gpu"], [])
    assert (fourth.created, fourth.updated, fourth.unchanged) == ([], [], ["hot-gpu"])
    assert "    threshold: 87.0\n" in exported and "  for: 5m\n" in exported


def test_cli_apply_defaults_then_export_and_errors_exit_1(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert fleetwatch("migrate", "--database-url", url).returncode == 0

    first = fleetwatch("rules", "apply", "--defaults", "--database-url", url)
    again = fleetwatch("rules", "apply", "--defaults", "--database-url", url)
    exported = fleetwatch("rules", "export", "--database-url", url)
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace('op: ">"', 'op: "=>"'))
    failed = fleetwatch("rules", "apply", str(bad), "--database-url", url)

    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == (
        "23 created, 0 updated, 0 unchanged; inhibition rules: 6 created, 0 updated, 0 unchanged"
    )
    assert "created inhibition rule: gpu-lost-mutes-its-gpu" in first.stdout.splitlines()
    assert again.stdout.splitlines()[-1] == (
        "0 created, 0 updated, 23 unchanged; inhibition rules: 0 created, 0 updated, 6 unchanged"
    )
    assert exported.stdout.count("\n- name: ") == 23 + 6
    assert "\ninhibit_rules:\n" in exported.stdout
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"{bad}:11: rules[0].condition.threshold.op: Input should be")
    # The audit trail keeps the first apply's changes (each rule's state after), and no event
    # for the apply that changed nothing nor for the refused one.
    with session_factory(url) as factory, session_scope(factory) as session:
        events = session.execute(
            select(AuditEvent.actor, AuditEvent.target, AuditEvent.detail).where(
                AuditEvent.action == "rules.apply"
            )
        ).all()
    assert [(actor, target) for actor, target, _ in events] == [("cli", {"path": "defaults"})]
    changes = events[0][2]["changes"]
    assert len(changes) == 23 + 6 and all(c["before"] is None for c in changes)
    assert {c["object"] for c in changes} == {"rule", "inhibit_rule"}
    lost = next(c for c in changes if c["key"] == "gpu-lost-mutes-its-gpu")
    assert lost["object"] == "inhibit_rule" and lost["after"]["source"].startswith("defaults")
