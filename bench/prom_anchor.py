"""Prometheus anchor: the same simulated GPU history stored in and queried from Prometheus' TSDB.

Writes the history of :mod:`sim_history` as OpenMetrics text, backfills it into TSDB blocks
with ``promtool tsdb create-blocks-from openmetrics``, measures the blocks' bytes per stored
value, then serves the blocks with a private ``prometheus`` (loopback only, no scrape targets)
and times ``/api/v1/query_range`` for one node's 8 GPUs × 4 metrics. These are the figures
Fleetwatch's own storage and node view are compared with.

    python bench/prom_anchor.py [--nodes 2] [--hours 2] [--step 5] [--repeat 20] [--port 19090]

Needs ``promtool`` and ``prometheus`` on ``PATH`` (Debian's 2.42 packages work). Everything goes
to a temporary directory that is removed at the end (``--keep DIR`` keeps it in ``DIR``). The
OpenMetrics file is ~110 bytes per value: 2 nodes × 3 h at 5 s is ~1.1 M values, ~125 MB.

Metric names are ``fleetwatch_gpu_<key>`` for every key of ``agents.payload.ALL_METRIC_KEYS``
(all typed ``gauge``), labels ``hostname`` and ``gpu`` (the GPU UUID); null values are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sim_history import count_values, generate, step_count  # noqa: E402

from agents.payload import ALL_METRIC_KEYS, Sample  # noqa: E402

#: Prefix of every metric name written: ``fleetwatch_gpu_util_gpu_pct`` etc.
METRIC_PREFIX = "fleetwatch_gpu_"
#: Default start of the generated history: fixed so every run stores the same values. A multiple
#: of 72 h since the epoch, so it starts both a UTC day and one of promtool's 18 h blocks.
DEFAULT_START = datetime(2024, 1, 3, tzinfo=UTC)
#: What ``build_blocks`` asks promtool for; promtool rounds it down to a TSDB range
#: (2 h × 3^k: 2 h, 6 h, 18 h, 54 h…), so 24 h gives 18 h blocks aligned to the epoch.
MAX_BLOCK_DURATION = "24h"
#: The 4 metrics of the node-view query (one chart each).
QUERY_METRICS = ("util_gpu_pct", "mem_used_bytes", "power_w", "temp_c")
#: Prometheus refuses range queries of more points than this per series.
MAX_POINTS_PER_SERIES = 11_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def _label_value(value: str) -> str:
    """Escape ``value`` for a quoted OpenMetrics label value."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """Format ``value`` so that it parses back to exactly the same float64 (``repr`` of a float
    is the shortest round-tripping form; ints print exactly, and Prometheus stores them as
    float64, exact up to 2^53)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _timestamp_ms(sampled_at: str) -> int:
    """Return ``sampled_at`` (RFC 3339) as integer milliseconds since the epoch."""
    return (datetime.fromisoformat(sampled_at) - _EPOCH) // _MS


def _seconds(ms: int) -> str:
    """Format ``ms`` (milliseconds since the epoch) as OpenMetrics seconds: an integer when
    whole, else three decimals."""
    whole, frac = divmod(ms, 1000)
    return str(whole) if frac == 0 else f"{whole}.{frac:03d}"


def _write_node(hostname: str, samples: list[Sample], parts: dict[str, IO[str]]) -> int:
    """Append one node's series to the per-family files ``parts`` (metric key → text file) and
    return the number of values written.

    Raises:
        ValueError: a GPU's samples are not in strictly increasing time order.
    """
    by_gpu: dict[str, list[tuple[str, Sample]]] = {}
    last_ms: dict[str, int] = {}
    for s in samples:
        uuid = s["gpu_uuid"]
        ms = _timestamp_ms(s["sampled_at"])
        if ms <= last_ms.get(uuid, -(2**63)):
            raise ValueError(f"{hostname}/{uuid}: samples not in time order at {ms} ms")
        last_ms[uuid] = ms
        by_gpu.setdefault(uuid, []).append((_seconds(ms), s))
    host = _label_value(hostname)
    written = 0
    for key in ALL_METRIC_KEYS:
        lines: list[str] = []
        for uuid, points in by_gpu.items():
            head = f'{METRIC_PREFIX}{key}{{hostname="{host}",gpu="{_label_value(uuid)}"}} '
            for ts, s in points:
                value = s.get(key)
                if value is not None:
                    lines.append(f"{head}{_number(value)} {ts}\n")
        written += len(lines)
        parts[key].write("".join(lines))
    return written


