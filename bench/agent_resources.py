"""How much CPU and memory one agent costs: a simulated 8-GPU node sampling every second and
pushing to a local dummy receiver (or ``--server``) for ``--seconds`` (default 60).

The agent runs as its own process (``python -m agents.main``), exactly as deployed, so its
figures do not include the receiver. Prints figures, asserts nothing::

    .venv/bin/python bench/agent_resources.py --seconds 30
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Counts:
    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.samples = 0
        self.lock = threading.Lock()


def _receiver(counts: _Counts) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            samples = len(json.loads(gzip.decompress(raw)).get("samples", []))
            with counts.lock:
                counts.requests += 1
                counts.bytes += len(raw)
                counts.samples += samples
            body = b'{"replayed": false}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` from /proc (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--server", help="push there instead of to a local dummy receiver")
    parser.add_argument("--token", default="fwt_bench")
    parser.add_argument("--warmup", type=float, default=5.0, help="excluded from steady CPU %%")
    args = parser.parse_args()

    counts = _Counts()
    server: ThreadingHTTPServer | None = None
    url = args.server
    if url is None:
        server = _receiver(counts)
        url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as spool:
        command = [
            sys.executable, "-m", "agents.main", "--collector", "simulated", "--sim-gpus", "8",
            "--interval", "1", "--batch-interval", "10", "--server", url, "--token", args.token,
            "--spool-dir", spool, "--hostname", "bench-node", "--log-level", "WARNING",
        ]  # fmt: skip
        started = time.monotonic()
        child = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        time.sleep(min(args.warmup, args.seconds))
        warm_cpu, warm_at = _cpu_seconds(child.pid), time.monotonic()
        time.sleep(max(0.0, args.seconds - args.warmup))
        end_cpu, end_at = _cpu_seconds(child.pid), time.monotonic()
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
        wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    max_rss_mib = usage.ru_maxrss / 1024  # KiB on Linux
    print(f"agent: simulated 8-GPU node, 1 s sampling, 10 s batches, {args.seconds:.0f} s run")
    print(f"exit status        : {child.returncode}")
    print(f"CPU, whole process : {cpu:.2f} s over {wall:.1f} s = {100 * cpu / wall:.2f} %")
    if warm_cpu is not None and end_cpu is not None:
        steady = (end_cpu - warm_cpu) / (end_at - warm_at)
        print(f"CPU, steady state  : {100 * steady:.2f} % (after {args.warmup:.0f} s warm-up)")
    print(f"max RSS            : {max_rss_mib:.1f} MiB")
    if server is not None:
        server.shutdown()
        print(
            f"received           : {counts.requests} batches, {counts.samples} samples, "
            f"{counts.bytes / 1024:.1f} KiB gzip ({counts.bytes / max(1, counts.requests):.0f} "
            "B/batch)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
