"""Fixtures of the GPU collector tests: the fake NVML installed in place of ``pynvml``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agents.gpu.fake_pynvml import FakeNvml
from tests.shared_fixtures import fixture_path


@pytest.fixture
def install_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[[FakeNvml], FakeNvml]:
    """``install_nvml(fake)``: make ``import pynvml`` return ``fake`` for this test."""

    def install(fake: FakeNvml) -> FakeNvml:
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


@pytest.fixture
def capture_nvml(install_nvml: Callable[[FakeNvml], FakeNvml]) -> Callable[[str], FakeNvml]:
    """``capture_nvml("rtx-3090-driver525.xml")``: install the fake NVML of that capture."""

    def install(name: str) -> FakeNvml:
        return install_nvml(FakeNvml.from_capture(fixture_path(f"nvidia-smi-xml/{name}")))

    return install


_SCRIPT = """#!{python}
# Stands in for nvidia-smi: prints the file named in ./query (or ./topo for "topo -m").
import pathlib, sys, time
here = pathlib.Path(__file__).resolve().parent
if (here / "delay").exists():
    time.sleep(float((here / "delay").read_text()))
pointer = here / ("topo" if sys.argv[1:2] == ["topo"] else "query")
sys.stdout.write(pathlib.Path(pointer.read_text()).read_text(encoding="utf-8"))
"""


class FakeSmi:
    """An executable ``nvidia-smi`` in a temporary folder printing whatever it is pointed at."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / "nvidia-smi"
        self.path.write_text(_SCRIPT.format(python=sys.executable))
        self.path.chmod(0o755)

    def prints(self, source: Path) -> None:
        """``nvidia-smi -q -x`` prints ``source`` (a fixture, read in place)."""
        (self.folder / "query").write_text(str(source))

    def prints_text(self, text: str, name: str = "made.txt") -> None:
        """``nvidia-smi -q -x`` prints ``text`` (output a test built)."""
        made = self.folder / name
        made.write_text(text, encoding="utf-8")
        self.prints(made)

    def prints_topology(self, source: Path) -> None:
        (self.folder / "topo").write_text(str(source))

    def hangs(self, seconds: float) -> None:
        (self.folder / "delay").write_text(str(seconds))


@pytest.fixture
def fake_smi(tmp_path: Path) -> FakeSmi:
    """A fake ``nvidia-smi`` binary (a Python script) in ``tmp_path``."""
    return FakeSmi(tmp_path)