def write_openmetrics(series_iter: Iterable[tuple[str, list[Sample]]], path: Path) -> int:
    """Write ``series_iter`` (``(hostname, samples)`` pairs as :func:`sim_history.generate`
    yields them: each node's samples in time order, all its GPUs) to ``path`` as OpenMetrics
    text that ``promtool tsdb create-blocks-from openmetrics`` accepts, and return the number of
    values written (non-null metric values).

    Layout: per metric family (``ALL_METRIC_KEYS`` order, families with no value left out) one
    ``# TYPE fleetwatch_gpu_<key> gauge`` line, then its series one after the other (node, then
    GPU, in input order), each series' samples in time order as
    ``name{hostname="…",gpu="GPU-…"} value timestamp``, timestamp in seconds since the epoch
    (integer, or 3 decimals for sub-second times); ``# EOF`` last. Families must be contiguous,
    so the input is streamed once into one temporary file per family (next to ``path``) that
    are then concatenated: memory holds one node's samples at a time, disk ~2× the output.

    Raises:
        ValueError: a GPU's samples are not in strictly increasing time order.
    """
    path = Path(path)
    written = 0
    with tempfile.TemporaryDirectory(prefix=".families-", dir=path.parent) as tmp:
        with ExitStack() as stack:
            parts: dict[str, IO[str]] = {
                key: stack.enter_context(open(Path(tmp) / key, "w", encoding="ascii"))
                for key in ALL_METRIC_KEYS
            }
            for hostname, samples in series_iter:
                written += _write_node(hostname, samples, parts)
        with open(path, "w", encoding="ascii") as out:
            for key in ALL_METRIC_KEYS:
                part_path = Path(tmp) / key
                if part_path.stat().st_size == 0:
                    continue
                out.write(f"# TYPE {METRIC_PREFIX}{key} gauge\n")
                out.flush()
                with open(part_path, encoding="ascii") as part_in:
                    shutil.copyfileobj(part_in, out, 1 << 20)
            out.write("# EOF\n")
    return written


def build_blocks(openmetrics_path: Path, data_dir: Path) -> None:
    """Backfill ``openmetrics_path`` into TSDB blocks under ``data_dir`` (created if missing)
    with ``promtool tsdb create-blocks-from openmetrics --max-block-duration=24h``.

    ``--max-block-duration`` is a hidden flag in promtool 2.42 (absent from ``--help``, but
    accepted); promtool rounds it down to 18 h. Each block is written and compacted from
    promtool's in-memory head before promtool exits, so the blocks are final when this returns
    (a running Prometheus may still merge adjacent blocks into larger ranges later).

    Raises:
        RuntimeError: promtool failed; the message carries its output.
    """
    cmd = [
        "promtool",
        "tsdb",
        "create-blocks-from",
        "openmetrics",
        f"--max-block-duration={MAX_BLOCK_DURATION}",
        "--quiet",
        str(openmetrics_path),
        str(data_dir),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"promtool exited {done.returncode}: {done.stdout.strip()} {done.stderr.strip()}"
        )


def _block_dirs(data_dir: Path) -> Iterator[Path]:
    """Yield the finished block directories of ``data_dir`` (those holding ``meta.json``; the
    ``wal``, ``chunks_head`` and ``*.tmp-*`` directories are not blocks)."""
    for entry in sorted(Path(data_dir).iterdir()):
        if entry.is_dir() and ".tmp" not in entry.name and (entry / "meta.json").is_file():
            yield entry


def tsdb_bytes(data_dir: Path) -> int:
    """Return the bytes (apparent file sizes) of the blocks in ``data_dir``: every file of every
    block directory (``chunks/*``, ``index``, ``meta.json``, ``tombstones``). The WAL,
    ``chunks_head`` and lock/query-log files are not counted."""
    return sum(f.stat().st_size for block in _block_dirs(data_dir) for f in block.rglob("*"))


def block_stats(data_dir: Path) -> list[dict[str, Any]]:
    """Return one dict per block of ``data_dir``: ``ulid``, ``min_time``/``max_time`` (ms since
    the epoch, max exclusive), ``samples``, ``series``, ``chunks`` (from ``meta.json``),
    ``level`` (compaction level) and ``bytes`` (as :func:`tsdb_bytes`)."""
    stats = []
    for block in _block_dirs(data_dir):
        meta = json.loads((block / "meta.json").read_text())
        stats.append(
            {
                "ulid": meta["ulid"],
                "min_time": meta["minTime"],
                "max_time": meta["maxTime"],
                "samples": meta["stats"]["numSamples"],
                "series": meta["stats"]["numSeries"],
                "chunks": meta["stats"]["numChunks"],
                "level": meta["compaction"]["level"],
                "bytes": sum(f.stat().st_size for f in block.rglob("*")),
            }
        )
    return stats


