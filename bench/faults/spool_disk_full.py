"""Fault: the agent's spool disk fills up while the server is unreachable.

The real agent (``python -m agents --collector simulated``) spools into a tmpfs of
``--disk-kib`` KiB, mounted in a user and mount namespace of its own (``unshare -rm``: no root
needed, the mount is seen by that process only), with its spool bound (256 MiB) far above the
disk's size, so the disk fills first. The server stays down ``--down`` seconds, then starts.
The agent must keep running, drop the oldest batches (counted, logged) to keep the newest, and
send the rest once the server answers. Where ``unshare`` is not allowed, the script says so
and bounds the spool with ``--spool-max-bytes`` instead (the same eviction).

Prints: whether the disk really filled (ENOSPC log lines), samples collected / acknowledged /
stored, batches dropped, what was lost (the dropped batches' samples: a full disk must lose
some; oldest first, counted), and the seconds from the server's start until the agent's backlog
was sent (its newest stored sample current again).

    python bench/faults/spool_disk_full.py [--disk-kib 256] [--down 30]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.db import make_engine  # noqa: E402
from app.series.tables import gpu_sample  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.server_process import (  # noqa: E402
    ServerProcess,
    fresh_database,
    stored_samples,
    summary,
    wait_for,
)

HOST = "spoolfull-001"
_STOPPED = re.compile(
    r"stopped: (\d+) samples collected, (\d+) acknowledged; (\d+) batch\(es\) lost "
    r"\((\d+) dropped from a full spool or disk, (\d+) unwritable.*?(\d+) batch\(es\) still "
    r"spooled"
)


def namespaces_allowed() -> bool:
    """Whether this user may mount a tmpfs in a user and mount namespace of its own."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


@dataclass
class DiskFullResult:
    """What one run measured (the agent's counters from its ``stopped:`` log line)."""

    real_disk: bool
    enospc_lines: int = 0
    collected: int = 0
    acked: int = 0
    lost_batches: int = 0
    dropped_batches: int = 0
    unwritable: int = 0
    still_spooled: int = 0
    rows: int = 0
    distinct: int = 0
    agent_exit: int | None = None
    recovered_s: float | None = None


def newest_age_s(db_url: str) -> float | None:
    """Seconds since the newest stored sample (None: none stored)."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            newest = conn.scalar(select(func.max(gpu_sample.c.sampled_at)))
    finally:
        engine.dispose()
    if newest is None:
        return None
    if newest.tzinfo is None:
        newest = newest.replace(tzinfo=UTC)
    return (datetime.now(UTC) - newest).total_seconds()


def run(db_url: str, work: Path, *, disk_kib: int = 256, down_s: float = 30.0) -> DiskFullResult:
    """Run the fault on ``db_url`` (migrated, empty); logs under ``work``."""
    real = namespaces_allowed()
    result = DiskFullResult(real_disk=real)
    token = create_token(db_url, HOST)
    server = ServerProcess(db_url, free_port(), work / "server.log")
    spool = work / "spool"
    spool.mkdir()
    agent_args = [
        "--server", server.url, "--token", token, "--hostname", HOST,
        "--collector", "simulated", "--sim-gpus", "8", "--interval", "0.5",
        "--batch-interval", "1", "--spool-dir", str(spool), "--log-level", "INFO",
    ]  # fmt: skip
    if real:
        command = [
            "unshare", "-rm", "sh", "-c",
            f'mount -t tmpfs -o size={disk_kib}k tmpfs "$0" && exec "$@"',
            str(spool), sys.executable, "-m", "agents", *agent_args,
        ]  # fmt: skip
    else:
        command = [sys.executable, "-m", "agents", *agent_args]
        command += ["--spool-max-bytes", f"{disk_kib}K"]
    log_path = work / "agent.log"
    with open(log_path, "wb") as log:
        agent = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log)
    try:
        time.sleep(down_s)  # the server is down: batches pile up until the disk is full
        started = time.monotonic()
        server.start()
        caught_up = wait_for(lambda: (newest_age_s(db_url) or 1e9) < 3.0, timeout_s=120)
        if caught_up is not None:
            result.recovered_s = time.monotonic() - started
        time.sleep(3.0)
    finally:
        agent.terminate()
        result.agent_exit = agent.wait(timeout=60)
        try:
            result.rows, result.distinct = stored_samples(db_url)
        finally:
            server.stop()
    text = log_path.read_text(errors="replace")
    result.enospc_lines = text.count("disk full (No space left on device)")
    found = _STOPPED.search(text)
    if found:
        numbers = [int(g) for g in found.groups()]
        result.collected, result.acked, result.lost_batches = numbers[:3]
        result.dropped_batches, result.unwritable, result.still_spooled = numbers[3:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--disk-kib", type=int, default=256, help="the spool disk's size, KiB")
    parser.add_argument("--down", type=float, default=30.0, help="seconds the server is down")
    args = parser.parse_args()
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-spool-") as tmp:
        r = run(url, Path(tmp), disk_kib=args.disk_kib, down_s=args.down)
    print(
        summary(
            f"agent spool disk full ({args.disk_kib} KiB, server down {args.down:g} s)",
            [
                (
                    "spool on",
                    "a real tmpfs (unshare -rm)"
                    if r.real_disk
                    else "NO namespace here: --spool-max-bytes bound instead",
                ),
                ("ENOSPC log lines (oldest dropped)", r.enospc_lines),
                ("agent kept running, exit code", r.agent_exit),
                ("samples collected / acknowledged", f"{r.collected} / {r.acked}"),
                ("rows stored / distinct keys", f"{r.rows} / {r.distinct}"),
                ("batches dropped (counted by the agent)", r.dropped_batches),
                ("batches too big for the empty disk", r.unwritable),
                ("batches still spooled at exit", r.still_spooled),
                (
                    "LOST: collected - stored",
                    f"{r.collected - r.distinct} (the dropped batches: the oldest, counted)",
                ),
                ("acknowledged but not stored", r.acked - r.distinct),
                (
                    "server up -> backlog sent, s",
                    "-" if r.recovered_s is None else f"{r.recovered_s:.1f}",
                ),
            ],
        )
    )
    return 0 if r.agent_exit == 0 and r.acked == r.distinct == r.rows else 1


if __name__ == "__main__":
    sys.exit(main())
