"""Each dcgm-exporter capture in ../shared/fixtures/dcgm-exporter read into Fleetwatch's model
with exact values: GPUs, per-GPU sample values, nulls for DCGM blanks, MIG instances under
their GPU, Xid readings, pod labels, and every series not taken skipped with its reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.dcgm import fields
from app.dcgm.blanks import blank_reason
from app.dcgm.parse import parse
from app.dcgm.targets import Target
from app.dcgm.translate import Translation, XidReading, translate
from tests.shared_fixtures import fixture_names, fixture_path

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
TARGET = Target(url="http://10.0.0.9:9400/metrics")
MiB = 2**20
H100 = "NVIDIA H100 80GB HBM3"
PROFILING = fields.NOT_TAKEN["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]


def uuid(n: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{n:012d}"


def read(name: str, target: Target = TARGET) -> Translation:
    text = fixture_path(f"dcgm-exporter/{name}").read_text()
    return translate(parse(text), target=target, scraped_at=AT)


def metrics(t: Translation) -> dict[str, dict[str, Any]]:
    """GPU UUID → its sample's metric values."""
    return {
        s["gpu_uuid"]: {k: v for k, v in s.items() if k not in ("gpu_uuid", "sampled_at")}
        for s in t.samples
    }


def skipped(t: Translation) -> set[tuple[str, str, int]]:
    return {(s["series"], s["reason"], s["count"]) for s in t.skipped}


def test_every_capture_has_a_test_here() -> None:
    tested = {
        "a100-mig-1g5gb-gpu-and-gi-metrics.prom",
        "h100-8gpu-eks-dynamo-vllm-pods-sampled.prom",
        "h100-8gpu-eks-idle-sampled.prom",
        "h100-mig-1g10gb-kserve-pods-excerpt.prom",
        "mixed-rtx2000ada-a30-mig-node-excerpt.prom",
        "readme-quickstart-blank-sentinel-memtemp.prom",
        "t400-injected-xid42-count-window.prom",
        "v100-sxm2-4gpu-counter-and-gauge-excerpt.prom",
    }
    fixture_path("dcgm-exporter/h100-8gpu-eks-idle-sampled.prom")  # skips where ../shared is absent
    assert set(fixture_names("dcgm-exporter", ".prom")) == tested


def test_a100_mig_gpu_series_fill_the_sample_and_the_instance_is_listed_under_its_gpu() -> None:
    t = read("a100-mig-1g5gb-gpu-and-gi-metrics.prom")
    assert t.hostname == "gpu-host-01"
    assert t.driver_version is None
    assert t.gpus == [
        {
            "uuid": uuid(1),
            "index": 0,
            "name": None,
            "pci_bus_id": None,
            "mem_total_bytes": None,
            "mig_mode": "enabled",
            "state": "ok",
            "mig_instances": [{"gpu_instance_id": 13, "profile": "1g.5gb"}],
        }
    ]
    assert metrics(t) == {
        uuid(1): {
            "sm_clock_mhz": 1215,
            "mem_clock_mhz": 1215,
            "mem_temp_c": 69,
            "temp_c": 61,
            "power_w": 409.692,
            "energy_j": 319159.391,
            "pcie_replay_count": 0,
            "mem_free_bytes": 35690 * MiB,
            "mem_used_bytes": 4845 * MiB,
            "pcie_tx_bytes_per_s": 33011804,
            "pcie_rx_bytes_per_s": 97863601,
        }
    }
    assert t.xids == [
        XidReading(uuid(1), None, None, "last", 0),
        XidReading(uuid(1), None, 13, "last", 0),
    ]
    assert skipped(t) == {
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            fields.NOT_TAKEN["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"],
            1,
        ),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", fields.NOT_TAKEN["DCGM_FI_DEV_VGPU_LICENSE_STATUS"], 1),
        ("DCGM_FI_PROF_DRAM_ACTIVE", PROFILING, 2),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", PROFILING, 2),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", PROFILING, 2),
    }
    assert (t.series_total, t.series_stored) == (21, 13)
    assert t.blanks == [] and t.workloads == []


def _h100_expected(temps: list[int], powers: list[float], host: str) -> tuple[Any, Any]:
    buses = ["53", "64", "75", "86", "97", "A8", "B9", "CA"]
    gpus = [
        {
            "uuid": uuid(i + 1),
            "index": i,
            "name": H100,
            "pci_bus_id": f"00000000:{bus}:00.0",
            "mem_total_bytes": None,
            "mig_mode": None,
            "state": "ok",
            "mig_instances": None,
        }
        for i, bus in enumerate(buses)
    ]
    values = {}
    for i in range(8):
        one: dict[str, Any] = {"temp_c": temps[i], "power_w": powers[i], "util_gpu_pct": 0}
        if i < 6:  # the sampled capture has MEM_COPY_UTIL for GPUs 0-5 only
            one["util_mem_pct"] = 0
        values[uuid(i + 1)] = one
    return gpus, values


