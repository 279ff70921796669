"""Fuzzing the agent's GPU parsers with mutated real captures (issue 14): ``nvidia-smi -q -x``
and the error texts it prints instead, ``nvidia-smi topo -m`` and ``topo -p2p``, ``nvidia-smi
nvlink -s``. No exception escapes but the parser's own documented error, and what a parser
returns is what the server takes as it is: checked against the ingest models, so the agent
never sends a value the server would have to leave out. Profiles and mutations:
``tests/fuzzing.py``."""

from __future__ import annotations

import contextlib
import math
from datetime import UTC, datetime
from typing import Any

from hypothesis import given

from agents.nvidia_smi import parse_nvidia_smi_xml
from agents.nvidia_smi.failures import parse_failures, tool_failure
from agents.nvidia_smi.xml_log import NvidiaSmiParseError
from agents.topology.matrix import (
    TopoParseError,
    parse_p2p_matrix,
    parse_topo_matrix,
    topology_section,
)
from agents.topology.nvlink_text import nvlinks_section, parse_nvlink_status
from app.ingest.schemas import GpuIn, SampleIn
from app.nvlinks.schemas import NvlinkIn
from app.topology.schemas import TopologyIn
from tests.fuzzing import Mutation, as_text, captures, mutated, mutations

NOW = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
STAMP = "2026-11-29T16:00:00Z"


def _valid(model: Any, entry: dict[str, Any]) -> None:
    """``entry`` passes the server's model as sent (nothing the server would leave out)."""
    model.model_validate(entry)


def _number_or_none(name: str, value: Any) -> None:
    assert value is None or (type(value) in (int, float) and math.isfinite(value)), (name, value)


@given(
    captures("nvidia-smi-xml"),
    mutations,
)
def test_fuzz_nvidia_smi_xml_gives_gpus_the_server_takes_or_its_parse_error(
    name: str, changes: list[Mutation]
) -> None:
    data = mutated("nvidia-smi-xml", name, changes)
    text = as_text(data)
    for failure in parse_failures(text):
        assert failure.state in ("lost", "unknown_error")
        if failure.pci_bus_id is not None:
            _valid(GpuIn, {"uuid": "GPU-x", "index": 0, "pci_bus_id": failure.pci_bus_id})
    tool_failure(text)
    try:
        document = parse_nvidia_smi_xml(data)
    except NvidiaSmiParseError as exc:
        assert str(exc)
        return
    for gpu in document.gpus:
        info = dict(gpu.info)
        processes = [{k: p[k] for k in ("pid", "used_memory_bytes", "name")} for p in gpu.processes]
        _valid(
            GpuIn,
            {
                **info,
                "unavailable": gpu.unavailable,
                "mig_instances": gpu.mig_instances,
                "processes": processes,
            },
        )
        for metric, value in gpu.metrics.items():
            _number_or_none(metric, value)
        _valid(SampleIn, {"gpu_uuid": info["uuid"], "sampled_at": STAMP, **gpu.metrics})


@given(captures("nvidia-smi-xml", ".txt"), mutations)
def test_fuzz_nvidia_smi_error_texts_give_failures_the_server_takes(
    name: str, changes: list[Mutation]
) -> None:
    text = as_text(mutated("nvidia-smi-xml", name, changes))
    for failure in parse_failures(text):
        assert failure.state in ("lost", "unknown_error")
        if failure.pci_bus_id is not None:
            _valid(GpuIn, {"uuid": "GPU-x", "index": 0, "pci_bus_id": failure.pci_bus_id})
    with contextlib.suppress(NvidiaSmiParseError):
        parse_nvidia_smi_xml(text)


@given(captures("topo"), mutations)
def test_fuzz_topo_matrix_gives_a_topology_the_server_takes_or_its_parse_error(
    name: str, changes: list[Mutation]
) -> None:
    text = as_text(mutated("topo", name, changes))
    try:
        matrix = parse_topo_matrix(text)
    except TopoParseError as exc:
        assert str(exc)
    else:
        section = topology_section(matrix)
        _valid(TopologyIn, {"collected_at": STAMP, "partial": False, "errors": [], **section})
    with contextlib.suppress(TopoParseError):
        parse_p2p_matrix(text)


@given(captures("nvlink"), mutations)
def test_fuzz_nvlink_status_gives_links_the_server_takes(
    name: str, changes: list[Mutation]
) -> None:
    text = as_text(mutated("nvlink", name, changes))
    statuses = parse_nvlink_status(text)
    entries = nvlinks_section(statuses, NOW, {s.index: f"GPU-{s.index}" for s in statuses})
    for entry in entries:
        _valid(NvlinkIn, entry)
