"""What nvidia-smi prints instead of XML for a lost GPU or one in an unknown error state, and
output that is not a complete XML document: clear results, never a traceback."""

from __future__ import annotations

import pytest

from agents.nvidia_smi import (
    NvidiaSmiParseError,
    parse_failures,
    parse_nvidia_smi_xml,
    tool_failure,
)
from tests.shared_fixtures import fixture_path

LOST = "GPU is lost. Reboot the system to recover this GPU"


def _text(relative: str) -> str:
    return fixture_path(relative).read_text(encoding="utf-8")


def test_it_reports_a_lost_gpu_with_its_bus_id_despite_two_spaces_after_the_period() -> None:
    failures = parse_failures(_text("nvidia-smi-xml/error-gpu-is-lost-two-spaces.txt"))
    assert [(f.pci_bus_id, f.state, f.message) for f in failures] == [
        ("00000000:03:00.0", "lost", LOST)
    ]


def test_it_joins_a_lost_gpu_message_hard_wrapped_by_a_windows_console() -> None:
    failures = parse_failures(_text("nvidia-smi-xml/error-gpu-is-lost-windows-cmd-wrapped.txt"))
    assert [(f.pci_bus_id, f.state, f.message) for f in failures] == [
        ("00000000:03:00.0", "lost", LOST)
    ]


def test_it_reports_an_unknown_error_gpu_whose_bus_id_follows_gpu_without_a_space() -> None:
    text = _text("nvidia-smi-xml/error-unknown-error-no-space-busid-tesla-p4.txt")
    failures = parse_failures(text)
    assert [(f.pci_bus_id, f.state, f.message) for f in failures] == [
        ("00000000:07:00.0", "unknown_error", "Unknown Error")
    ]
    assert tool_failure(text) is None  # a GPU problem, not a missing driver


@pytest.mark.parametrize(
    "name",
    [
        "error-gpu-is-lost-two-spaces.txt",
        "error-gpu-is-lost-windows-cmd-wrapped.txt",
        "error-unknown-error-no-space-busid-tesla-p4.txt",
    ],
)
def test_failure_output_is_a_clear_parse_error_for_the_xml_parser(name: str) -> None:
    with pytest.raises(NvidiaSmiParseError, match="no <nvidia_smi_log> document"):
        parse_nvidia_smi_xml(_text(f"nvidia-smi-xml/{name}"))


def test_text_output_of_nvidia_smi_q_is_refused_as_not_xml() -> None:
    text = _text("nvlink/h100-q-text-truncated-invalid.txt")
    with pytest.raises(NvidiaSmiParseError, match="no <nvidia_smi_log> document"):
        parse_nvidia_smi_xml(text)
    assert parse_failures(text) == []


def test_xml_cut_off_mid_document_is_a_truncation_error() -> None:
    text = _text("nvidia-smi-xml/tesla-t4-driver515.xml")
    with pytest.raises(NvidiaSmiParseError, match="truncated nvidia-smi XML"):
        parse_nvidia_smi_xml(text[: len(text) // 2])


def test_xml_with_a_broken_element_is_a_malformed_error() -> None:
    text = _text("nvidia-smi-xml/tesla-t4-driver515.xml").replace("</uuid>", "</uuidx>", 1)
    with pytest.raises(NvidiaSmiParseError, match="malformed nvidia-smi XML"):
        parse_nvidia_smi_xml(text)


def test_garbage_bytes_are_a_parse_error_not_a_decode_error() -> None:
    with pytest.raises(NvidiaSmiParseError):
        parse_nvidia_smi_xml(b"\xff\xfe\x00garbage<nvidia_smi_log><gpu")


def test_xml_after_a_failure_line_still_parses_and_both_are_reported() -> None:
    failure = _text("nvidia-smi-xml/error-gpu-is-lost-two-spaces.txt")
    xml = _text("nvidia-smi-xml/tesla-t4-driver515.xml")
    text = failure + xml
    assert [g.info["name"] for g in parse_nvidia_smi_xml(text).gpus] == ["Tesla T4"]
    assert [f.state for f in parse_failures(text)] == ["lost"]


def test_it_recognises_nvidia_smi_saying_there_is_no_driver() -> None:
    text = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    assert tool_failure(text) == text.strip()
    assert parse_failures(text) == []
