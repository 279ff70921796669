"""Fault: an NVML call that does not return on one GPU while the node's other GPUs report.

The real agent loop and NVML collector (:class:`agents.collectors.nvml.NvmlCollector`, each call
within ``call_timeout_s``) run against the fake NVML of the tests, built from a real 8-GPU H100
capture (``../shared/fixtures``), in which ``nvmlDeviceGetPowerUsage`` on GPU 2 blocks for
``--hang`` seconds (as a GPU falling off the bus or a driver stuck in a reset does). They push to
a real server (jobs on, ``FLEETWATCH_STALE_AFTER_S=5``, the default rule pack). The other seven
GPUs must keep reporting every round; the hung GPU must be marked (health reason
``gpu_unresponsive``, the node's collection errors naming the call) and its alert
``gpu-unresponsive`` go pending (it pages after its ``for: 1m``); when the call returns, the
GPU reports again and its health clears.

    python bench/faults/nvml_hang.py [--hang 25]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.agent import Agent, AgentConfig  # noqa: E402
from agents.collectors.nvml import NvmlCollector  # noqa: E402
from bench.faults.paging import SERVER_ENV, prepare_alerting  # noqa: E402
from tests.agents.gpu.fake_pynvml import FakeNvml  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.notify_helpers import receiver  # noqa: E402
from tests.server_process import ServerProcess, fresh_database, summary, wait_for  # noqa: E402

CAPTURE = "h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml"
HOST = "hang-001"
HUNG = 2
CALL = "nvmlDeviceGetPowerUsage"


@dataclass
class HangResult:
    """What one run measured."""

    marked_s: float | None = None
    reason: str = ""
    collection_error: str = ""
    alert_state: str = ""
    others_reporting: bool = False
    others_new_samples: dict[int, int] = field(default_factory=dict)
    hung_new_samples: int = 0
    back_s: float | None = None
    health_after: str = ""
    dropped_batches: int = 0


def install_fake_nvml(capture: Path) -> FakeNvml:
    """Make ``import pynvml`` return the fake NVML of ``capture``."""
    fake = FakeNvml.from_capture(capture)
    sys.modules["pynvml"] = fake  # type: ignore[assignment]
    return fake


def _gpu(node: dict[str, Any], index: int) -> dict[str, Any]:
    return next(g for g in node["gpus"] if g["index"] == index)


def _health_gpu(health: dict[str, Any], index: int) -> dict[str, Any]:
    return next(g for g in health["gpus"] if g["index"] == index)


def run(db_url: str, work: Path, capture: Path, *, hang_s: float = 25.0) -> HangResult:
    """Run the fault on ``db_url`` (migrated, empty) with the fake NVML of ``capture``."""
    result = HangResult()
    fake = install_fake_nvml(capture)
    env = {**SERVER_ENV, "FLEETWATCH_STALE_AFTER_S": "5"}
    with receiver() as hook:
        prepare_alerting(db_url, hook.url + "/hook")
        server = ServerProcess(db_url, free_port(), work / "server.log", env=env)
        server.start()
        config = AgentConfig(
            hostname=HOST,
            spool_dir=work / "spool",
            server_url=server.url,
            token=create_token(db_url, HOST),
            interval_s=0.5,
            batch_interval_s=1.0,
            backoff_base_s=0.2,
            backoff_cap_s=1.0,
        )
        agent = Agent(config, NvmlCollector(call_timeout_s=0.5))
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        thread.start()
        url = f"{server.url}/api/v1/nodes/{HOST}"
        try:
            wait_for(lambda: server.api.get(url, timeout=10).status_code == 200, 60)
            time.sleep(3.0)
            before = {g["index"]: g["last_sample_at"] for g in server.api.get(url).json()["gpus"]}
            fake.devices[HUNG].hang_s[CALL] = hang_s
            hung_at = time.monotonic()

            def marked() -> bool:
                health = server.api.get(f"{url}/health", timeout=10).json()
                return any(
                    r["code"] == "gpu_unresponsive" for r in _health_gpu(health, HUNG)["reasons"]
                )

            if wait_for(marked, timeout_s=hang_s) is not None:
                result.marked_s = time.monotonic() - hung_at
            health = server.api.get(f"{url}/health", timeout=10).json()
            result.reason = next(
                (r["text"] for r in _health_gpu(health, HUNG)["reasons"]), "(none)"
            )
            node = server.api.get(url, timeout=10).json()
            result.collection_error = "; ".join(
                str(e.get("message")) for e in node.get("collection_errors") or []
            )
            time.sleep(2.0)  # the evaluator steps the rule
            alerts = server.api.get(f"{server.url}/api/v1/alerts", timeout=10).json()
            result.alert_state = ", ".join(
                f"{a['rule']} {a['state']}" for a in alerts if a["labels"].get("hostname") == HOST
            )
            node = server.api.get(url, timeout=10).json()
            result.others_reporting = all(
                _gpu(node, i)["last_sample_at"] != before[i] for i in before if i != HUNG
            )
            result.hung_new_samples = int(_gpu(node, HUNG)["last_sample_at"] != before[HUNG])
            del fake.devices[HUNG].hang_s[CALL]  # the stuck call returns when its sleep ends

            def back() -> bool:
                health = server.api.get(f"{url}/health", timeout=10).json()
                return _health_gpu(health, HUNG)["state"] == "healthy"

            waited = wait_for(back, timeout_s=hang_s + 60)
            if waited is not None:
                result.back_s = time.monotonic() - hung_at - hang_s
            result.health_after = server.api.get(f"{url}/health", timeout=10).json()["state"]
        finally:
            stop.set()
            thread.join(timeout=30)
            server.stop()
        result.dropped_batches = agent.batches_dropped
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hang", type=float, default=25.0, help="seconds the call blocks")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    capture = ROOT.parent / "shared" / "fixtures" / "nvidia-smi-xml" / CAPTURE
    if not capture.is_file():
        print(f"the real GPU capture {capture} is absent (../shared): nothing to run")
        return 2
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-hang-") as tmp:
        r = run(url, Path(tmp), capture, hang_s=args.hang)
    print(
        summary(
            f"{CALL} on GPU {HUNG} blocks {args.hang:g} s (8-GPU H100 node)",
            [
                ("other 7 GPUs kept reporting", r.others_reporting),
                (
                    "hung GPU marked after, s",
                    "never" if r.marked_s is None else f"{r.marked_s:.1f}",
                ),
                ("its health reason", r.reason),
                ("node collection errors", r.collection_error[:200]),
                ("alerts on the node", r.alert_state or "(none)"),
                (
                    "call returned -> GPU healthy again, s",
                    "never" if r.back_s is None else f"{r.back_s:.1f}",
                ),
                ("node health after", r.health_after),
                ("batches dropped by the agent", r.dropped_batches),
            ],
        )
    )
    ok = r.others_reporting and r.marked_s is not None and r.back_s is not None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