def start_prometheus(data_dir: Path, port: int, timeout_s: float = 60.0) -> subprocess.Popen[bytes]:
    """Start ``prometheus`` serving ``data_dir`` on ``127.0.0.1:port`` and return it once
    ``/-/ready`` answers 200.

    Its config (no scrape targets) and log are written next to ``data_dir`` as
    ``<data_dir>-prometheus.yml`` and ``<data_dir>-prometheus.log``. Retention is 3650 d so
    backfilled blocks are not deleted as too old. Stop it with :func:`stop_prometheus`.

    Raises:
        RuntimeError: it exited, or was not ready within ``timeout_s`` seconds (it is stopped);
            the message carries the end of its log.
    """
    data_dir = Path(data_dir)
    config = data_dir.with_name(data_dir.name + "-prometheus.yml")
    log_path = data_dir.with_name(data_dir.name + "-prometheus.log")
    config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
    cmd = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        "--storage.tsdb.retention.time=3650d",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=info",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=data_dir.parent)
    url = f"http://127.0.0.1:{port}/-/ready"
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited {proc.returncode}: {_tail(log_path)}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            stop_prometheus(proc)
            raise RuntimeError(f"prometheus not ready after {timeout_s} s: {_tail(log_path)}")
        time.sleep(0.1)


def _tail(path: Path, chars: int = 2000) -> str:
    """Return the last ``chars`` characters of the text file ``path``."""
    return path.read_text(errors="replace")[-chars:]


