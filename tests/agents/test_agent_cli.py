"""``fleetwatch-agent`` on the command line: a payload without a server, clear usage errors, and
one real push with ``--once``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agents.main import build_parser
from tests.agents.agent_receiver import Receiver
from tests.shared_fixtures import fixture_path

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "FLEETWATCH_AGENT_TOKEN"}
    environment.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "agents.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=environment,
    )


def test_once_print_writes_one_valid_payload_without_server_or_token() -> None:
    done = _cli("--collector", "simulated", "--once", "--print", "--hostname", "gpu-a-017")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["schema_version"] == 1
    assert payload["node"]["hostname"] == "gpu-a-017"
    assert len(payload["gpus"]) == len(payload["samples"]) == 8
    assert payload["sent_at"].endswith("Z")


def test_sim_gpus_and_labels_shape_the_printed_payload() -> None:
    done = _cli(
        "--collector", "simulated", "--sim-gpus", "4", "--label", "rack=r07",
        "--label", "team=llm", "--once", "--print",
    )  # fmt: skip
    payload = json.loads(done.stdout)
    assert payload["node"]["labels"] == {"rack": "r07", "team": "llm"}
    assert {g["name"] for g in payload["gpus"]} == {"NVIDIA L40S"}


def test_without_a_driver_auto_reports_no_gpus_but_still_storage_and_says_why() -> None:
    done = _cli("--once", "--print")
    assert done.returncode == 0, done.stderr
    assert "no NVIDIA driver found" in done.stderr
    payload = json.loads(done.stdout)
    assert payload["gpus"] == [] and payload["samples"] == []  # never simulated data
    assert payload["collection"]["collector"] == "none"
    assert "no NVIDIA driver found" in payload["collection"]["errors"][0]["message"]
    assert "disks" in payload


def test_asking_for_nvml_explicitly_fails_clearly_instead_of_simulating() -> None:
    done = _cli("--collector", "nvml", "--once", "--print")
    assert done.returncode == 2
    assert "argument --collector" in done.stderr and "no NVIDIA driver found" in done.stderr
    assert done.stdout == ""


def test_label_without_equals_is_a_usage_error_naming_the_argument() -> None:
    done = _cli("--collector", "simulated", "--label", "rack", "--once", "--print")
    assert done.returncode == 2
    assert "argument --label" in done.stderr and "KEY=VALUE" in done.stderr


def test_bad_numbers_are_usage_errors_naming_the_argument() -> None:
    done = _cli("--interval", "-1")
    assert done.returncode == 2 and "argument --interval" in done.stderr
    done = _cli("--sim-gpus", "many")
    assert done.returncode == 2 and "argument --sim-gpus" in done.stderr
    for value in ("0.001", "-1", "nan", "inf", "soon"):
        done = _cli("--watch-interval", value)
        assert done.returncode == 2 and "argument --watch-interval" in done.stderr, value
    assert "must be 0 (off) or 0.1 to" in _cli("--watch-interval", "0.05").stderr


def test_pushing_needs_a_server_and_a_token(tmp_path: Path) -> None:
    done = _cli("--collector", "simulated", "--once", "--spool-dir", str(tmp_path))
    assert done.returncode == 2 and "--server" in done.stderr
    done = _cli("--collector", "simulated", "--once", "--server", "http://127.0.0.1:9")
    assert done.returncode == 2 and "--token" in done.stderr


def test_once_pushes_one_batch_with_the_token_from_a_file(
    tmp_path: Path, receiver: Receiver
) -> None:
    token = tmp_path / "token"
    token.write_text("fwt_from_file\n")
    done = _cli(
        "--collector", "simulated", "--once", "--server", receiver.url,
        "--token-file", str(token), "--spool-dir", str(tmp_path / "spool"),
        "--hostname", "gpu-a-017",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (request,) = receiver.requests
    assert request.headers["Authorization"] == "Bearer fwt_from_file"
    assert list((tmp_path / "spool").iterdir()) == []


def test_once_exits_1_and_keeps_the_batch_when_the_server_is_unreachable(
    tmp_path: Path, refused_url: str
) -> None:
    done = _cli(
        "--collector", "simulated", "--once", "--server", refused_url,
        "--spool-dir", str(tmp_path), "--hostname", "gpu-a-017",
        env={"FLEETWATCH_AGENT_TOKEN": "fwt_env"},
    )  # fmt: skip
    assert done.returncode == 1
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_nvidia_smi_collector_prints_the_captured_machine_with_its_topology(tmp_path: Path) -> None:
    xml = fixture_path("nvidia-smi-xml/h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml")
    topo = fixture_path("topo/h100-8gpu-nv18-condensed.txt")
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\ncase "$*" in *topo*) cat "{topo}" ;; *) cat "{xml}" ;; esac\n')
    script.chmod(0o755)
    done = _cli("--collector", "nvidia-smi", "--nvidia-smi", str(script), "--once", "--print")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [g["name"] for g in payload["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 8
    assert payload["gpus"][0]["pci_bus_id"] == "00000000:04:00.0"
    assert payload["samples"][0]["power_w"] == 70.93
    assert payload["samples"][0]["temp_c"] == 33
    assert payload["collection"]["collector"] == "nvidia-smi"
    assert {link["type"] for link in payload["topology"]["links"]} == {"NV18"}
    assert len(payload["topology"]["links"]) == 28


def test_host_paths_given_to_a_simulated_node_are_reported_as_ignored(tmp_path: Path) -> None:
    done = _cli("--collector", "sim", "--procfs", str(tmp_path), "--once", "--print")
    assert done.returncode == 0, done.stderr
    assert "--procfs ignored: a simulated node simulates its host too" in done.stderr


def test_help_states_each_numeric_default_the_parser_uses() -> None:
    """What ``--help`` says is what the agent does: the README quotes these defaults
    (``--interval`` 10 s, ``--batch-interval`` 20 s …); a default changed in the parser and not
    in its help (as ``--batch-interval`` 10 → 20 once was) fails here."""
    parser = build_parser()
    numeric = [
        action
        for action in parser._actions
        if isinstance(action.default, int | float) and not isinstance(action.default, bool)
    ]
    assert {a.dest for a in numeric} >= {"interval", "batch_interval", "nvlink_interval"}
    for action in numeric:
        default = action.default
        shown = f"{default // 2**20}M" if action.dest == "spool_max_bytes" else f"{default:g}"
        assert f"default {shown}" in (action.help or ""), (action.option_strings, action.help)
    assert parser.get_default("interval") == 10 and parser.get_default("batch_interval") == 20
    assert "default 20" in " ".join(_cli("--help").stdout.split())
