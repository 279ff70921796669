"""``/metrics`` against what reads dcgm-exporter's: NVIDIA's Grafana dashboard 12239, the
captured dcgm-exporter outputs in ``../shared/fixtures/dcgm-exporter`` (read in place), and
``promtool check metrics``."""

from __future__ import annotations

import gzip
import re
from datetime import UTC, datetime

import httpx
import pytest

from app.exporter import dcgm, labels
from tests.app.helpers import post_batch
from tests.app.metrics_helpers import promtool_problems, scrape
from tests.app.test_metrics_dcgm import fleet_batch
from tests.factories import create_token
from tests.live_server import LiveServer
from tests.shared_fixtures import fixture_names, fixture_path

#: Every metric the panels and variables of NVIDIA's "NVIDIA DCGM Exporter Dashboard" (Grafana
#: 12239, NVIDIA/dcgm-exporter grafana/dcgm-exporter-dashboard.json) query, in its current
#: version and the earlier one that plotted DCGM_FI_DEV_GPU_UTIL.
DASHBOARD_METRICS = (
    "DCGM_FI_DEV_GPU_TEMP",  # GPU Temperature, GPU Avg. Temp
    "DCGM_FI_DEV_POWER_USAGE",  # GPU Power Usage, GPU Power Total
    "DCGM_FI_DEV_SM_CLOCK",  # GPU SM Clocks
    "DCGM_FI_DEV_GPU_UTIL",  # GPU Utilization (earlier version)
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",  # GPU Utilization (current version)
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",  # Tensor Core Utilization
    "DCGM_FI_DEV_FB_USED",  # GPU Framebuffer Mem Used
    "DCGM_FI_DEV_FB_FREE",  # the Hostname and gpu variables: label_values(…, Hostname)
)
#: The labels its queries select or group by (``uuid`` in lower case is one no exporter sets).
DASHBOARD_LABELS = ("Hostname", "gpu", "UUID")
#: The two it queries that NVML cannot give (docs/metrics.md, "Not served").
DASHBOARD_PROFILING = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}
#: promtool's lint of dcgm-exporter's own naming, which /metrics keeps on purpose: counters
#: without ``_total``, ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``'s name, the ``modelName`` label.
DCGM_NAMING_LINT = re.compile(
    r"^DCGM_FI_\w+ (counter metrics should have \"_total\" suffix|"
    r"metric name should not include type 'counter'|"
    r"label names should be written in 'snake_case' not 'camelCase')$"
)


@pytest.fixture
def text(server: LiveServer, db_url: str) -> str:
    """/metrics after one node reported every value (:data:`REPORTED` of the DCGM tests)."""
    token = create_token(db_url, "gpu-host-01")
    assert post_batch(server.url, token, fleet_batch(datetime.now(UTC))).status_code == 200
    return scrape(server.url)


def families(text: str) -> dict[str, str]:
    """Metric name → its ``# TYPE``."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))


def test_every_metric_of_nvidias_dcgm_dashboard_is_served_but_the_profiling_two(
    text: str,
) -> None:
    served = families(text)
    missing = {name for name in DASHBOARD_METRICS if name not in served}
    assert missing == DASHBOARD_PROFILING
    assert all(name in dcgm.NOT_SERVED for name in missing)
    for name in DASHBOARD_METRICS:
        if name in served:
            [line, *_] = [x for x in text.splitlines() if x.startswith(name + "{")]
            assert all(f'{label}="' in line for label in DASHBOARD_LABELS), line


#: Labels of captured series that /metrics has no data for: Kubernetes pods' (dcgm-exporter's
#: pod mapping), MIG instances', and the lower-case ``hostname`` of an older exporter.
OTHER_LABELS = {"container", "namespace", "pod", "pod_uid", "GPU_I_PROFILE", "GPU_I_ID", "hostname"}


@pytest.mark.parametrize("name", fixture_names("dcgm-exporter", ".prom"))
def test_names_types_and_labels_agree_with_a_captured_dcgm_exporter(name: str) -> None:
    captured = fixture_path(f"dcgm-exporter/{name}").read_text()
    ours = {f.name: f.type for f in dcgm.FIELDS}
    for metric, kind in families(captured).items():
        if metric in ours:
            assert ours[metric] == kind, metric
    gpu_labels = {*labels.GPU_LABELS, labels.DRIVER_LABEL}
    for line in captured.splitlines():
        match = re.match(r"^(DCGM_FI_\w+)\{(.*)\}", line)
        if match is None:
            continue
        metric = match.group(1)
        assert metric in ours or metric in dcgm.NOT_SERVED, f"{metric}: neither served nor listed"
        if metric in ours:
            used = {pair.split("=")[0].strip() for pair in match.group(2).split('",')}
            assert used <= gpu_labels | OTHER_LABELS, used - gpu_labels - OTHER_LABELS
            assert {"gpu", "UUID"} <= used


def test_promtool_accepts_it_with_only_dcgm_exporters_naming_remarks(text: str) -> None:
    problems = promtool_problems(text)
    assert [p for p in problems if not DCGM_NAMING_LINT.match(p)] == []
    assert any("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in p for p in problems)


def test_it_is_gzipped_only_for_a_client_that_asks(server: LiveServer, text: str) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        plain = client.get("/metrics", headers={"Accept-Encoding": "identity"})
        packed = client.stream("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        with packed as response:
            raw = b"".join(response.iter_raw())
            encoding = response.headers.get("content-encoding")
    assert "content-encoding" not in plain.headers
    assert plain.text.startswith("# HELP DCGM_FI_DEV_GPU_UTIL ")
    assert encoding == "gzip"
    assert gzip.decompress(raw).decode().startswith("# HELP DCGM_FI_DEV_GPU_UTIL ")
