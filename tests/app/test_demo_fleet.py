"""The demo's fleet shape and the console script's behaviour without the server installed."""

from __future__ import annotations

import subprocess
import sys

from app.demo import demo_fleet


def test_the_default_demo_fleet_mixes_hgx_and_pcie_nodes_in_pods() -> None:
    fleet = demo_fleet(16, None)
    assert [n["gpu_count"] for n in fleet[:4]] == [8, 8, 8, 4]
    assert sum(1 for n in fleet if n["gpu_count"] == 4) == 4
    assert {n["labels"]["ib_pod"] for n in fleet} == {"pod-01", "pod-02", "pod-03", "pod-04"}  # type: ignore[index]
    assert len({n["hostname"] for n in fleet}) == 16


def test_a_gpu_count_makes_the_demo_fleet_uniform() -> None:
    assert {n["gpu_count"] for n in demo_fleet(6, 2)} == {2}


def test_fleetwatch_without_the_server_dependencies_says_what_to_install() -> None:
    code = "import sys; sys.modules['typer'] = None; from app.entry import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "pip install 'fleetwatch[server]'" in done.stderr
    assert "Traceback" not in done.stderr