def test_h100_vllm_pods_capture_keeps_the_pod_on_gpu_0() -> None:
    t = read("h100-8gpu-eks-dynamo-vllm-pods-sampled.prom")
    gpus, values = _h100_expected(
        [30, 29, 26, 29, 28, 26, 28, 26],
        [113.611, 68.347, 65.709, 67.316, 68.717, 65.742, 67.328, 66.997],
        "gpu-host-01",
    )
    assert t.hostname == "gpu-host-01"
    assert t.driver_version == "580.105.08"
    assert t.gpus == gpus
    assert metrics(t) == values
    assert t.workloads == [
        {
            "gpu_uuid": uuid(1),
            "gpu_index": 0,
            "gpu_instance_id": None,
            "namespace": "dynamo-workload",
            "pod": "vllm-agg-0-vllmdecodeworker-s65j5",
            "container": "main",
        }
    ]
    assert (t.series_total, t.series_stored, t.skipped, t.xids) == (30, 30, [], [])


def test_h100_idle_capture_names_the_node_by_its_ec2_hostname() -> None:
    t = read("h100-8gpu-eks-idle-sampled.prom")
    gpus, values = _h100_expected(
        [27, 28, 29, 29, 28, 26, 28, 27],
        [67.433, 70.849, 110.786, 67.933, 69.14, 67.033, 67.156, 68.495],
        "ip-10-0-0-1.ec2.internal",
    )
    assert t.hostname == "ip-10-0-0-1.ec2.internal"
    assert t.gpus == gpus
    assert metrics(t) == values
    assert [(w["gpu_index"], w["pod"]) for w in t.workloads] == [
        (2, "vllm-agg-0-vllmdecodeworker-dkb9q")
    ]
    assert (t.series_total, t.series_stored, t.skipped) == (30, 30, [])


def test_h100_mig_kserve_instances_sit_under_gpu_0_with_their_pods() -> None:
    t = read("h100-mig-1g10gb-kserve-pods-excerpt.prom")
    assert t.hostname == "gpu-host-01"
    assert t.driver_version == "535.129.03"
    assert t.gpus == [
        {
            "uuid": uuid(1),
            "index": 0,
            "name": H100,
            "pci_bus_id": "00000000:1A:00.0",
            "mem_total_bytes": None,
            "mig_mode": "enabled",
            "state": "ok",
            "mig_instances": [
                {"gpu_instance_id": 7, "profile": "1g.10gb"},
                {"gpu_instance_id": 8, "profile": "1g.10gb"},
                {"gpu_instance_id": 9, "profile": "1g.10gb"},
            ],
        }
    ]
    assert metrics(t) == {uuid(1): {}}  # read at the scrape, nothing it serves is a column
    pods = [(w["gpu_instance_id"], w["namespace"], w["pod"], w["container"]) for w in t.workloads]
    assert pods == [
        (
            7,
            "model-playground-stg",
            "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl",
            "kserve-container",
        ),
        (
            9,
            "model-playground-stg",
            "tts-predictor-00011-deployment-5554f75554-8j8pl",
            "kserve-container",
        ),
    ]
    assert skipped(t) == {("DCGM_FI_PROF_GR_ENGINE_ACTIVE", PROFILING, 3)}


def test_mixed_node_reads_both_models_and_the_lowercase_hostname_label() -> None:
    t = read("mixed-rtx2000ada-a30-mig-node-excerpt.prom")
    assert t.hostname == "dcgm-exporter-pod01"
    assert [(g["index"], g["name"], g["pci_bus_id"], g["mig_instances"]) for g in t.gpus] == [
        (1, "NVIDIA RTX 2000 Ada Generation", "00000000:B1:00.0", None),
        (2, "NVIDIA A30", "00000000:CA:00.0", [{"gpu_instance_id": 3, "profile": "1g.6gb"}]),
    ]
    assert metrics(t) == {
        uuid(1): {"util_dec_pct": 46, "util_enc_pct": 9, "mem_free_bytes": 11275 * MiB},
        uuid(2): {},
    }
    assert t.workloads == [
        {
            "gpu_uuid": uuid(2),
            "gpu_index": 2,
            "gpu_instance_id": 3,
            "namespace": "default",
            "pod": "triton-server-f7cb5d77-95xcf",
            "container": "triton-server",
        }
    ]
    assert skipped(t) == {("DCGM_FI_DEV_FB_FREE", fields.MIG_VALUE, 1)}


