"""Suggested repair actions (app.health.actions): every health reason has one, Xids follow the
catalog's buckets, Xid 154 follows the driver's recovery action (from the real kernel lines),
and repeats on one GPU escalate to hardware inspection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.kernel.xid import parse_kernel_log
from app.health import actions, reasons
from app.health.rules import XID_DEGRADED, XID_IGNORED, XID_UNHEALTHY, XID_WATCHED
from tests.shared_fixtures import fixture_path

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_every_health_reason_has_an_action_of_the_vocabulary() -> None:
    for reason in reasons.REASONS:
        code = reasons.xid_code(79) if reason.code == reasons.XID_FAMILY else reason.code
        action = actions.suggest(code)
        assert action.code in actions.RANK, reason.code
        assert action.code != "investigate", f"{reason.code} has no action of its own"
        assert action.text and action.title


def test_every_xid_of_the_health_lists_has_a_catalog_entry() -> None:
    for xid in (*XID_UNHEALTHY, *XID_DEGRADED, *XID_IGNORED, *XID_WATCHED):
        assert xid in actions.XID_ACTIONS, xid
        assert actions.suggest(reasons.xid_code(xid)).source.startswith("NVIDIA Xid catalog: ")


@pytest.mark.parametrize(
    ("xid", "code", "bucket"),
    [
        (13, "restart_app", "RESTART_APP"),
        (48, "reset_gpu", "RESET_GPU"),
        (64, "inspect_hardware", "CONTACT_SUPPORT"),
        (74, "reset_gpu", "WORKFLOW_NVLINK_ERR"),
        (79, "reboot_node", "RESTART_BM"),
        (94, "restart_app", "RESTART_APP"),
        (145, "reset_gpu", "WORKFLOW_NVLINK5_ERR"),
    ],
)
def test_xids_take_the_catalog_bucket(xid: int, code: str, bucket: str) -> None:
    action = actions.suggest(reasons.xid_code(xid), occurrences=1)
    assert (action.code, action.source) == (code, f"NVIDIA Xid catalog: {bucket}")
    assert action.escalated_from is None


def test_an_xid_the_catalog_table_lacks_is_investigated_and_says_so() -> None:
    action = actions.suggest("xid_9999", occurrences=1)
    assert (action.code, action.source) == (
        "investigate",
        "Fleetwatch: Xid not in the catalog table",
    )


def test_bursts_count_gaps_longer_than_the_quiet_period() -> None:
    times = [T0 + timedelta(seconds=s) for s in (0, 60, 170, 400, 3600, 3601)]
    assert actions.bursts(reversed(times), 180) == 3  # any order
    assert actions.bursts([], 180) == 0
    assert actions.bursts([T0, T0], 180) == 1
    assert actions.bursts([T0, T0 + timedelta(seconds=180)], 180) == 1
    assert actions.bursts([T0, T0 + timedelta(seconds=181)], 180) == 2


def test_a_repair_that_does_not_hold_escalates_to_hardware_inspection() -> None:
    # Xid 79: reboot, reboot, then (two reboots did not hold) hardware inspection.
    assert actions.suggest("xid_79", occurrences=1).code == "reboot_node"
    assert actions.suggest("xid_79", occurrences=2).code == "reboot_node"
    third = actions.suggest("xid_79", occurrences=3, window_s=7 * 86400)
    assert (third.code, third.escalated_from, third.occurrences) == (
        "inspect_hardware",
        "reboot_node",
        3,
    )
    assert "in 3 separate bursts within 7 days" in third.text
    assert "the reboot it asks for does not hold" in third.text
    day = actions.suggest("xid_79", occurrences=3, window_s=86400)
    assert "within 1 day " in day.text
    assert third.source == "NVIDIA Xid catalog: RESTART_BM, escalated by Fleetwatch"
    # A team that escalates after one repair.
    assert actions.suggest("xid_79", occurrences=2, escalate_after=1).code == "inspect_hardware"
    # A repeated double-bit ECC escalates at its second burst (NVSentinel's repeated Xid 48).
    assert actions.suggest("xid_48", occurrences=2).code == "inspect_hardware"
    # A lost GPU counts like Xid 79; "watch" and reasons never counted do not escalate.
    assert actions.suggest("gpu_lost", occurrences=3).escalated_from == "reboot_node"
    assert actions.suggest("xid_45", occurrences=9).code == "watch"
    assert actions.suggest("xid_64", occurrences=9).escalated_from is None
    # Xid 154 reports changes of the driver's recovery action, not faults: never counted.
    changes = actions.suggest(
        "xid_154", occurrences=5, message="recovery action changed from 0x0 (None) to 0x2"
    )
    assert (changes.code, changes.escalated_from) == ("reboot_node", None)


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("xid79-fallen-off-bus-then-xid154-os-reboot-gpu-is-lost.log", "reboot_node", "OS Reboot"),
        ("xid51-bad-tsg-then-xid154-pf-flr-reset-required.log", "reset_gpu", "PF FLR"),
    ],
)
def test_xid_154_follows_the_drivers_recovery_action(name: str, code: str, words: str) -> None:
    lines = fixture_path(f"xid/{name}").read_text(encoding="utf-8", errors="replace")
    events = [e for e in parse_kernel_log(lines.splitlines()) if e.get("xid") == 154]
    assert len(events) == 1
    action = actions.suggest("xid_154", occurrences=1, message=events[0]["message"])
    assert action.code == code
    assert words in action.text
    assert action.source == "NVIDIA Xid catalog: XID_154_EVAL"


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to",
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 to 0xZZ",
        "\x00\xff garbage",
        "GPU recovery action changed from 0x0 (None) to 0x" + "f" * 3000,
    ],
)
def test_xid_154_without_a_readable_recovery_action_keeps_the_catalog_entry(
    message: str | None,
) -> None:
    action = actions.suggest("xid_154", occurrences=1, message=message)
    assert action.code == "reset_gpu"
    assert "driver asks" in action.text


def test_the_drivers_words_are_bounded() -> None:
    message = "recovery action changed from 0x0 (None) to 0x2 (" + "w" * 4000 + ")"
    action = actions.suggest("xid_154", message=message)
    assert action.code == "reboot_node"
    assert len(action.text) < 200
    assert "drain the node and reboot it" in action.text


def test_an_unknown_recovery_action_code_is_investigated() -> None:
    message = "GPU recovery action changed from 0x0 (None) to 0x1f (Something New)"
    assert actions.recovery_action(message) == (0x1F, "Something New")
    assert actions.suggest("xid_154", message=message).code == "investigate"


def test_the_strongest_action_and_its_sentence() -> None:
    found = [actions.suggest(c) for c in ("thermal_throttle", "xid_79", "xid_13")]
    best = actions.strongest([None, *found])
    assert best is not None and best.code == "reboot_node"
    assert actions.strongest([]) is None
    assert actions.sentence(None) == ""
    line = actions.sentence(best)
    assert line.startswith("Suggested action: fallen off the bus: drain the node")
    assert line.endswith("(NVIDIA Xid catalog: RESTART_BM).")


def _node(*reasons_given: tuple[str, int | None]) -> Any:
    """A node's stored health with reasons (code, GPU index or None), each with its action."""
    from app.health.rules import State
    from app.health.schemas import GpuHealthOut, NodeHealthOut, ReasonOut, StateCounts

    def reason(code: str, index: int | None) -> ReasonOut:
        return ReasonOut(
            state=State.UNHEALTHY,
            code=code,
            text=code,
            since=None,
            evidence="/nodes/n1",
            gpu_index=index,
            action=actions.suggest(code),
        )

    all_reasons = [reason(c, i) for c, i in reasons_given]
    gpus = [
        GpuHealthOut(
            index=i,
            uuid=f"GPU-{i}",
            name=None,
            state=State.UNHEALTHY,
            reasons=[r for r in all_reasons if r.gpu_index == i],
        )
        for i in sorted({i for _, i in reasons_given if i is not None})
    ]
    return NodeHealthOut(
        hostname="n1",
        state=State.UNHEALTHY,
        cluster="c",
        group="g",
        reasons=all_reasons,
        gpus=gpus,
        gpu_counts=StateCounts(),
    )


