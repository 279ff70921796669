"""Kubernetes cordon, drain and uncordon through the official client, against a local HTTP
server that serves the API subset Fleetwatch uses and records every request: the exact
PATCH bodies and content type, the pod list by node, one eviction per pod but DaemonSet,
mirror and finished pods, an eviction a PodDisruptionBudget refuses (429) retried until it
passes, and a refusal of the API (403) surfaced in the action log. Postgres and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.db import session_scope, utcnow
from app.remediation.models import NodeAction
from app.remediation.worker import ActionWorker
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token
from tests.kube_api import TOKEN, FakeApi, write_kubeconfig
from tests.live_server import LiveServer

NODE = "gpu-node-07"


def _pod(
    name: str, namespace: str = "train", *, owner: str = "ReplicaSet", **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner", "uid": "u-1"}
        ],
        "annotations": extra.pop("annotations", {}),
    }
    return {"metadata": meta, "status": {"phase": extra.pop("phase", "Running")}}


PODS = [
    _pod("llm-pretrain-0"),
    _pod("dcgm-exporter-x1", "monitoring", owner="DaemonSet"),
    _pod(
        "kube-proxy-gpu-node-07",
        "kube-system",
        owner="Node",
        annotations={"kubernetes.io/config.mirror": "abc"},
    ),
    _pod("finished-job", phase="Succeeded"),
    _pod("protected-0", "serving"),
]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    """The fake API and a kubeconfig that reaches it with a bearer token."""
    api = FakeApi(PODS)
    yield api, write_kubeconfig(tmp_path / "kubeconfig", api.url)
    api.close()


@pytest.fixture
def live(db_url: str, tmp_path: Path, kube: tuple[FakeApi, Path]) -> Iterator[LiveServer]:
    server = LiveServer(make_settings(db_url, tmp_path, kubeconfig=str(kube[1])))
    server.start()
    token = create_token(db_url, f"{NODE}.cluster.example")
    payload = batch(f"{NODE}.cluster.example", labels={"k8s_node": NODE, "cluster": "a"})
    assert post_batch(server.url, token, payload).status_code == 200
    yield server
    server.stop()


def _move(live: LiveServer, to_state: str) -> dict[str, Any]:
    response = httpx.post(
        f"{live.url}/api/v1/nodes/{NODE}.cluster.example/lifecycle",
        json={"to_state": to_state, "reason": "Xid 79 on GPU 3"},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _actions(live: LiveServer) -> list[dict[str, Any]]:
    body = httpx.get(f"{live.url}/api/v1/nodes/{NODE}.cluster.example/lifecycle").json()
    return list(reversed(body["actions"]))


def _worker(db_url: str, config: Path) -> Any:
    with session_factory(db_url) as factory:
        return ActionWorker(factory, kubeconfig=str(config)).run_once()


def test_cordon_drain_with_a_budget_then_uncordon(
    live: LiveServer, db_url: str, kube: tuple[FakeApi, Path]
) -> None:
    api, config = kube
    made = _move(live, "quarantined")
    assert [(a["system"], a["verb"], a["target"]) for a in made["actions"]] == [
        ("kubernetes", "cordon", NODE),
        ("kubernetes", "drain", NODE),
    ]
    report = _worker(db_url, config)
    assert (report.succeeded, report.retried) == (
        1,
        1,
    )  # the cordon; the drain waits for its budget
    patch, listing, *evictions = api.requests
    assert (patch["method"], patch["path"]) == ("PATCH", f"/api/v1/nodes/{NODE}")
    assert patch["content_type"] == "application/strategic-merge-patch+json"
    assert patch["authorization"] == f"Bearer {TOKEN}"
    assert patch["body"] == {
        "metadata": {"annotations": {"fleetwatch.io/quarantine-reason": "Xid 79 on GPU 3"}},
        "spec": {"unschedulable": True},
    }
    assert (listing["method"], listing["path"]) == ("GET", "/api/v1/pods")
    assert listing["query"]["fieldSelector"] == [f"spec.nodeName={NODE}"]
    assert [(e["method"], e["path"]) for e in evictions] == [
        ("POST", "/api/v1/namespaces/train/pods/llm-pretrain-0/eviction"),
        ("POST", "/api/v1/namespaces/serving/pods/protected-0/eviction"),
    ]
    assert evictions[0]["body"]["metadata"] == {"name": "llm-pretrain-0", "namespace": "train"}
    assert (evictions[0]["body"]["apiVersion"], evictions[0]["body"]["kind"]) == (
        "policy/v1",
        "Eviction",
    )
    cordon, drain = _actions(live)
    assert cordon["status"] == "succeeded" and cordon["output"] == f"patched node {NODE}"
    assert drain["status"] == "pending" and drain["attempts"] == 1 and drain["returncode"] == 1
    assert "blocked by a PodDisruptionBudget 1: serving/protected-0 (retried)" in drain["output"]

    api.budget_allows = True
    with session_factory(db_url) as factory, session_scope(factory) as session:
        session.execute(update(NodeAction).values(next_attempt_at=utcnow()))
    assert _worker(db_url, config).succeeded == 1
    drain = _actions(live)[1]
    assert drain["status"] == "succeeded" and drain["attempts"] == 2
    assert drain["output"] == "evicted 2: train/llm-pretrain-0, serving/protected-0"

    api.requests.clear()
    _move(live, "in_service")
    assert _worker(db_url, config).succeeded == 1
    (uncordon,) = api.requests
    assert (uncordon["method"], uncordon["path"]) == ("PATCH", f"/api/v1/nodes/{NODE}")
    assert uncordon["body"] == {
        "metadata": {"annotations": {"fleetwatch.io/quarantine-reason": None}},
        "spec": {"unschedulable": False},
    }


def test_a_refusal_of_the_api_is_surfaced_and_retried(
    live: LiveServer, db_url: str, kube: tuple[FakeApi, Path]
) -> None:
    api, config = kube
    api.forbid = True
    _move(live, "quarantined")
    report = _worker(db_url, config)
    assert report.retried == 1  # the cordon; the drain waits behind it
    cordon, drain = _actions(live)
    assert cordon["returncode"] == 403 and cordon["status"] == "pending"
    assert cordon["output"] == '403 Forbidden: nodes "gpu-node-07" is forbidden'
    assert drain["attempts"] == 0


def test_an_unreachable_api_is_a_failed_attempt(db_url: str, tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", "t")
    live = LiveServer(make_settings(db_url, tmp_path, kubeconfig=str(config)))
    live.start()
    try:
        token = create_token(db_url, "n1")
        assert post_batch(live.url, token, batch("n1")).status_code == 200
        httpx.post(
            f"{live.url}/api/v1/nodes/n1/lifecycle", json={"to_state": "quarantined", "reason": "x"}
        )
        with session_factory(db_url) as factory:
            assert (
                ActionWorker(factory, kubeconfig=str(config), timeout_s=3).run_once().retried == 1
            )
        action = httpx.get(f"{live.url}/api/v1/nodes/n1/lifecycle").json()["actions"][-1]
        assert action["verb"] == "cordon" and action["returncode"] is None and action["output"]
    finally:
        live.stop()