def test_a_configured_hostname_wins_over_the_exporters_pod_name() -> None:
    target = Target(url=TARGET.url, hostname="gpu-node-07", labels={"cluster": "a"})
    t = read("mixed-rtx2000ada-a30-mig-node-excerpt.prom", target)
    assert (t.hostname, t.node_labels, len(t.gpus)) == ("gpu-node-07", {"cluster": "a"}, 2)


def test_readme_blank_sentinel_is_null_and_the_elision_lines_are_skipped() -> None:
    t = read("readme-quickstart-blank-sentinel-memtemp.prom")
    assert t.hostname == "10.0.0.9"  # no Hostname label: the endpoint's host
    assert [(g["uuid"], g["index"]) for g in t.gpus] == [(uuid(1), 0)]
    assert metrics(t) == {uuid(1): {"sm_clock_mhz": 139, "mem_clock_mhz": 405, "mem_temp_c": None}}
    assert t.blanks == [
        {
            "series": "DCGM_FI_DEV_MEMORY_TEMP",
            "reason": "not supported (DCGM_INT64_BLANK+2)",
            "count": 1,
        }
    ]
    assert [(s["series"], s["reason"][:40]) for s in t.skipped] == [
        ("line 11", "not Prometheus text: invalid metric name"),
        ("line 7", "not Prometheus text: invalid metric name"),
    ]
    assert (t.series_total, t.series_stored) == (5, 3)


def test_t400_xid_count_window_is_read_under_either_name() -> None:
    t = read("t400-injected-xid42-count-window.prom")
    assert (t.hostname, t.driver_version) == ("workstation", "545.29.02")
    assert [(g["uuid"], g["index"], g["name"]) for g in t.gpus] == [(uuid(1), 0, "NVIDIA T400 4GB")]
    assert t.xids == [XidReading(uuid(1), None, None, "count", 42, 1, 300000)]
    assert metrics(t) == {uuid(1): {}}
    assert (t.series_total, t.series_stored, t.skipped) == (1, 1, [])


def test_v100_counter_typed_series_and_the_management_power_limit() -> None:
    t = read("v100-sxm2-4gpu-counter-and-gauge-excerpt.prom")
    assert t.hostname == "gpu-host-02"
    assert [(g["index"], g["uuid"], g["name"], g["pci_bus_id"]) for g in t.gpus] == [
        (0, uuid(3), "Tesla V100-SXM2-32GB", None),
        (1, uuid(4), "Tesla V100-SXM2-32GB", None),
        (2, uuid(1), "Tesla V100-SXM2-32GB", None),
        (3, uuid(2), "Tesla V100-SXM2-32GB", None),
    ]
    assert metrics(t) == {
        uuid(3): {"pcie_replay_count": 0, "util_gpu_pct": 0},
        uuid(4): {"pcie_replay_count": 0},
        uuid(1): {"power_limit_w": 300.0, "pcie_replay_count": 0},
        uuid(2): {"power_limit_w": 300.0, "pcie_replay_count": 0},
    }
    assert (t.series_total, t.series_stored, t.skipped) == (7, 7, [])


# --- what no capture shows ----------------------------------------------------------------

LABELS = 'gpu="0",UUID="GPU-a",Hostname="n1"'


def read_text(text: str) -> Translation:
    return translate(parse(text), target=TARGET, scraped_at=AT)


def test_garbage_and_unknown_series_are_skipped_with_reasons_and_the_rest_is_kept() -> None:
    t = read_text(
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 41\n"
        "this is { not prometheus\n"
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 250.5\n"
        f"SOMETHING_ELSE{{{LABELS}}} 3\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} 7\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="x",UUID="GPU-b",Hostname="n1"} 7\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-c",Hostname="other"} 7\n'
        f"DCGM_FI_DEV_XID_ERRORS{{{LABELS}}} 1.5\n"
    )
    assert t.hostname == "n1"
    assert metrics(t) == {"GPU-a": {"temp_c": 41, "power_w": 250.5}}
    assert skipped(t) == {
        ("line 2", "not Prometheus text: could not convert string to float: '{'", 1),
        ("SOMETHING_ELSE", fields.UNKNOWN, 1),
        ("DCGM_FI_DEV_GPU_UTIL", "no UUID label naming a GPU", 1),
        ("DCGM_FI_DEV_GPU_UTIL", "its gpu label is not a GPU index 0-1023", 1),
        ("DCGM_FI_DEV_GPU_UTIL", "its Hostname 'other' is not this endpoint's node", 1),
        ("DCGM_FI_DEV_XID_ERRORS", "its value is not an Xid number", 1),
    }


