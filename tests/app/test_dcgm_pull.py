"""Pulled dcgm-exporter scrapes stored through the ingest path on Postgres and SQLite: every
capture round-trips into node, GPU and sample rows with exact values; Xids are raised once, also
across a restart; an endpoint that is down, answers an error or belongs to a pushed node is
recorded, never failing the others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.db import session_scope
from app.dcgm import fields
from app.dcgm import service as dcgm_service
from app.dcgm.jobs import run_once
from app.dcgm.models import DcgmEndpoint
from app.dcgm.parse import parse
from app.dcgm.targets import Target
from app.dcgm.translate import translate
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.metrics.catalog import METRIC_NAMES
from tests.app.dcgm_exporter_stub import exporter
from tests.app.helpers import stored_samples
from tests.dbs import session_factory
from tests.factories import batch, store_payload
from tests.shared_fixtures import fixture_names, fixture_path

NOW = datetime.now(UTC).replace(microsecond=0)
POLICY = dcgm_service.IngestPolicy()


def capture(name: str) -> str:
    return fixture_path(f"dcgm-exporter/{name}").read_text()


def store(url: str, text: str, *, target: Target, at: datetime = NOW) -> dcgm_service.Stored:
    translation = translate(parse(text), target=target, scraped_at=at)
    with session_factory(url) as factory, session_scope(factory) as session:
        return dcgm_service.store_scrape(
            session,
            target=target,
            translation=translation,
            scraped_at=at,
            duration_s=0.01,
            received_at=at,
            policy=POLICY,
        )


def rows(url: str, model: Any) -> list[Any]:
    with session_factory(url) as factory, session_scope(factory) as session:
        found = list(session.scalars(select(model)))
        session.expunge_all()
        return found


@pytest.mark.parametrize("name", fixture_names("dcgm-exporter", ".prom") or ["(absent)"])
def test_every_capture_round_trips_into_nodes_gpus_and_samples(db_url: str, name: str) -> None:
    text = capture(name)
    target = Target(url="http://10.0.0.9:9400/metrics")
    translation = translate(parse(text), target=target, scraped_at=NOW)
    store(db_url, text, target=target)

    [node] = rows(db_url, Node)
    assert node.hostname == translation.hostname
    assert node.collector == "dcgm-exporter"
    assert node.driver_version == translation.driver_version
    assert node.last_seen_at == NOW
    # Only problems reach the node's collection errors; fields left out by design do not.
    problems = [s for s in translation.skipped if not fields.by_design(s["reason"])]
    assert [e["message"] for e in node.collection_errors] == [
        f"{s['series']} ×{s['count']} skipped: {s['reason']}" for s in problems
    ]
    if name.startswith("a100-mig"):
        assert problems == [] and len(translation.skipped) == 5
    gpus = {g.uuid: g for g in rows(db_url, Gpu)}
    assert len(gpus) == len(translation.gpus)
    for sent in translation.gpus:
        got = gpus[sent["uuid"]]
        assert (got.index, got.name, got.pci_bus_id, got.mig_mode, got.state) == (
            sent["index"],
            sent["name"],
            sent["pci_bus_id"],
            sent["mig_mode"],
            "ok",
        )
        expected_instances = [
            {
                "uuid": None,
                "compute_instance_id": None,
                "mem_total_bytes": None,
                "mem_used_bytes": None,
                **i,
            }
            for i in sent["mig_instances"] or []
        ]
        assert (got.mig_instances or []) == expected_instances
    by_id = {g.id: g.uuid for g in gpus.values()}
    stored = {by_id[r["gpu_id"]]: r for r in stored_samples(db_url)}
    assert set(stored) == set(gpus)  # one sample per GPU, at the scrape
    for sample in translation.samples:
        row = stored[sample["gpu_uuid"]]
        assert row["sampled_at"] == NOW
        for metric in METRIC_NAMES:
            assert row[metric] == sample.get(metric), (sample["gpu_uuid"], metric)
    [endpoint] = rows(db_url, DcgmEndpoint)
    assert (endpoint.series_total, endpoint.series_stored) == (
        translation.series_total,
        translation.series_stored,
    )
    assert endpoint.skipped == translation.skipped
    assert endpoint.workloads == translation.workloads
    assert endpoint.last_error is None and endpoint.node_id == node.id


def test_the_blank_memory_temperature_is_stored_null_beside_the_real_clocks(db_url: str) -> None:
    store(
        db_url,
        capture("readme-quickstart-blank-sentinel-memtemp.prom"),
        target=Target(url="http://gpu-node-01:9400/metrics"),
    )
    [row] = stored_samples(db_url)
    assert (row["sm_clock_mhz"], row["mem_clock_mhz"], row["mem_temp_c"]) == (139, 405, None)
    [node] = rows(db_url, Node)
    assert node.hostname == "gpu-node-01"
    assert node.collection_errors == [
        {"source": "dcgm-exporter", "message": s}
        for s in (
            "line 11 ×1 skipped: not Prometheus text: invalid metric name:...",
            "line 7 ×1 skipped: not Prometheus text: invalid metric name:...",
        )
    ]


def test_the_injected_xid_42_is_one_event_across_scrapes_and_a_restart(db_url: str) -> None:
    text = capture("t400-injected-xid42-count-window.prom")
    target = Target(url="http://workstation:9400/metrics")
    first = store(db_url, text, target=target)
    assert first.result.events_stored == 1
    # Each store opens its own engine and session: what survives is what the database holds.
    again = store(db_url, text, target=target, at=NOW + timedelta(seconds=30))
    assert again.result.events_stored == 0
    [event] = rows(db_url, NodeEvent)
    [gpu] = rows(db_url, Gpu)
    assert (event.kind, event.xid, event.gpu_id, event.occurred_at) == ("xid", 42, gpu.id, NOW)
    assert event.message == (
        "Xid 42 (dcgm-exporter http://workstation:9400/metrics: "
        "DCGM_EXP_XID_ERRORS_COUNT 1 within 300 s)"
    )
    [endpoint] = rows(db_url, DcgmEndpoint)
    assert endpoint.events_raised == 1
    assert endpoint.xid_state == {"last": {}, "count": {f"{gpu.uuid}#42": 1}}


def test_a_changed_last_xid_is_raised_and_an_unchanged_one_is_not(db_url: str) -> None:
    text = capture("a100-mig-1g5gb-gpu-and-gi-metrics.prom")
    target = Target(url="http://gpu-host-01:9400/metrics")
    assert store(db_url, text, target=target).result.events_stored == 0  # XID_ERRORS 0: none
    changed = text.replace('Hostname="gpu-host-01"} 0\n', 'Hostname="gpu-host-01"} 79\n')
    later = NOW + timedelta(seconds=30)
    assert store(db_url, changed, target=target, at=later).result.events_stored == 1
    assert (
        store(db_url, changed, target=target, at=later + timedelta(seconds=30)).result.events_stored
        == 0
    )
    assert [(e.xid, e.occurred_at) for e in rows(db_url, NodeEvent)] == [(79, later)]


def test_a_node_pushed_by_an_agent_is_not_overwritten_by_a_scrape(db_url: str) -> None:
    store_payload(db_url, batch("gpu-host-01", gpus=1, samples_per_gpu=1), received_at=NOW)
    with pytest.raises(dcgm_service.NotStored, match="pushed by an agent"):
        store(
            db_url,
            capture("a100-mig-1g5gb-gpu-and-gi-metrics.prom"),
            target=Target(url="http://gpu-host-01:9400/metrics"),
        )


def test_scrapes_over_http_store_the_good_endpoints_and_record_the_bad(db_url: str) -> None:
    pages: dict[str, str | int] = {
        "/v100": capture("v100-sxm2-4gpu-counter-and-gauge-excerpt.prom"),
        "/h100": capture("h100-8gpu-eks-idle-sampled.prom"),
        "/broken": 500,
    }
    with exporter(pages) as stub, session_factory(db_url) as factory:
        down = "http://127.0.0.1:9/metrics"  # discard port: nothing listens
        targets = [Target(url=f"{stub.url}{p}") for p in ("/v100", "/broken", "/h100")]
        targets.append(Target(url=down))
        run_once(targets, factory, policy=POLICY, timeout_s=5, concurrency=4)

    endpoints = {e.url: e for e in rows(db_url, DcgmEndpoint)}
    assert endpoints[f"{stub.url}/v100"].hostname == "gpu-host-02"
    assert endpoints[f"{stub.url}/v100"].gpu_count == 4
    assert endpoints[f"{stub.url}/h100"].hostname == "ip-10-0-0-1.ec2.internal"
    assert endpoints[f"{stub.url}/h100"].series_stored == 30
    assert endpoints[f"{stub.url}/broken"].last_error == "HTTP 500 Internal Server Error"
    assert endpoints[f"{stub.url}/broken"].last_success_at is None
    assert endpoints[down].last_error.startswith("ConnectError")
    assert sorted(n.hostname for n in rows(db_url, Node)) == [
        "gpu-host-02",
        "ip-10-0-0-1.ec2.internal",
    ]
    # The captures share their (anonymised) UUIDs: the H100 node's GPUs 1-4 are the V100
    # node's, which reported them first, so they are not taken over, and the endpoint says so.
    owners = {g.uuid: g.node_id for g in rows(db_url, Gpu)}
    assert len(owners) == 8
    h100 = endpoints[f"{stub.url}/h100"]
    assert [s for s in h100.skipped if s["series"].startswith("GPU ")] == [
        {
            "series": f"GPU GPU-00000000-0000-0000-0000-{n:012d}",
            "reason": "node gpu-host-02 reports this GPU: not taken over (docs/ingest.md)",
            "count": 1,
        }
        for n in (1, 2, 3, 4)
    ]


def test_a_retired_pulled_node_stays_retired(db_url: str) -> None:
    from app.fleet import retire

    text = capture("h100-8gpu-eks-idle-sampled.prom")
    target = Target(url="http://10.0.0.1:9400/metrics")
    store(db_url, text, target=target)
    with session_factory(db_url) as factory, session_scope(factory) as session:
        retire.retire(session, hostname="ip-10-0-0-1.ec2.internal", reason="decommissioned")
    with pytest.raises(dcgm_service.NotStored, match="is retired: remove this endpoint"):
        store(db_url, text, target=target, at=NOW + timedelta(seconds=30))
    [node] = rows(db_url, Node)
    assert node.retired_at is not None


def test_an_exporter_back_under_a_new_url_does_not_raise_the_same_xid_again(db_url: str) -> None:
    text = capture("a100-mig-1g5gb-gpu-and-gi-metrics.prom").replace(
        'Hostname="gpu-host-01"} 0\n', 'Hostname="gpu-host-01"} 79\n'
    )
    assert (
        store(db_url, text, target=Target(url="http://10.42.0.7:9400/metrics")).result.events_stored
        == 1
    )
    # The pod restarted: a new IP in the regenerated targets file, the same node and GPUs.
    moved = store(
        db_url,
        text,
        target=Target(url="http://10.42.0.9:9400/metrics"),
        at=NOW + timedelta(seconds=30),
    )
    assert moved.result.events_stored == 0
    assert len(rows(db_url, NodeEvent)) == 1


def test_a_page_that_breaks_the_reader_is_recorded_and_the_round_goes_on(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.dcgm import jobs

    real = jobs.translate

    def fussy(parsed: Any, *, target: Target, scraped_at: datetime) -> Any:
        if target.url.endswith("/bad"):
            raise RuntimeError("a reader bug")
        return real(parsed, target=target, scraped_at=scraped_at)

    monkeypatch.setattr(jobs, "translate", fussy)
    good = capture("t400-injected-xid42-count-window.prom")
    with exporter({"/bad": good, "/good": good}) as stub, session_factory(db_url) as factory:
        targets = [Target(url=f"{stub.url}/bad"), Target(url=f"{stub.url}/good")]
        run_once(targets, factory, policy=POLICY, timeout_s=5)
    endpoints = {e.url.rsplit("/", 1)[1]: e for e in rows(db_url, DcgmEndpoint)}
    assert endpoints["bad"].last_error == "reading the page failed: RuntimeError: a reader bug"
    assert (endpoints["good"].last_error, endpoints["good"].hostname) == (None, "workstation")


def test_two_endpoints_naming_one_node_do_not_take_turns_with_its_gpus(db_url: str) -> None:
    # Two exporters whose pages both say Hostname="n1" (a copied NODE_NAME, a pod name reused):
    # stored in turn, each round would mark the other's GPUs missing and back.
    def page(gpu_uuid: str) -> str:
        return f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{gpu_uuid}",Hostname="n1"}} 40\n'

    with exporter({"/a": page("GPU-a"), "/b": page("GPU-b")}) as stub:
        targets = [Target(url=f"{stub.url}/a"), Target(url=f"{stub.url}/b")]
        with session_factory(db_url) as factory:
            for _ in range(2):
                run_once(targets, factory, policy=POLICY, timeout_s=5)
    assert [(g.uuid, g.state) for g in rows(db_url, Gpu)] == [("GPU-a", "ok")]
    endpoints = {e.url: e for e in rows(db_url, DcgmEndpoint)}
    assert endpoints[f"{stub.url}/a"].last_error is None
    assert endpoints[f"{stub.url}/b"].last_error == (
        f"node n1 is scraped at {stub.url}/a too: two endpoints name one node; give each "
        "target its own hostname label (docs/dcgm-pull.md)"
    )
    # The first endpoint down, the second takes the node over at the next round.
    with exporter({"/b": page("GPU-b")}) as stub_b, session_factory(db_url) as factory:
        moved = [Target(url=f"{stub.url}/a"), Target(url=f"{stub_b.url}/b")]
        run_once(moved, factory, policy=POLICY, timeout_s=5)
    assert {g.uuid: g.state for g in rows(db_url, Gpu)}["GPU-b"] == "ok"


def test_a_page_without_a_single_dcgm_sample_is_a_failed_scrape_not_a_node(db_url: str) -> None:
    # A proxy's error or login page answered with 200, or an empty answer: storing it would
    # make a node named after the URL's host, with no GPUs, beside the real one.
    pages: dict[str, str | int] = {
        "/html": "<html><body><h1>502 Bad Gateway</h1></body></html>\n",
        "/empty": "",
        "/comments": "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n",
        "/node-exporter": "# TYPE node_load1 gauge\nnode_load1 0.5\nnode_load5 0.25\n",
    }
    with exporter(pages) as stub, session_factory(db_url) as factory:
        targets = [Target(url=f"{stub.url}{p}") for p in pages]
        run_once(targets, factory, policy=POLICY, timeout_s=5)
    assert rows(db_url, Node) == []
    errors = {e.url.rsplit("/", 1)[1]: e.last_error for e in rows(db_url, DcgmEndpoint)}
    assert errors == {
        "html": "no Prometheus sample on the page (line 1: not Prometheus text: invalid metric "
        "name:<html><body><h1>502 Bad Gateway</h1></body></html>)",
        "empty": "no Prometheus sample on the page (it is empty)",
        "comments": "no Prometheus sample on the page",
        "node-exporter": "no DCGM_FI_* or DCGM_EXP_* series on the page (2 other series): "
        "is it a dcgm-exporter?",
    }


def test_a_targets_file_broken_while_regenerated_keeps_its_last_good_targets(
    db_url: str, tmp_path: Path
) -> None:
    # A job rewriting the file in place (not by rename) leaves it half-written for a moment,
    # or a typo lands in it: dropping its targets would make every pulled node stale and page.
    from app.dcgm.jobs import ScrapeJob
    from app.dcgm.listing import listing
    from tests.conftest import make_settings

    page = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="gpu-node-07"} 40\n'
    sd_file = tmp_path / "dcgm-targets.yaml"
    with exporter({"/metrics": page}) as stub, session_factory(db_url) as factory:
        sd_file.write_text(f"- targets: ['{stub.url.removeprefix('http://')}']\n")
        job = ScrapeJob(make_settings(db_url, tmp_path, dcgm_endpoints_file=str(sd_file)), factory)
        job.job()
        sd_file.write_text("- targets: ['half-writ")
        job.job()
        with session_scope(factory) as session:
            listed = listing(session, settings=job.settings, job=job)
        sd_file.unlink()
        job.job()
    assert stub.hits == ["/metrics"] * 3
    assert job.targets_error is not None and job.targets_error.startswith(f"{sd_file}: ")
    assert listed.targets_error is not None and "neither JSON nor YAML" in listed.targets_error
    assert [(e.url, e.configured) for e in listed.endpoints] == [(f"{stub.url}/metrics", True)]


def test_a_node_named_by_an_ipv6_url_says_to_give_it_a_hostname(db_url: str) -> None:
    # No Hostname label on the page and no hostname on the target: the URL's host names the
    # node, which an IPv6 address cannot.
    page = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} 40\n'
    with pytest.raises(dcgm_service.NotStored) as caught:
        store(db_url, page, target=Target(url="http://[fd00::17]:9400/metrics"))
    message = str(caught.value)
    assert message.startswith("not a valid hostname: 'fd00::17': expected at most 253 ASCII")
    assert message.endswith(
        ": give the target a hostname label, or set NODE_NAME on the exporter for its "
        "Hostname label (docs/dcgm-pull.md)"
    )
    assert rows(db_url, Node) == []
