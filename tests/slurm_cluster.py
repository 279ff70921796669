"""A real one-node Slurm cluster for the tests: Debian's ``munged``, ``slurmctld`` and
``slurmd`` (installed by ``.ci/run``), on free loopback ports, with a minimal ``slurm.conf``
in a temporary directory. Skipped where Slurm is not installed or the tests are not root,
except under ``CI=true`` where that is a failure.

The node is named ``SLURM_NODE`` (``slurmd -N``), so a Fleetwatch node of that hostname maps
to it. Commands reach the cluster through ``SLURM_CONF`` (:attr:`SlurmCluster.env`). With
``gpus=N`` the node has N GPUs as Slurm GRES (``Gres=gpu:N``), their device files character
devices like ``/dev/null`` under the cluster's directory: Slurm allocates them by index
(``--gres=gpu:2`` gives ``IDX:0-1``) and nothing opens them.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import free_port

SLURM_NODE = "fw-gpu-01"
DAEMONS = ("munged", "slurmctld", "slurmd")
SBIN = Path("/usr/sbin")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


@dataclass(frozen=True)
class SlurmCluster:
    """A running cluster: its config, the environment that reaches it, its one node."""

    conf: Path
    node: str
    log_dir: Path

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with ``SLURM_CONF`` pointing at the cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> str:
        """Run a Slurm client command against the cluster; its stdout (raises on failure)."""
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def logs(self) -> str:
        """The daemons' logs, for a failure message."""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )


def _unavailable() -> str | None:
    missing = [d for d in DAEMONS if not (SBIN / d).exists()]
    if missing or shutil.which("scontrol") is None:
        return (
            f"Slurm is not installed ({', '.join(missing) or 'scontrol'} missing): "
            "apt-get install slurmctld slurmd slurm-client munge, as .ci/run does"
        )
    if os.geteuid() != 0:
        return "the Slurm daemons of this test run as root"
    if not Path("/etc/munge/munge.key").exists():
        return "no munge key at /etc/munge/munge.key (the munge package creates it)"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _start_munged() -> None:
    if MUNGE_SOCKET.exists():
        probe = subprocess.run(["munge", "-n"], capture_output=True, timeout=10, check=False)
        if probe.returncode == 0:
            return
    MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    # As root (the tests' user), with --force: munged otherwise refuses to run as root or with
    # a log directory it finds "insecure". It stays up after the tests, as a system daemon.
    subprocess.run(
        [str(SBIN / "munged"), "--force"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    for _ in range(50):
        if subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.1)
    _skip_or_fail("munged did not start (munge -n fails)")


def _fake_gpus(root: Path, gpus: int) -> None:
    """``gres.conf`` naming ``gpus`` device files: character devices 1:3 (what ``/dev/null``
    is), so Slurm sees devices it can allocate and nothing can break by opening them."""
    dev = root / "dev"
    dev.mkdir(exist_ok=True)
    for index in range(gpus):
        path = dev / f"nvidia{index}"
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    gres = f"NodeName={SLURM_NODE} Name=gpu File={dev}/nvidia[0-{gpus - 1}]\n"
    (root / "gres.conf").write_text(gres)


def _config(root: Path, ctld_port: int, slurmd_port: int, gpus: int = 0) -> str:
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    return "\n".join(
        [
            *(["GresTypes=gpu"] if gpus else []),
            "ClusterName=fleetwatch-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            f"NodeName={SLURM_NODE} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=2{gres} "
            "State=UNKNOWN",
            "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@contextmanager
def slurm_cluster(root: Path, *, gpus: int = 0) -> Iterator[SlurmCluster]:
    """Start the cluster under ``root`` (its node with ``gpus`` GPUs) and wait until its node
    is idle (≤ 30 s); stop the daemons at the end."""
    reason = _unavailable()
    if reason is not None:
        _skip_or_fail(reason)
    _start_munged()
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    if gpus:
        _fake_gpus(root, gpus)
    conf.write_text(_config(root, free_port(), free_port(), gpus))
    cluster = SlurmCluster(conf=conf, node=SLURM_NODE, log_dir=root / "log")
    daemons = [
        subprocess.Popen(
            [str(SBIN / "slurmctld"), "-D", "-i", "-f", str(conf)],
            env=cluster.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        time.sleep(0.5)
        daemons.append(
            subprocess.Popen(
                [str(SBIN / "slurmd"), "-D", "-N", SLURM_NODE, "-f", str(conf)],
                env=cluster.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 30
        state = ""
        while time.monotonic() < deadline:
            done = subprocess.run(
                ["sinfo", "-h", "-n", SLURM_NODE, "-o", "%T"],
                env=cluster.env,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            state = done.stdout.strip()
            if state == "idle":
                break
            time.sleep(0.3)
        else:
            _skip_or_fail(f"the Slurm node did not become idle (last: {state!r})\n{cluster.logs()}")
        yield cluster
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=5)


def cluster_for_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, gpus: int = 0
) -> Iterator[SlurmCluster]:
    """A test's cluster under ``tmp_path`` (for a fixture to ``yield from``), with
    ``SLURM_CONF`` set so the server's commands reach it."""
    with slurm_cluster(tmp_path / "slurm", gpus=gpus) as running:
        monkeypatch.setenv("SLURM_CONF", str(running.conf))
        yield running


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 30) -> Any:
    """``check()``'s first true value, asked every 0.2 s.

    Raises:
        AssertionError: none within ``timeout_s``, naming ``what`` was waited for.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
