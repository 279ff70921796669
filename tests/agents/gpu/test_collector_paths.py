"""``--procfs`` and ``--sysfs`` reach the GPU collectors: an agent in a container names host
PIDs from the host's ``/proc`` and reads GPU NUMA nodes from the host's ``/sys``, never its
own."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from agents.collectors.nvidia_smi import NvidiaSmiCollector
from agents.sources import SourcePaths, choose_collector
from tests.agents.gpu.conftest import FakeSmi
from tests.agents.gpu.fake_pynvml import FakeNvml
from tests.shared_fixtures import fixture_path

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
T4 = "tesla-t4-driver515.xml"  # one compute process, pid 5762; bus 00000000:00:1E.0


def _host_tree(root: Path) -> SourcePaths:
    """A host's ``/proc`` with pid 5762 named ``trainer``, and its ``/sys`` putting the T4 on
    NUMA node 1."""
    (root / "proc/5762").mkdir(parents=True)
    (root / "proc/5762/comm").write_text("trainer\n")
    device = root / "sys/bus/pci/devices/0000:00:1e.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    return SourcePaths(procfs=root / "proc", sysfs=root / "sys")


def test_nvml_names_processes_from_procfs_and_reads_numa_from_sysfs(
    capture_nvml: Callable[[str], FakeNvml], tmp_path: Path
) -> None:
    fake = capture_nvml(T4)
    fake.fail("nvmlDeviceGetNumaNodeId", 13)  # older driver: NUMA only from sysfs
    collector, _ = choose_collector("nvml", _host_tree(tmp_path))
    [gpu] = collector.inventory()
    assert [(p["pid"], p["name"]) for p in gpu["processes"]] == [(5762, "trainer")]  # type: ignore[typeddict-item]
    topology = collector.topology(NOW)
    assert topology is not None and topology["devices"][0]["numa_node"] == 1


def test_auto_passes_the_paths_to_the_nvml_collector_it_picks(
    capture_nvml: Callable[[str], FakeNvml], tmp_path: Path
) -> None:
    capture_nvml(T4)
    paths = _host_tree(tmp_path)
    collector, _ = choose_collector("auto", paths)
    assert (collector.proc_root, collector.sys_root) == (  # type: ignore[attr-defined]
        str(paths.procfs),
        str(paths.sysfs),
    )


def test_nvidia_smi_reads_process_owners_from_procfs(fake_smi: FakeSmi, tmp_path: Path) -> None:
    fake_smi.prints(fixture_path(f"nvidia-smi-xml/{T4}"))
    paths = _host_tree(tmp_path / "host")
    collector, _ = choose_collector(
        "nvidia-smi",
        SourcePaths(procfs=paths.procfs, sysfs=paths.sysfs, nvidia_smi=str(fake_smi.path)),
    )
    assert isinstance(collector, NvidiaSmiCollector)
    assert collector.proc_root == str(paths.procfs)
    [process] = collector.inventory()[0]["processes"]  # type: ignore[typeddict-item]
    assert process["pid"] == 5762 and process["user"] is not None  # owner of <procfs>/5762
