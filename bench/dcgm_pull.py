"""Pull mode: how long one round of dcgm-exporter scrapes takes for N endpoints, split into
fetch + parse + translate (parallel) and store (one transaction per endpoint, in turn).

Serves N synthetic 8-GPU dcgm-exporter pages (the fields of the A100 capture's GPU block, each
page its own host and GPU UUIDs) from one local HTTP server, then runs ``--rounds`` rounds of
:func:`app.dcgm.jobs.run_once` against a fresh SQLite file, or a fresh Postgres database with
``--postgres``. Prints per round the wall time, the store time per endpoint, and the machine.
The first round creates the nodes and GPUs; the later ones are the steady state.

    python bench/dcgm_pull.py [--endpoints 200] [--rounds 3] [--concurrency 16] [--postgres]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db import make_engine, make_session_factory  # noqa: E402
from app.dcgm import jobs, service  # noqa: E402
from app.dcgm.targets import Target  # noqa: E402
from bench.metrics_scrape import machine  # noqa: E402
from bench.overview_page import database  # noqa: E402

FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": "1215",
    "DCGM_FI_DEV_MEM_CLOCK": "1593",
    "DCGM_FI_DEV_MEMORY_TEMP": "69",
    "DCGM_FI_DEV_GPU_TEMP": "61",
    "DCGM_FI_DEV_POWER_USAGE": "409.692000",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "319159391",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "0",
    "DCGM_FI_DEV_GPU_UTIL": "97",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "41",
    "DCGM_FI_DEV_XID_ERRORS": "0",
    "DCGM_FI_DEV_FB_FREE": "35690",
    "DCGM_FI_DEV_FB_USED": "4845",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "0",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "0.995630",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "0.929260",
    "DCGM_FI_PROF_DRAM_ACTIVE": "0.690789",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "33011804",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "97863601",
}


def page(node: int) -> bytes:
    """An 8-GPU page of host ``bench-<node>``."""
    lines = []
    for name, value in FIELDS.items():
        lines.append(f"# TYPE {name} gauge")
        for gpu in range(8):
            bus = f"00000000:{0x18 + gpu:02X}:00.0"
            labels = (
                f'gpu="{gpu}",UUID="GPU-bench-{node:05d}-{gpu}",pci_bus_id="{bus}",'
                f'device="nvidia{gpu}",modelName="NVIDIA A100-SXM4-80GB",'
                f'Hostname="bench-{node:05d}",DCGM_FI_DRIVER_VERSION="570.133.20"'
            )
            lines.append(f"{name}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


def serve(count: int) -> ThreadingHTTPServer:
    pages = {f"/n{i}/metrics": page(i) for i in range(count)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    server = serve(args.endpoints)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    targets = [Target(url=f"{base}/n{i}/metrics") for i in range(args.endpoints)]
    with database(args.postgres) as (url, _tmp):
        print(machine(url))
        engine = make_engine(url)
        factory = make_session_factory(engine)
        stores: list[float] = []
        original = service.store_scrape

        def timed(*a: object, **k: object) -> service.Stored:
            started = time.perf_counter()
            try:
                return original(*a, **k)  # type: ignore[arg-type]
            finally:
                stores.append(time.perf_counter() - started)

        jobs.dcgm_service.store_scrape = timed  # type: ignore[assignment]
        for round_no in range(1, args.rounds + 1):
            stores.clear()
            started = time.perf_counter()
            jobs.run_once(
                targets,
                factory,
                policy=service.IngestPolicy(),
                timeout_s=10,
                concurrency=args.concurrency,
            )
            wall = time.perf_counter() - started
            print(
                f"round {round_no}: {args.endpoints} endpoints × 8 GPUs in {wall:.2f} s "
                f"(store {sum(stores):.2f} s; per endpoint median "
                f"{statistics.median(stores) * 1000:.1f} ms, max {max(stores) * 1000:.1f} ms)"
            )
        engine.dispose()
    server.shutdown()


if __name__ == "__main__":
    main()
