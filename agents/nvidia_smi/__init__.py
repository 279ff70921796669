"""``nvidia-smi`` output parsers, for the fallback collector where NVML cannot be loaded from
Python (and for tests that compare both readings of the same machine).

- :func:`~agents.nvidia_smi.xml_log.parse_nvidia_smi_xml`: ``nvidia-smi -q -x`` → :class:`SmiLog`;
- :func:`~agents.nvidia_smi.failures.parse_failures`: the per-GPU "Unable to determine the device
  handle" lines nvidia-smi prints for a lost GPU or one in an unknown error state;
- :func:`~agents.nvidia_smi.failures.tool_failure`: the line saying there is no driver at all.
"""

from agents.nvidia_smi.failures import GpuFailure, parse_failures, tool_failure
from agents.nvidia_smi.xml_log import NvidiaSmiParseError, SmiGpu, SmiLog, parse_nvidia_smi_xml

__all__ = [
    "GpuFailure",
    "NvidiaSmiParseError",
    "SmiGpu",
    "SmiLog",
    "parse_failures",
    "parse_nvidia_smi_xml",
    "tool_failure",
]