def test_one_series_per_pod_sharing_a_gpu_is_one_reading_and_a_conflict_keeps_the_first() -> None:
    t = read_text(
        f'DCGM_FI_DEV_GPU_TEMP{{{LABELS},pod="a"}} 41\n'
        f'DCGM_FI_DEV_GPU_TEMP{{{LABELS},pod="b"}} 41\n'
        f'DCGM_FI_DEV_POWER_USAGE{{{LABELS},pod="a"}} 100\n'
        f'DCGM_FI_DEV_POWER_USAGE{{{LABELS},pod="b"}} 120\n'
    )
    assert metrics(t) == {"GPU-a": {"temp_c": 41, "power_w": 100}}
    assert [w["pod"] for w in t.workloads] == ["a", "b"]
    assert skipped(t) == {
        ("DCGM_FI_DEV_POWER_USAGE", "another value for this GPU in the same scrape (first kept)", 1)
    }


def test_the_enforced_power_limit_and_nvml_pcie_rate_win_over_their_stand_ins() -> None:
    t = read_text(
        f"DCGM_FI_DEV_POWER_MGMT_LIMIT{{{LABELS}}} 700\n"
        f"DCGM_FI_DEV_ENFORCED_POWER_LIMIT{{{LABELS}}} 650\n"
        f"DCGM_FI_PROF_PCIE_TX_BYTES{{{LABELS}}} 5000\n"
        f"DCGM_FI_DEV_PCIE_TX_THROUGHPUT{{{LABELS}}} 4\n"
        f"DCGM_FI_DEV_FB_TOTAL{{{LABELS}}} 81559\n"
    )
    assert metrics(t) == {"GPU-a": {"power_limit_w": 650, "pcie_tx_bytes_per_s": 4096}}
    assert t.gpus[0]["mem_total_bytes"] == 81559 * MiB
    assert skipped(t) == {
        (
            "DCGM_FI_DEV_POWER_MGMT_LIMIT",
            "DCGM_FI_DEV_ENFORCED_POWER_LIMIT is served and taken instead",
            1,
        ),
        (
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT is served and taken instead",
            1,
        ),
    }


@pytest.mark.parametrize(
    ("value", "kind", "reason"),
    [
        (9223372036854775792, "int64", "blank (DCGM_INT64_BLANK)"),
        (9223372036854775793, "int64", "not found (DCGM_INT64_BLANK+1)"),
        (9223372036854775794, "int64", "not supported (DCGM_INT64_BLANK+2)"),
        (9223372036854775795, "int64", "not permissioned (DCGM_INT64_BLANK+3)"),
        (9.223372036854776e18, "int64", "blank (DCGM_INT64_BLANK or above)"),
        (140737488355330.0, "fp64", "not supported (DCGM_FP64_BLANK+2)"),
        (2147483632, "int64", "blank (DCGM_INT32_BLANK)"),
        (2147483635, "int64", "not permissioned (DCGM_INT32_BLANK+3)"),
        (140737488355330, "int64", None),  # a large count, not a double's sentinel
        (409.692, "fp64", None),
        (0, "int64", None),
    ],
)
def test_dcgm_blank_sentinels(value: float, kind: fields.Kind, reason: str | None) -> None:
    assert blank_reason(value, kind) == reason


def test_a_blank_in_a_double_field_is_null() -> None:
    t = read_text(f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 140737488355328.000000\n")
    assert metrics(t) == {"GPU-a": {"power_w": None}}
    assert t.blanks[0]["reason"] == "blank (DCGM_FP64_BLANK)"


def test_the_field_table_names_catalog_metrics_and_no_field_twice() -> None:
    fields.check_table()
    names = [f.dcgm for f in fields.SAMPLE_FIELDS]
    assert len(names) == len(set(names))
    assert not set(names) & set(fields.NOT_TAKEN)


def test_the_old_kubernetes_label_names_are_read_too() -> None:
    t = read_text(
        f'DCGM_FI_DEV_GPU_TEMP{{{LABELS},pod_name="p",pod_namespace="ns",container_name="c"}} 41\n'
    )
    assert [(w["namespace"], w["pod"], w["container"]) for w in t.workloads] == [("ns", "p", "c")]


def test_a_hostname_label_too_long_for_a_host_name_is_not_the_nodes_name() -> None:
    long = "a" * 300
    text = f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{uuid(1)}",Hostname="{long}"}} 41\n'
    t = translate(parse(text), target=TARGET, scraped_at=AT)
    # Named by the URL's host, as a page without a Hostname is, and the reading kept.
    assert t.hostname == "10.0.0.9"
    assert metrics(t) == {uuid(1): {"temp_c": 41}}
    assert t.skipped == []
