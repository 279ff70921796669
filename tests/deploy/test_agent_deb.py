"""deploy/debian/build-agent-deb.sh: the .deb dpkg-deb builds has the control fields, files and
conffile it should, ships the systemd unit unchanged, and its /usr/bin/fleetwatch-agent runs
with the system's python3 alone (the agent and nvidia-ml-py bundled, no virtualenv)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "debian" / "build-agent-deb.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("dpkg-deb") is None:
        message = "dpkg-deb not installed (Debian package dpkg)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    out = tmp_path_factory.mktemp("deb")
    done = subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    built = Path(done.stdout.strip().splitlines()[-1])
    assert built == out / f"fleetwatch-agent_{VERSION}_all.deb"
    return built


@pytest.fixture(scope="module")
def tree(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("extracted")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=60)
    subprocess.run(["dpkg-deb", "-e", str(deb), str(root / "DEBIAN")], check=True, timeout=60)
    return root


def field(deb: Path, name: str) -> str:
    done = subprocess.run(
        ["dpkg-deb", "--field", str(deb), name], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_control_fields(deb: Path) -> None:
    assert field(deb, "Package") == "fleetwatch-agent"
    assert field(deb, "Version") == VERSION
    assert field(deb, "Architecture") == "all"
    assert field(deb, "Depends") == "python3 (>= 3.11)"
    assert int(field(deb, "Installed-Size")) > 0


def test_the_files_the_unit_and_the_conffile(tree: Path) -> None:
    launcher = tree / "usr" / "bin" / "fleetwatch-agent"
    assert launcher.stat().st_mode & 0o777 == 0o755
    unit = tree / "lib" / "systemd" / "system" / "fleetwatch-agent.service"
    assert unit.read_bytes() == (ROOT / "deploy/systemd/fleetwatch-agent.service").read_bytes()
    assert "ExecStart=/usr/bin/fleetwatch-agent " in unit.read_text(encoding="utf-8")
    assert (tree / "etc/fleetwatch-agent/agent.env").is_file()
    assert (tree / "DEBIAN" / "conffiles").read_text().split() == [
        "/etc/fleetwatch-agent/agent.env"
    ]
    lib = tree / "usr" / "lib" / "fleetwatch-agent"
    assert (lib / "agents" / "main.py").is_file()
    assert (lib / "pynvml.py").is_file()
    assert not list(lib.rglob("__pycache__"))
    assert not list(lib.rglob("RECORD"))  # it named the build machine's paths
    for script in ("postinst", "prerm", "postrm"):
        done = subprocess.run(["sh", "-n", str(tree / "DEBIAN" / script)], timeout=10)
        assert done.returncode == 0, script


def test_the_packaged_agent_runs_on_the_system_python_alone(tree: Path) -> None:
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3, the interpreter the package's launcher names")
    launcher = tree / "usr" / "bin" / "fleetwatch-agent"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tree)}  # no virtualenv, no PYTHONPATH
    version = subprocess.run(
        [str(launcher), "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"fleetwatch-agent {VERSION}"
    printed = subprocess.run(
        [str(launcher), "--collector", "sim", "--once", "--print", "--hostname", "deb-node"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tree,
    )
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["node"]["hostname"] == "deb-node"
    lib = tree / "usr" / "lib" / "fleetwatch-agent"
    where = subprocess.run(
        [
            str(SYSTEM_PYTHON),
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(lib)!r}); import agents, pynvml; "
            "print(agents.__file__); print(pynvml.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert [Path(p).parent for p in where.stdout.split()] == [lib / "agents", lib]
