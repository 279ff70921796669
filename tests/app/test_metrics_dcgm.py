"""``GET /metrics`` serves each fresh GPU's newest values under dcgm-exporter's names, types,
units and labels, through a real HTTP server on Postgres and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.config import SettingsError, load_settings
from tests.app.helpers import post_batch
from tests.app.metrics_helpers import lines_with, scrape, value
from tests.conftest import make_settings
from tests.factories import batch, create_token, gpu, iso, sample, store_payload
from tests.live_server import LiveServer

MiB = 2**20
HOST = "gpu-host-01"
NODE_LABELS = {"cluster": "a", "ib_pod": "pod-2", "rack": "r07", "team": "llm"}
GPU0 = gpu(0, hostname=HOST, unavailable={"fan_pct": "NOT_SUPPORTED"})
GPU1 = gpu(1, hostname=HOST)
#: GPU 0's labels as served: dcgm-exporter's, then the allowed node labels (``team`` is not).
LABELS = (
    f'gpu="0",UUID="{GPU0["uuid"]}",pci_bus_id="00000000:18:00.0",device="nvidia0",'
    'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-host-01",'
    'DCGM_FI_DRIVER_VERSION="570.133.20",cluster="a",ib_pod="pod-2",rack="r07"'
)
#: What GPU 0 reports (fan speed not supported: absent from the sample).
REPORTED = {
    "util_gpu_pct": 37,
    "util_mem_pct": 12,
    "util_enc_pct": 0,
    "util_dec_pct": 3,
    "mem_used_bytes": 4845 * MiB + 123,
    "mem_free_bytes": 35690 * MiB,
    "mem_reserved_bytes": 489 * MiB,
    "power_w": 409.692,
    "power_limit_w": 700,
    "energy_j": 319159.391,
    "temp_c": 61,
    "mem_temp_c": 69,
    "sm_clock_mhz": 1215,
    "mem_clock_mhz": 1593,
    "graphics_clock_mhz": 1215,
    "pstate": 0,
    "clocks_event_reasons": 0x40,
    "pcie_tx_bytes_per_s": 300 * 1024,
    "pcie_rx_bytes_per_s": 97 * 1024 + 500,
    "nvlink_tx_bytes_per_s": 2.5e9,
    "nvlink_rx_bytes_per_s": 1.25e9,
    "ecc_corrected_volatile_count": 2,
    "ecc_uncorrected_volatile_count": 0,
    "ecc_corrected_aggregate_count": 5,
    "ecc_uncorrected_aggregate_count": 0,
    "pcie_replay_count": 3,
    "pcie_link_gen": 5,
    "pcie_link_gen_max": 5,
    "pcie_link_width": 16,
    "pcie_link_width_max": 16,
    "retired_pages_sbe_count": 0,
    "retired_pages_dbe_count": 0,
    "retired_pages_pending": 0,
    "remapped_rows_correctable_count": 1,
    "remapped_rows_uncorrectable_count": 0,
    "remapped_rows_pending": 0,
    "remapped_rows_failure": 0,
}
#: Metric → the value as served, in DCGM's unit (MiB, mJ, W, MHz, °C, KB/s, B/s).
SERVED = {
    "DCGM_FI_DEV_GPU_UTIL": "37",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "12",
    "DCGM_FI_DEV_ENC_UTIL": "0",
    "DCGM_FI_DEV_DEC_UTIL": "3",
    "DCGM_FI_DEV_FB_USED": "4845",
    "DCGM_FI_DEV_FB_FREE": "35690",
    "DCGM_FI_DEV_FB_RESERVED": "489",
    "DCGM_FI_DEV_FB_TOTAL": "81559",
    "DCGM_FI_DEV_POWER_USAGE": "409.692",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "700.0",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "319159391",
    "DCGM_FI_DEV_GPU_TEMP": "61",
    "DCGM_FI_DEV_MEMORY_TEMP": "69",
    "DCGM_FI_DEV_SM_CLOCK": "1215",
    "DCGM_FI_DEV_MEM_CLOCK": "1593",
    "DCGM_FI_DEV_PSTATE": "0",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "64",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "300",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "97",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "3",
    "DCGM_FI_DEV_PCIE_LINK_GEN": "5",
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": "5",
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": "16",
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": "16",
    "DCGM_FI_PROF_NVLINK_TX_BYTES": "2.5e+09",
    "DCGM_FI_PROF_NVLINK_RX_BYTES": "1.25e+09",
    "DCGM_FI_DEV_XID_ERRORS": "0",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "2",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "0",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "5",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "0",
    "DCGM_FI_DEV_RETIRED_SBE": "0",
    "DCGM_FI_DEV_RETIRED_DBE": "0",
    "DCGM_FI_DEV_RETIRED_PENDING": "0",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "0",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "1",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "0",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "0",
}


def fleet_batch(
    at: datetime, events: list[dict[str, object]] | None = None, **gpu0: object
) -> dict[str, object]:
    """``HOST`` with GPU 0 reporting :data:`REPORTED` (updated by ``gpu0``) and GPU 1 the
    factory's defaults, sampled at ``at``."""
    payload = batch(HOST, gpus=[GPU0, GPU1], samples_per_gpu=0, labels=NODE_LABELS)
    reported = {**REPORTED, **gpu0}
    payload["samples"] = [sample(GPU0, at, **reported), sample(GPU1, at)]
    payload["events"] = events or []
    return payload