def stop_prometheus(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
    """Stop ``proc`` (SIGTERM, then SIGKILL after ``timeout_s`` seconds) and return its exit
    status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def _unix_s(t: datetime | float) -> float:
    """Return ``t`` (aware datetime, or seconds since the epoch) as seconds since the epoch."""
    return t.timestamp() if isinstance(t, datetime) else float(t)


def query_range_ms(
    port: int,
    query: str,
    start: datetime | float,
    end: datetime | float,
    step_s: float,
    repeat: int,
) -> list[float]:
    """Run ``GET /api/v1/query_range`` of ``query`` over ``[start, end]`` (aware datetimes or
    seconds since the epoch) at ``step_s`` seconds ``repeat`` times on one keep-alive
    connection, and return each call's wall time in milliseconds (request sent to body fully
    read; JSON decoding and the checks are not timed). The first call is the coldest.

    Raises:
        RuntimeError: a call did not answer 200 with ``status`` ``success`` and a non-empty
            ``data.result``.
    """
    params = {
        "query": query,
        "start": repr(_unix_s(start)),
        "end": repr(_unix_s(end)),
        "step": repr(float(step_s)),
    }
    times: list[float] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120.0) as client:
        for _ in range(repeat):
            t0 = time.perf_counter()
            response = client.get("/api/v1/query_range", params=params)
            elapsed = (time.perf_counter() - t0) * 1000.0
            body = (
                response.json()
                if response.headers.get("content-type", "").startswith("application/json")
                else {}
            )
            if response.status_code != 200 or body.get("status") != "success":
                raise RuntimeError(
                    f"query_range {query!r} answered {response.status_code}: "
                    f"{body.get('error', response.text[:500])}"
                )
            if not body["data"]["result"]:
                raise RuntimeError(f"query_range {query!r}: empty result")
            times.append(elapsed)
    return times


def prometheus_version() -> str:
    """Return the first line of ``prometheus --version``."""
    done = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=True)
    return (done.stdout or done.stderr).splitlines()[0]


def _counted(
    series_iter: Iterable[tuple[str, list[Sample]]], totals: dict[str, int]
) -> Iterator[tuple[str, list[Sample]]]:
    """Pass ``series_iter`` through, adding up ``samples`` and ``values`` in ``totals``."""
    for hostname, samples in series_iter:
        totals["samples"] += len(samples)
        totals["values"] += count_values(samples)
        yield hostname, samples


def _timed_queries(
    port: int, hostname: str, start: datetime, end: datetime, step_s: float, repeat: int
) -> None:
    """Print the timings of the node-view queries (4 metrics × the node's GPUs) at ``step_s``:
    one query per metric, their per-round sum, and the 4 metrics in one ``__name__`` query."""
    points = int((end - start).total_seconds() // step_s) + 1
    if points > MAX_POINTS_PER_SERIES:
        print(f"  step {step_s:g} s: skipped, {points} points per series > {MAX_POINTS_PER_SERIES}")
        return
    rounds: list[float] = [0.0] * repeat
    for key in QUERY_METRICS:
        query = f'{METRIC_PREFIX}{key}{{hostname="{hostname}"}}'
        times = query_range_ms(port, query, start, end, step_s, repeat)
        rounds = [r + t for r, t in zip(rounds, times, strict=True)]
        print(
            f"  step {step_s:g} s, {query}: first {times[0]:.1f} ms, "
            f"median {statistics.median(times):.1f} ms"
        )
    print(
        f"  step {step_s:g} s, 4 queries in turn ({points} points/series): "
        f"first {rounds[0]:.1f} ms, median {statistics.median(rounds):.1f} ms"
    )
    names = "|".join(METRIC_PREFIX + key for key in QUERY_METRICS)
    query = f'{{__name__=~"{names}",hostname="{hostname}"}}'
    times = query_range_ms(port, query, start, end, step_s, repeat)
    print(
        f"  step {step_s:g} s, one query for the 4 metrics: first {times[0]:.1f} ms, "
        f"median {statistics.median(times):.1f} ms"
    )


def main() -> None:
    """Run the anchor and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--step", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--repeat", type=int, default=20, help="calls per timed query")
    parser.add_argument("--port", type=int, default=19090)
    parser.add_argument(
        "--start",
        type=datetime.fromisoformat,
        default=DEFAULT_START,
        help=f"first sample, RFC 3339 with offset (default {DEFAULT_START.isoformat()})",
    )
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()
    start: datetime = args.start
    if start.tzinfo is None:
        parser.error("--start needs a UTC offset")
    steps = step_count(args.hours, args.step)
    if steps == 0:
        parser.error("--hours/--step give no samples")
    last = start + timedelta(seconds=(steps - 1) * args.step)
    if last > datetime.now(UTC) - timedelta(hours=3):
        parser.error("the history must end at least 3 h before now (promtool/head boundaries)")

    with tempfile.TemporaryDirectory(prefix="prom-anchor-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        om_path = work / "history.om.txt"
        data_dir = work / "data"
        print(
            f"history: {args.nodes} nodes × 8 GPUs, {args.hours:g} h at {args.step:g} s "
            f"({steps} instants) from {start.isoformat()} to {last.isoformat()}"
        )
        totals = {"samples": 0, "values": 0}
        t0 = time.perf_counter()
        written = write_openmetrics(
            _counted(generate(args.nodes, args.hours, args.step, start), totals), om_path
        )
        t_write = time.perf_counter() - t0
        if written != totals["values"]:
            raise RuntimeError(f"wrote {written} values, count_values says {totals['values']}")
        print(
            f"openmetrics: {totals['samples']} samples, {written} values, "
            f"{om_path.stat().st_size} bytes, generated+written in {t_write:.1f} s"
        )

        t0 = time.perf_counter()
        build_blocks(om_path, data_dir)
        t_build = time.perf_counter() - t0
        blocks = block_stats(data_dir)
        stored = sum(b["samples"] for b in blocks)
        size = tsdb_bytes(data_dir)
        print(f"promtool: {len(blocks)} blocks in {t_build:.1f} s")
        for b in blocks:
            span_h = (b["max_time"] - b["min_time"]) / 3_600_000
            print(
                f"  {b['ulid']} level {b['level']}: {span_h:.2f} h, {b['series']} series, "
                f"{b['samples']} samples, {b['chunks']} chunks, {b['bytes']} bytes"
            )
        if stored != written:
            raise RuntimeError(f"blocks hold {stored} samples, {written} written")
        print(f"values: {written}")
        print(f"bytes (blocks, no WAL): {size}")
        print(f"bytes per value: {size / written:.3f}")
        om_path.unlink()  # not needed any more; frees the disk before Prometheus runs

        proc = start_prometheus(data_dir, args.port)
        try:
            print(f"prometheus ready on 127.0.0.1:{args.port} (pid {proc.pid})")
            hostname = "sim-0000"
            for step_s in (60.0, 5.0):
                _timed_queries(args.port, hostname, start, last, step_s, args.repeat)
        finally:
            rc = stop_prometheus(proc)
        print(f"prometheus stopped (exit {rc})")
        after = tsdb_bytes(data_dir)
        if after != size:
            blocks = block_stats(data_dir)
            print(
                f"after prometheus ran: {len(blocks)} blocks, {after} bytes, "
                f"{after / written:.3f} bytes/value"
            )

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs ({platform.processor() or '?'})")
    print(f"prometheus: {prometheus_version()}")


if __name__ == "__main__":
    main()
