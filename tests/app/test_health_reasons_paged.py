"""Health and alerts as one source of truth: every reason a health check gives
(``app.health.reasons``) has a default alert rule that pages for it, judged by the same
definition; and the health checks give no code that is not registered there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.alerts.rulefiles import DEFAULT_RULES_DIR, load_path
from app.alerts.spec import HealthCondition, RuleSpec, ThresholdCondition
from app.config import PROJECT_ROOT
from app.health import reasons
from app.health.rules import DEFAULT_RULES, State

PACK = {spec.name: spec for spec, _ in load_path(DEFAULT_RULES_DIR, source_prefix="defaults")}

#: Reasons paged by a rule of another kind that judges the same fact (the test below holds
#: each to the health definition); every other reason by a health rule naming its code.
JUDGED_ALIKE = {
    reasons.STALE: "node-agent-stale",
    reasons.GPU_LOST: "gpu-lost",
    reasons.GPU_MISSING: "node-gpu-count-below-inventory",
    reasons.REMAPPED_ROWS_FAILURE: "gpu-row-remap-failure",
    reasons.PCIE_DOWNTRAINED: "gpu-pcie-link-downtrained",
    reasons.STORAGE_LATENCY_HIGH: "storage-latency-high",
}


def health_rules_for(reason: reasons.Reason, state: State | None = None) -> list[RuleSpec]:
    """Default health rules that fire for an entity in ``state`` (default: the reason's)
    with ``reason`` (the Xid family as Xid 94)."""
    code = "xid_94" if reason.code == reasons.XID_FAMILY else reason.code
    state = state or reason.state
    return [
        spec
        for spec in PACK.values()
        if isinstance(cond := spec.condition, HealthCondition)
        and cond.target == reason.level
        and state.value in cond.states
        and cond.matches((code,))
    ]


@pytest.mark.parametrize("reason", reasons.REASONS, ids=lambda r: r.code)
def test_every_health_reason_has_a_default_rule_that_pages(reason: reasons.Reason) -> None:
    paged = [s.name for s in health_rules_for(reason)]
    alike = JUDGED_ALIKE.get(reason.code)
    if alike is not None:
        assert alike in PACK, alike
        paged.append(alike)
    assert paged, f"health reason {reason.code} has no default alert rule"


@pytest.mark.parametrize("reason", reasons.REASONS, ids=lambda r: r.code)
def test_every_rule_that_pages_a_health_reason_carries_its_suggested_repair(
    reason: reasons.Reason,
) -> None:
    names = [s.name for s in health_rules_for(reason)]
    if reason.code in JUDGED_ALIKE:
        # A rule of another kind names the reason whose action it carries.
        alike = PACK[JUDGED_ALIKE[reason.code]]
        assert reason.code in alike.action_codes, alike.name
        names.append(alike.name)
    for name in names:
        assert "{suggested_action}" in PACK[name].description, name


def test_xids_page_as_health_counts_them_whatever_the_lists_say() -> None:
    """An Xid pages critical while health counts it Unhealthy and as a warning while Degraded,
    for the lists in force (an operator moving Xid 94 to the Unhealthy list makes it
    critical) and as long as health counts it (the event window)."""
    family = reasons.CODES[reasons.XID_FAMILY]
    unhealthy = health_rules_for(family, State.UNHEALTHY)
    degraded = health_rules_for(family, State.DEGRADED)
    assert [(s.name, s.severity) for s in unhealthy] == [("gpu-critical-xid", "critical")]
    assert [(s.name, s.severity) for s in degraded] == [("gpu-xid-degraded", "warning")]
    for spec in (*unhealthy, *degraded):
        cond = spec.condition
        assert isinstance(cond, HealthCondition)
        assert cond.matches((reasons.xid_code(119),)) and not cond.matches(("xidx",))


def test_storage_rules_use_the_health_thresholds() -> None:
    for name, threshold in (
        ("storage-latency-high", DEFAULT_RULES.disk_wait_s),
        ("storage-nfs-latency-high", DEFAULT_RULES.nfs_rtt_s),
    ):
        cond = PACK[name].condition
        assert isinstance(cond, ThresholdCondition) and cond.threshold == threshold, name


def test_throttling_pages_exactly_when_health_says_so() -> None:
    for name, code in (
        ("gpu-thermal-throttling", reasons.THERMAL_THROTTLE),
        ("gpu-power-throttling", reasons.POWER_THROTTLE),
    ):
        cond = PACK[name].condition
        assert isinstance(cond, HealthCondition) and cond.codes == [code], name


def _codes_given(path: Path) -> list[tuple[int, str]]:
    """(line, source) of every reason code in ``path`` written as a string: the code argument
    of ``_reason(view, anchor, state, code, …)`` or ``code=`` of ``ReasonOut``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        args: list[ast.expr] = []
        if name == "_reason" and len(node.args) >= 4:
            args.append(node.args[3])
        if name in ("_reason", "ReasonOut"):
            args += [k.value for k in node.keywords if k.arg == "code"]
        for arg in args:
            if isinstance(arg, ast.Constant | ast.JoinedStr):
                found.append((node.lineno, ast.unparse(arg)))
    return found


def test_health_checks_name_codes_only_through_the_registry() -> None:
    checks = sorted((PROJECT_ROOT / "app" / "health").glob("*.py"))
    assert any(p.name == "checks.py" for p in checks)
    literal = {str(p.name): _codes_given(p) for p in checks}
    assert {k: v for k, v in literal.items() if v} == {}


def test_the_code_check_sees_a_literal_code(tmp_path: Path) -> None:
    """The check above can fail: a literal and an f-string code are both found."""
    source = (
        "_reason(view, 'a', State.DEGRADED, 'made_up', text)\n"
        "ReasonOut(state=s, code=f'xid_{x}', text=t)\n"
        "_reason(view, 'a', State.DEGRADED, reasons.GPU_LOST, text)\n"
    )
    sample = tmp_path / "checks.py"
    sample.write_text(source)
    assert [code for _, code in _codes_given(sample)] == ["'made_up'", "f'xid_{x}'"]


def test_every_registered_code_is_recognised_and_others_are_not() -> None:
    assert reasons.family_of("xid_79") is reasons.CODES[reasons.XID_FAMILY]
    assert reasons.family_of(reasons.IB_PORT_DOWN) is reasons.CODES[reasons.IB_PORT_DOWN]
    assert reasons.family_of("xid_") is None and reasons.family_of("made_up") is None


@pytest.mark.parametrize(
    "code", ["ib_port_down", "xid_*", "xid_79", "xid_7*", "gpu_*", "storage_latency_high"]
)
def test_a_rule_may_name_any_reason_or_family(code: str) -> None:
    RuleSpec.model_validate(
        {"name": "r", "condition": {"kind": "health", "states": ["unhealthy"], "codes": [code]}}
    )


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("nosuch_code", "matches no health reason"),
        ("xid_abc", "matches no health reason"),
        ("xid_", "matches no health reason"),
        ("xid_007", "matches no health reason"),  # the checks write xid_7
        ("xid_0*", "matches no health reason"),
        ("zzz_*", "matches no health reason"),
        ("XID_*", "lowercase letters"),
        ("*", "lowercase letters"),
        ("x" * 65, "up to 64"),
    ],
)
def test_a_code_no_check_gives_is_refused_naming_the_field(code: str, says: str) -> None:
    from pydantic import ValidationError

    doc = {"name": "r", "condition": {"kind": "health", "states": ["unhealthy"], "codes": [code]}}
    with pytest.raises(ValidationError) as err:
        RuleSpec.model_validate(doc)
    assert says in str(err.value) and "codes" in str(err.value)