def test_it_serves_a_gpus_newest_values_in_dcgm_units_with_dcgm_labels(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, HOST)
    now = datetime.now(UTC)
    older = fleet_batch(now - timedelta(seconds=20), temp_c=80, util_gpu_pct=99)
    assert post_batch(server.url, token, older).status_code == 200
    assert post_batch(server.url, token, fleet_batch(now)).status_code == 200
    text = scrape(server.url)
    expected = {f"{name}{{{LABELS}}} {shown}" for name, shown in SERVED.items()}
    assert lines_with(text, GPU0["uuid"]) == expected
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter" in text
    assert "# TYPE DCGM_FI_DEV_FB_USED gauge" in text
    assert "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB)." in text
    # GPU 1 sent the factory's sample: no energy, no fan, no memory temperature.
    served = {line.split("{")[0] for line in lines_with(text, GPU1["uuid"])}
    assert "DCGM_FI_DEV_GPU_UTIL" in served
    assert not served & {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_MEMORY_TEMP"}


def test_a_value_not_supported_or_implausible_is_left_out_never_zero(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, HOST)
    # DCGM's int64 blank sentinel as a memory temperature is stored as NULL (the ingest's
    # plausibility check); the fan speed is not supported (absent from the sample).
    payload = fleet_batch(datetime.now(UTC), mem_temp_c=9223372036854775794)
    assert post_batch(server.url, token, payload).status_code == 200
    text = scrape(server.url)
    assert "DCGM_FI_DEV_FAN_SPEED" not in text
    served = {line.split("{")[0] for line in lines_with(text, GPU0["uuid"])}
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in served
    assert value(text, f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}}") == 61


def test_the_last_xid_is_served_and_0_before_any(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, HOST)
    now = datetime.now(UTC)

    def xid(number: int, seconds_ago: float, *, test: bool = False) -> dict[str, object]:
        at = iso(now - timedelta(seconds=seconds_ago))
        event = {"kind": "xid", "xid": number, "occurred_at": at, "gpu_uuid": GPU0["uuid"]}
        return {**event, "test": True} if test else event

    events = [xid(48, 5), xid(79, 10), xid(13, 1, test=True)]
    assert post_batch(server.url, token, fleet_batch(now, events)).status_code == 200
    text = scrape(server.url)
    assert value(text, f"DCGM_FI_DEV_XID_ERRORS{{{LABELS}}}") == 48  # the self-test's is not
    gpu1 = LABELS.replace('gpu="0"', 'gpu="1"').replace(GPU0["uuid"], GPU1["uuid"])
    gpu1 = gpu1.replace("00000000:18:00.0", "00000000:28:00.0").replace("nvidia0", "nvidia1")
    assert value(text, f"DCGM_FI_DEV_XID_ERRORS{{{gpu1}}}") == 0


def test_a_gpu_whose_newest_sample_is_older_than_the_stale_threshold_is_not_served(
    server: LiveServer, db_url: str
) -> None:
    long_ago = datetime.now(UTC) - timedelta(seconds=600)  # the default threshold: 120 s
    store_payload(db_url, fleet_batch(long_ago), received_at=long_ago)
    fresh = batch("gpu-host-02", gpus=1, samples_per_gpu=1)
    assert post_batch(server.url, create_token(db_url, "gpu-host-02"), fresh).status_code == 200
    text = scrape(server.url)
    assert HOST not in text
    assert 'Hostname="gpu-host-02"' in text


def test_the_node_labels_served_are_those_of_the_setting(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path, metrics_node_labels=["zone", "team"])
    server = LiveServer(settings)
    server.start()
    try:
        labels = {**NODE_LABELS, "zone": 'z"1\\'}
        payload = batch(HOST, gpus=[GPU1], samples_per_gpu=1, labels=labels)
        assert post_batch(server.url, create_token(db_url, HOST), payload).status_code == 200
        text = scrape(server.url)
    finally:
        server.stop()
    [line] = [line for line in lines_with(text, GPU1["uuid"]) if "DCGM_FI_DEV_GPU_UTIL" in line]
    assert line.endswith(',team="llm",zone="z\\"1\\\\"} 50')  # quote and backslash escaped
    assert "cluster=" not in line and "rack=" not in line


@pytest.mark.parametrize("keys", [["pod"], ["uuid"], ["__meta"], ["Rack"], ["k8s.io/zone"]])
def test_the_node_label_setting_refuses_reserved_keys_and_keys_no_node_has(
    keys: list[str], tmp_path: Path
) -> None:
    with pytest.raises(SettingsError, match="FLEETWATCH_METRICS_NODE_LABELS"):
        load_settings(data_dir=tmp_path, metrics_node_labels=keys)
