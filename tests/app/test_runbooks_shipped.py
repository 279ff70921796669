"""The runbooks shipped in ``runbooks/``: one for every runbook the default rule pack names, each
rendering without warnings for a sample alert of every rule that names it, with its commands
filled in for that alert."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.alerts.models import AlertInstance, AlertRule
from app.config import PROJECT_ROOT, load_settings
from app.runbooks.context import RunbookContext
from app.runbooks.render import render_markdown

RULE_FILES = sorted((PROJECT_ROOT / "app" / "alerts" / "default_rules").glob("*.yaml"))
RULES: list[dict[str, Any]] = [
    r for f in RULE_FILES for r in yaml.safe_load(f.read_text()).get("rules", [])
]
RUNBOOKS = PROJECT_ROOT / "runbooks"

# What each runbook must tell on-call to run or look up, as filled in for the sample alert
# (gpu-a-01, GPU 3, disk nvme0n1, NFS mount /shared, alert 42).
DRAIN = [
    "scontrol update nodename=gpu-a-01 state=drain reason=",
    "kubectl cordon gpu-a-01",
]
EXPECTED: dict[str, list[str]] = {
    "gpu-lost": [
        *DRAIN,
        "nvidia-smi -q -i 3 | head -30",
        "dmesg -T | grep -i xid",
        "journalctl -k",
        "lspci -d 10de: -nn",
        "Xid 79",
        "nvidia-smi -r -i 3",
        "nvidia-bug-report.sh",
        "RMA",
    ],
    "gpu-critical-xid": [
        *DRAIN,
        "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i 3",
        "dmesg -T | grep -i xid",
        "nvidia-smi -r -i 3",
        "dcgmi diag -r 3",
        *[f"<td>{x}</td>" for x in ("48", "62", "63", "64", "74", "79", "92", "94", "95")],
        "<td>119 / 120</td>",
    ],
    "gpu-double-bit-ecc": [
        *DRAIN,
        "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i 3",
        "Xid 48",
        "Xid 94",
        "Xid 95",
        "Xid 63",
        "nvidia-smi -r -i 3",
    ],
    "gpu-row-remap-failure": [
        *DRAIN,
        "nvidia-smi -q -d ROW_REMAPPER -i 3",
        "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i 3",
        "Xid 64",
        "RMA",
    ],
    "gpu-nvlink-down": [
        *DRAIN,
        "nvidia-smi nvlink -s -i 3",
        "nvidia-smi nvlink -e -i 3",
        "nvidia-smi topo -m",
        "Xid 74",
        "systemctl status nvidia-fabricmanager",
    ],
    "gpu-temperature-high": [
        *DRAIN,
        "nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i 3",
        "ipmitool sdr type Fan",
    ],
    "gpu-pcie-link-downtrained": [
        *DRAIN,
        "pcie.link.width.current,pcie.link.width.max --format=csv -i 3",
        "lspci -vvv",
        "nvidia-smi topo -m",
    ],
    "node-gpu-count-below-inventory": [
        *DRAIN,
        "nvidia-smi -L",
        "lspci -d 10de: -nn",
        "dmesg -T | grep -i xid",
        "Xid 79",
    ],
    "node-agent-stale": [
        "scontrol update nodename=gpu-a-01 state=drain reason=",
        "systemctl status fleetwatch-agent",
        "journalctl -u fleetwatch-agent",
        "ping -c 3 gpu-a-01",
        "fleetwatch token create gpu-a-01",
    ],
    "node-clock-skew": [
        "ssh gpu-a-01 timedatectl",
        "ssh gpu-a-01 chronyc tracking",
        "chronyc makestep",
    ],
    "storage-latency-high": ["ibstat", "scontrol update nodename=gpu-a-01 state=drain reason="],
    "node-ib-port-down": [
        "scontrol update nodename=gpu-a-01 state=drain reason=",
        "kubectl cordon gpu-a-01",
        "ibstat",
        "perfquery -x",
        "phys_state",
    ],
    "gpu-row-remap-pending": [
        *DRAIN,
        "nvidia-smi -q -d ROW_REMAPPER -i 3",
        "nvidia-smi -r -i 3",
        "Xid 63",
    ],
    "gpu-power-throttling": [
        "nvidia-smi -q -d PERFORMANCE,POWER -i 3",
        "scontrol update nodename=gpu-a-01 state=drain reason=",
        "0x80",
    ],
}
EXPECTED["gpu-repeat-offender"] = [
    *DRAIN,
    "dmesg -T | grep -i xid",
    "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i 3",
    "dcgmi diag -r 3",
    "nvidia-bug-report.sh",
    "RMA",
]
EXPECTED["node-repeat-offender"] = [
    *DRAIN,
    "ipmitool sel elist",
    "dcgmi diag -r 3",
    "nvidia-bug-report.sh",
]
EXPECTED["node-quarantine-blocked"] = [
    "fleetwatch lifecycle breaker",
    "/api/v1/automation",
    "fleetwatch lifecycle quarantine gpu-a-01",
    "fleetwatch lifecycle breaker-reset",
    "action_mode",
]
EXPECTED["node-remediation-failed"] = [
    "fleetwatch lifecycle show gpu-a-01",
    "scontrol show node gpu-a-01",
    "kubectl get node gpu-a-01",
    "fleetwatch lifecycle retry",
    "/api/v1/actions/",
]
EXPECTED["gpu-unresponsive"] = [
    *DRAIN,
    "timeout 30 nvidia-smi -q -i 3",
    "nvidia-smi -r -i 3",
    "timed out",
    "Xid 119/120",
    "nvidia-bug-report.sh",
]
EXPECTED["node-ib-port-flapping"] = [
    *DRAIN,
    "ibstat",
    "perfquery -x",
    "link_downed",
    "ib_write_bw",
]
BY_RULE: dict[str, list[str]] = {
    "storage-latency-high": ["iostat -x nvme0n1 5 3", "smartctl -a /dev/nvme0n1"],
    "storage-nfs-latency-high": [
        "nfsiostat 5 3 /shared",
        "cat /proc/self/mountstats",
        "nfsstat -c",
    ],
}
NAMES_NVIDIA_DOC = {name for name in EXPECTED if name.startswith(("gpu-", "node-gpu"))}


def sample_alert(rule: dict[str, Any]) -> RunbookContext:
    """A firing instance of ``rule`` with the labels the evaluator gives its target."""
    condition = rule["condition"]
    target = condition.get("target", "gpu")
    labels = {
        "hostname": "gpu-a-01",
        "cluster": "a",
        "alertname": rule["name"],
        "severity": rule["severity"],
        "owner_team": rule["owner_team"],
    }
    if target == "gpu":
        labels |= {"gpu_index": "3", "gpu_uuid": "GPU-8f2c", "gpu_model": "NVIDIA H100 80GB HBM3"}
    labels |= {"disk": {"device": "nvme0n1"}, "nfs": {"mountpoint": "/shared"}}.get(target, {})
    at = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    inst = AlertInstance(
        id=42,
        labels=labels,
        value=2.0,
        state="firing",
        summary=f"{rule['name']} on gpu-a-01",
        description="",
        fired_at=at,
        active_since=at,
    )
    spec = AlertRule(
        name=rule["name"], severity=rule["severity"], owner_team=rule["owner_team"], spec=rule
    )
    return RunbookContext.from_alert(inst, spec)


def test_every_runbook_of_the_default_pack_is_shipped_and_nothing_else() -> None:
    named = {r["runbook"] for r in RULES}
    shipped = {p.stem for p in RUNBOOKS.glob("*.md")}
    assert named == set(EXPECTED)
    assert shipped == named


def test_the_default_runbooks_dir_is_the_shipped_folder(tmp_path: Path) -> None:
    assert load_settings(data_dir=tmp_path).runbooks_dir == RUNBOOKS


@pytest.mark.parametrize("rule", RULES, ids=[r["name"] for r in RULES])
def test_it_renders_without_warnings_and_names_its_commands(rule: dict[str, Any]) -> None:
    markdown = (RUNBOOKS / f"{rule['runbook']}.md").read_text()
    out = render_markdown(markdown, sample_alert(rule).template_vars())
    text = html.unescape(out.html)

    assert out.warnings == []
    assert "(unknown)" not in text
    missing = [
        c for c in EXPECTED[rule["runbook"]] + BY_RULE.get(rule["name"], []) if c not in text
    ]
    assert missing == []
    assert f"{rule['name']} on gpu-a-01" in text  # the alert's summary
    assert 'href="/alerts/42"' in out.html
    if rule["runbook"] in NAMES_NVIDIA_DOC:
        assert '<strong>"Xid Errors"</strong>' in text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_it_renders_with_placeholders_when_viewed_without_an_alert(name: str) -> None:
    out = render_markdown((RUNBOOKS / f"{name}.md").read_text(), None)
    assert out.warnings == []
    assert '<span class="rb-unknown">&lt;node.hostname&gt;</span>' in out.html
    assert out.html.startswith("<h1>")
