"""Ingest parse cost: the CPU time of reading one agent batch (JSON decode, validation, rows),
the server's per-batch work before the database, for a clean batch and for batches with one bad
value that the server leaves out (issue 14) instead of refusing the batch.

The batch is what an 8-GPU HGX agent sends (agents/agent.py): ``--samples`` samples per GPU and
the node sections of the same seconds (tests/app/section_factories.py). Each case is parsed
``--rounds`` times; prints the machine, the median and p95 milliseconds per batch and the ratio
to the clean batch.

    python bench/ingest_parse.py [--samples 60] [--rounds 200]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.ingest import body  # noqa: E402
from app.ingest.fields import clean_document  # noqa: E402
from app.ingest.rows import parse_batch  # noqa: E402
from tests.app.section_factories import with_sections  # noqa: E402
from tests.factories import batch, iso  # noqa: E402


def _clean(samples: int) -> dict[str, Any]:
    at = datetime.now(UTC).replace(microsecond=0)
    payload = with_sections(batch(gpus=8, samples_per_gpu=samples), at)
    payload["events"] = [{"occurred_at": iso(at), "kind": "xid", "xid": 79, "message": "Xid 79"}]
    return payload


def _cases(samples: int) -> dict[str, dict[str, Any]]:
    clean = _clean(samples)
    bad_sample = copy.deepcopy(clean)
    bad_sample["samples"][len(bad_sample["samples"]) // 2]["power_w"] = "12,5"
    bad_event = copy.deepcopy(clean)
    bad_event["events"][0]["xid"] = "79, pid=1234"
    bad_uuid = copy.deepcopy(clean)
    bad_uuid["samples"][3]["gpu_uuid"] = 7
    return {
        "clean": clean,
        "one sample value not a number": bad_sample,
        "one event with a bad xid": bad_event,
        "one sample without a usable gpu_uuid": bad_uuid,
    }


def _parse(raw: bytes) -> Any:
    decoded = body.decode(raw, encoding="identity", max_bytes=64 * 2**20)
    document = decoded.document if decoded.plain else clean_document(decoded.document)
    return parse_batch(document)


def _time(work: Callable[[], Any], rounds: int) -> list[float]:
    spent = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        spent.append((time.perf_counter() - start) * 1000)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=60, help="samples per GPU per batch")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    clean_ms = None
    for name, document in _cases(args.samples).items():
        raw = orjson.dumps(document)
        parsed = _parse(raw)
        spent = _time(lambda raw=raw: _parse(raw), args.rounds)
        median = statistics.median(spent)
        p95 = statistics.quantiles(spent, n=20)[-1]
        clean_ms = clean_ms or median
        left_out = sum(parsed.salvage.by_reason.values())
        print(
            f"{name:40s} {len(raw) / 1024:7.0f} KiB  median {median:7.2f} ms  p95 {p95:7.2f} ms"
            f"  ×{median / clean_ms:4.2f}  left out: {left_out}"
        )


if __name__ == "__main__":
    main()
