"""deploy/systemd/: systemd's own ``systemd-analyze verify`` accepts each unit without a
warning (an unknown or misspelt key is one), with ExecStart pointed at this checkout's real
commands; the hardening the agent depends on is there and leaves it what it reads (/dev/kmsg,
the NVIDIA devices, other users' processes); the command lines, with the example environment
files' values, are ones the command lines take."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import load_settings
from tests.deploy.commands import agent_args, fleetwatch_error

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
BIN = Path(sys.executable).parent
#: Where each unit expects its command, and this checkout's copy of it.
INSTALLED = {
    "/usr/bin/fleetwatch-agent": BIN / "fleetwatch-agent",
    "/opt/fleetwatch/.venv/bin/fleetwatch": BIN / "fleetwatch",
}


def directives(path: Path) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values in order]}}`` (systemd repeats keys; comments skipped)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        message = "systemd-analyze not installed (Debian package systemd)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def verify(unit_text: str, name: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    for expected, here in INSTALLED.items():
        unit_text = unit_text.replace(f"ExecStart={expected} ", f"ExecStart={here} ")
    unit = tmp_path / name
    unit.write_text(unit_text, encoding="utf-8")
    return subprocess.run(
        [systemd_analyze(), "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


@pytest.mark.parametrize("name", ["fleetwatch-agent.service", "fleetwatch.service"])
def test_systemd_verifies_the_unit_without_a_word(name: str, tmp_path: Path) -> None:
    text = (SYSTEMD / name).read_text(encoding="utf-8")
    assert any(f"ExecStart={expected} " in text for expected in INSTALLED), name
    done = verify(text, name, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # warnings too: an ignored key is a bug


def test_the_verification_catches_a_misspelt_key(tmp_path: Path) -> None:
    text = (SYSTEMD / "fleetwatch-agent.service").read_text(encoding="utf-8")
    done = verify(text.replace("ProtectHome=yes", "ProtectHomes=yes"), "typo.service", tmp_path)
    assert "Unknown key 'ProtectHomes'" in done.stderr


def test_the_agent_is_confined_but_keeps_what_it_reads() -> None:
    service = directives(SYSTEMD / "fleetwatch-agent.service")["Service"]
    single = {key: values[-1] for key, values in service.items()}
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "DynamicUser": "yes",
        "Restart": "on-failure",
        "DevicePolicy": "closed",
        "CapabilityBoundingSet": "CAP_SYSLOG",  # /dev/kmsg under kernel.dmesg_restrict=1
        "AmbientCapabilities": "CAP_SYSLOG",
        "StateDirectory": "fleetwatch-agent",
    }.items():
        assert single.get(key) == value, key
    allowed = service["DeviceAllow"]
    assert "/dev/kmsg r" in allowed
    assert "char-nvidia-frontend rw" in allowed  # /dev/nvidiactl, /dev/nvidia0…
    # What would take away the kernel log, the GPUs or the GPUs' processes is not set.
    assert "ProtectKernelLogs" not in service
    assert "PrivateDevices" not in service
    assert single.get("ProtectProc", "default") == "default"


def test_the_agent_command_line_with_the_example_environment_parses(tmp_path: Path) -> None:
    service = directives(SYSTEMD / "fleetwatch-agent.service")["Service"]
    (exec_start,) = service["ExecStart"]
    env = env_file(SYSTEMD / "fleetwatch-agent.env")
    env |= {"CREDENTIALS_DIRECTORY": "/run/credentials/x", "STATE_DIRECTORY": "/var/lib/x"}
    # systemd's rules: ${VAR} is one word; $VAR is split on white space.
    words = []
    for word in shlex.split(exec_start):
        if re.fullmatch(r"\$\w+", word):
            words += env[word[1:]].split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word))
    assert words[0] == "/usr/bin/fleetwatch-agent"
    args = agent_args(words[1:])
    assert args["server"] == env["FLEETWATCH_SERVER"]
    # The token comes from the credential LoadCredential= hands over; the spool is the state.
    assert service["LoadCredential"] == ["token:/etc/fleetwatch-agent/token"]
    assert args["token_file"] == Path("/run/credentials/x/token")
    assert args["spool_dir"] == Path("/var/lib/x/spool")
    assert ("cluster", "gpu-cluster-1") in args["label"]


def test_the_server_command_line_and_settings_of_the_examples_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = directives(SYSTEMD / "fleetwatch.service")["Service"]
    (exec_start,) = service["ExecStart"]
    env = env_file(SYSTEMD / "fleetwatch.env")
    words = shlex.split(exec_start.replace("$FLEETWATCH_SERVE_ARGS", env["FLEETWATCH_SERVE_ARGS"]))
    assert words[0] == "/opt/fleetwatch/.venv/bin/fleetwatch"
    assert fleetwatch_error(["fleetwatch", *words[1:]]) is None
    assert words[1:3] == ["serve", "--migrate"]
    for name in list(os.environ):
        if name.startswith("FLEETWATCH_"):
            monkeypatch.delenv(name)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.effective_database_url == env["FLEETWATCH_DATABASE_URL"]
    assert settings.port == 8000