def test_a_rule_carries_the_action_of_the_reasons_it_names() -> None:
    """A node rule about missing GPUs carries gpu_missing's repair (a GPU reason), a stale-node
    rule its own, not the node's strongest; a rule naming none carries the strongest."""
    from types import SimpleNamespace

    from app.alerts.context import Observation
    from app.alerts.evaluator import with_actions
    from app.alerts.spec import RuleSpec

    node = _node(("gpu_lost", 0), ("gpu_missing", 1), ("stale", None))
    ctx: Any = SimpleNamespace(health=lambda: {"n1": node})
    met = Observation({"hostname": "n1"}, ("n1",), 1.0, True, "n1")
    unmet = met._replace(met=False)

    def carried(codes: list[str], obs: Observation = met) -> str:
        spec = RuleSpec.model_validate(
            {
                "name": "r",
                "description": "{suggested_action}",
                "action_codes": codes,
                "condition": {"kind": "absence", "target": "node"},
            }
        )
        return with_actions(ctx, spec, [obs])[0].action

    assert "GPU left the inventory" in carried(["gpu_missing"])
    assert "fleetwatch-agent runs" in carried(["stale"])
    assert "GPU stopped answering" in carried([])  # the strongest: reboot_node
    assert carried(["thermal_throttle"]) == ""  # the node has no such reason
    assert carried([], unmet) == ""  # not met: not looked up
    on_gpu = met._replace(labels={"hostname": "n1", "gpu_uuid": "GPU-1"})
    assert "GPU left the inventory" in carried([], on_gpu)  # the GPU's own reasons only


