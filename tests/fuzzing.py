"""Property-based fuzzing support (hypothesis): the profiles and the mutations of real captures.

Profiles, chosen by ``FLEETWATCH_FUZZ`` (default ``ci``):

* ``ci`` — :data:`CI_EXAMPLES` examples per property, no deadline, no example database,
  derandomized (the same examples every run: CI never fails on a new random find, which is the
  soak run's job): the suite's time stays bounded (a few seconds per parser);
* ``soak`` — :data:`SOAK_EXAMPLES` examples per property, for a run by hand
  (``FLEETWATCH_FUZZ=soak .venv/bin/pytest -q tests -k fuzz``), with hypothesis's example
  database so a failure found is tried first next time.

An input is a *recipe*: a capture of ``../shared/fixtures`` (read in place, never copied) and up
to four mutations, each with its position as a fraction of the text, so hypothesis shrinks a
failure to the capture and the one mutation that breaks the parser, and prints them. The
mutations are what real machines do to these texts: cut short (a killed process, a full pipe),
a flipped byte, a locale's decimal comma, PCI addresses in the other forms drivers and tools
print, numbers no counter can hold, bytes that are not UTF-8, lines repeated, lost or inserted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.shared_fixtures import fixture_names, fixture_path

CI_EXAMPLES = 60
SOAK_EXAMPLES = 3000

settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "soak",
    max_examples=SOAK_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("FLEETWATCH_FUZZ", "ci"))

_PCI = re.compile(rb"\b(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\b")
_NUMBER = re.compile(rb"\b\d+(?:\.\d+)?\b")
_DECIMAL = re.compile(rb"(\d)\.(\d)")

#: PCI address forms seen in the wild for ``00000000:18:00.0``.
PCI_FORMS: tuple[bytes, ...] = (
    b"00000000:18:00.0",
    b"0000:18:00.0",
    b"18:00.0",
    b"00000000:18:00.0".lower(),
    b"0000000000000000:18:00.0",
    b"PCI:0000:18:00",
    b"0001:c7:00.0",
    b"ffff:ff:1f.7",
    b"00000000 : 18 : 00.0",
    b"GPU 0000:18:00.0",
)
#: Numbers that no counter or field can hold, or that parse oddly.
HUGE: tuple[bytes, ...] = (
    b"18446744073709551615",
    b"18446744073709551616",
    b"9223372036854775807",
    b"9223372036854775794",
    b"4294967295",
    b"99999999999999999999999999999999999999",
    b"-1",
    b"-0",
    b"1e400",
    b"NaN",
    b"inf",
    b"0x1F",
    b"7" * 5000,  # int() refuses more than 4,300 digits
    b"\xd9\xa3",  # ARABIC-INDIC DIGIT THREE: str.isdigit() says yes
    b"\xc2\xb2",  # SUPERSCRIPT TWO: str.isdigit() says yes, int() says no
)
NOT_UTF8: tuple[bytes, ...] = (b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\x80abc")
JUNK_LINES: tuple[bytes, ...] = (
    b"",
    b" ",
    b"\t\t",
    b"ERROR: Unknown Error",
    b"Unable to determine the device handle for GPU0000:18:00.0: Unknown Error",
    b"NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off",
    b"GPU 0: NVIDIA H100 (UUID: GPU-x)",
    b"\x00\x00\x00",
    b"\x1b[1mGPU0\x1b[0m",
    b":" * 40,
    b"a" * 5000,
)


@dataclass(frozen=True)
class Mutation:
    """One change: ``kind``, where (a fraction 0…1 of the length) and which variant."""

    kind: str
    at: float
    pick: int


def _spot(data: bytes, at: float) -> int:
    return min(len(data), int(at * len(data)))


def _truncate(data: bytes, m: Mutation) -> bytes:
    return data[: _spot(data, m.at)]


def _flip(data: bytes, m: Mutation) -> bytes:
    if not data:
        return data
    i = min(len(data) - 1, _spot(data, m.at))
    return data[:i] + bytes([m.pick % 256]) + data[i + 1 :]


def _nth_match(pattern: re.Pattern[bytes], data: bytes, m: Mutation, new: bytes) -> bytes:
    found = list(pattern.finditer(data))
    if not found:
        return data
    hit = found[min(len(found) - 1, int(m.at * len(found)))]
    return data[: hit.start()] + new + data[hit.end() :]


def _decimal_comma(data: bytes, m: Mutation) -> bytes:
    if m.pick % 2:  # every decimal point, as a whole locale would
        return _DECIMAL.sub(rb"\1,\2", data)
    found = list(_DECIMAL.finditer(data))
    if not found:
        return data
    hit = found[min(len(found) - 1, int(m.at * len(found)))]
    return data[: hit.start()] + hit[1] + b"," + hit[2] + data[hit.end() :]


def _pci(data: bytes, m: Mutation) -> bytes:
    return _nth_match(_PCI, data, m, PCI_FORMS[m.pick % len(PCI_FORMS)])


def _huge(data: bytes, m: Mutation) -> bytes:
    return _nth_match(_NUMBER, data, m, HUGE[m.pick % len(HUGE)])


def _not_utf8(data: bytes, m: Mutation) -> bytes:
    i = _spot(data, m.at)
    return data[:i] + NOT_UTF8[m.pick % len(NOT_UTF8)] + data[i:]


def _lines(data: bytes, m: Mutation) -> bytes:
    lines = data.split(b"\n")
    i = min(len(lines) - 1, int(m.at * len(lines)))
    action = m.pick % 3
    if action == 0:
        lines.insert(i, lines[i])  # repeated
    elif action == 1:
        del lines[i]  # lost
    else:
        lines.insert(i, JUNK_LINES[(m.pick // 3) % len(JUNK_LINES)])
    return b"\n".join(lines)


MUTATIONS: dict[str, Callable[[bytes, Mutation], bytes]] = {
    "truncate": _truncate,
    "flip": _flip,
    "decimal_comma": _decimal_comma,
    "pci": _pci,
    "huge": _huge,
    "not_utf8": _not_utf8,
    "lines": _lines,
}

mutations = st.lists(
    st.builds(
        Mutation,
        kind=st.sampled_from(sorted(MUTATIONS)),
        at=st.floats(0, 1),
        pick=st.integers(0, 1023),
    ),
    max_size=4,
)


def captures(folder: str, suffix: str = "", *, contains: str = "") -> st.SearchStrategy[str]:
    """Names of the captures in ``fixtures/<folder>`` (whose name holds ``contains``)."""
    names = [n for n in fixture_names(folder, suffix) if contains in n]
    return st.sampled_from(names or ["<no captures: ../shared/fixtures is absent>"])


def mutated(folder: str, name: str, changes: list[Mutation]) -> bytes:
    """The capture ``fixtures/<folder>/<name>`` (skips or fails as
    :func:`tests.shared_fixtures.fixture_path` does when absent) with ``changes`` applied."""
    return mutate(fixture_path(f"{folder}/{name}").read_bytes(), changes)


def mutate(data: bytes, changes: list[Mutation]) -> bytes:
    """``data`` with ``changes`` applied in order."""
    for change in changes:
        data = MUTATIONS[change.kind](data, change)
    return data


def as_text(data: bytes) -> str:
    """Bytes read as the agent reads a file or a command's output: UTF-8 with replacement."""
    return data.decode("utf-8", errors="replace")