def test_xid_45_and_92_agree_with_the_catalog() -> None:
    """Xid 45 (WORKFLOW_XID_45) never escalates and ends no job of its own; Xid 92 (IGNORE)
    is watched once and escalates to hardware inspection when it comes back."""
    cleanup = actions.suggest("xid_45", occurrences=5)
    assert (cleanup.code, cleanup.source) == ("watch", "NVIDIA Xid catalog: WORKFLOW_XID_45")
    assert not actions.ends_jobs(45) and not actions.ends_jobs(92)
    once = actions.suggest("xid_92", occurrences=1)
    assert (once.code, once.source) == ("watch", "NVIDIA Xid catalog: IGNORE")
    again = actions.suggest("xid_92", occurrences=2, gpu="GPU 2")
    assert (again.code, again.escalated_from) == ("inspect_hardware", "watch")
    assert again.text.startswith("seen in 2 separate bursts within 7 days on GPU 2:")
    assert "keeps coming back" in again.text


def test_an_escalation_names_its_gpu() -> None:
    words = actions.gpu_words(3, "GPU-8f00", "00000000:3B:00.0")
    assert words == "GPU 3 (GPU-8f00, PCI 00000000:3B:00.0)"
    action = actions.suggest("xid_79", occurrences=3, gpu=words)
    assert "on GPU 3 (GPU-8f00, PCI 00000000:3B:00.0):" in action.text
    assert "this GPU" not in action.text
    assert actions.gpu_words(None, None, "0000:3b:00.0") == "the GPU at PCI 0000:3b:00.0"
    assert actions.gpu_words(None, "GPU-1", None) == "GPU-1"
    assert actions.gpu_words(2, None, None) == "GPU 2"


def test_a_burst_longer_than_the_longest_span_is_cut() -> None:
    """A line every 2 minutes for 150 minutes: one burst without a limit, three with one of
    an hour (FLEETWATCH_INCIDENT_MAX_S)."""
    storm = [T0 + timedelta(seconds=s) for s in range(0, 9000, 120)]
    assert actions.bursts(storm, 180) == 1
    assert actions.bursts(storm, 180, 3600) == 3
    hour = [T0 + timedelta(seconds=s) for s in range(0, 3601, 120)]  # 3,600 s: still one
    assert actions.bursts(hour, 180, 3600) == 1
