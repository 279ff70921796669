"""A Kubernetes node's GPU pods as the jobs an incident hit, read with the official client from a
local HTTP server that serves the pod list (:mod:`tests.kube_api`): the exact request (path,
field selector, bearer token), pods with and without GPU requests (init containers, requests
without limits, AMD and MIG resources, a request of 0), an OOMKilled pod, a malformed pod that
never hides the others, a 403 and an unreachable API as error texts; then an Xid 79 posted by the
node's agent opens an incident whose capture stores the GPU pods that ran during it as jobs hit
(once), or the API's refusal. Postgres and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.remediation.service import Backends
from app.workloads import capture, k8s_pods
from app.workloads.records import JobRecord
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token, xid_batch
from tests.kube_api import TOKEN, FakeApi, write_kubeconfig
from tests.live_server import LiveServer

NODE = "gpu-node-07"
T0 = datetime(2026, 12, 14, 9, 0, tzinfo=UTC)


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def container(name: str = "main", **resources: dict[str, Any]) -> dict[str, Any]:
    """A container spec; ``resources``: its ``limits`` / ``requests``."""
    return {"name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": resources}


def running(name: str = "main") -> dict[str, Any]:
    return {"name": name, "ready": True, "state": {"running": {"startedAt": rfc3339(T0)}}}


def ended(name: str, reason: str | None, finished: datetime, code: int = 1) -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": code, "finishedAt": rfc3339(finished)}
    if reason is not None:
        terminated["reason"] = reason
    return {"name": name, "ready": False, "state": {"terminated": terminated}}


def pod(
    name: str,
    namespace: str = "research",
    *,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    owner: tuple[str, str] | None = None,
    account: str | None = "trainer",
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod as the API lists it, by default one container with ``nvidia.com/gpu: 8`` running
    since :data:`T0`."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "n"},
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": "o",
                "controller": True,
            },
        ]
    spec: dict[str, Any] = {
        "nodeName": NODE,
        "containers": containers or [container(limits={"nvidia.com/gpu": "8"})],
    }
    if init is not None:
        spec["initContainers"] = init
    if account is not None:
        spec["serviceAccountName"] = account
    body = {"metadata": meta, "spec": spec}
    body["status"] = (
        status
        if status is not None
        else {"phase": "Running", "startTime": rfc3339(T0), "containerStatuses": [running()]}
    )
    return body


PODS = [
    pod("llm-pretrain-worker-0", owner=("PyTorchJob", "llm-pretrain")),
    pod("dcgm-exporter-x1", "monitoring", containers=[container(limits={"cpu": "1"})]),
    pod(
        "warmup-0",
        "infer",
        account="default",
        init=[container("fetch", requests={"nvidia.com/gpu": 1})],
        containers=[container(limits={"cpu": "2"})],
    ),
    pod("zero-0", containers=[container(limits={"nvidia.com/gpu": "0", "cpu": "4"})]),
    pod("rocm-0", containers=[container(requests={"amd.com/gpu": "2"})]),
    pod("mig-0", containers=[container(limits={"nvidia.com/mig-3g.40gb": "1"})]),
    pod(
        "oom-0",
        owner=("Job", "eval-sweep"),
        status={
            "phase": "Failed",
            "startTime": rfc3339(T0),
            "containerStatuses": [
                ended("main", "OOMKilled", T0 + timedelta(minutes=30), 137),
                ended("sidecar", "Completed", T0 + timedelta(minutes=31), 0),
            ],
        },
    ),
    {"metadata": {"name": "broken-0", "namespace": "research"}, "spec": "not a spec"},
    pod("no-status-0", status={}),
    pod(
        "bad-time-0",
        status={"phase": "Running", "startTime": "yesterday", "containerStatuses": [running()]},
    ),
    {"metadata": {"namespace": "research"}, "spec": {"containers": [container()]}},
    "not a pod",
]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    api = FakeApi(PODS)
    yield api, write_kubeconfig(tmp_path / "kubeconfig", api.url)
    api.close()


def test_it_lists_the_nodes_pods_that_ask_for_gpus_as_jobs(kube: tuple[FakeApi, Path]) -> None:
    api, config = kube
    jobs, error = k8s_pods.jobs_on_node(str(config), NODE, timeout_s=5)
    assert error is None
    (request,) = api.requests
    assert (request["method"], request["path"]) == ("GET", "/api/v1/pods")
    assert request["query"] == {"fieldSelector": [f"spec.nodeName={NODE}"]}
    assert request["authorization"] == f"Bearer {TOKEN}"
    oom_end = T0 + timedelta(minutes=31)
    assert jobs == [
        JobRecord(
            "research/llm-pretrain-worker-0",
            "trainer",
            "PyTorchJob/llm-pretrain",
            "research",
            "Running",
            T0,
            None,
        ),
        JobRecord("infer/warmup-0", "infer", "warmup-0", "infer", "Running", T0, None),
        JobRecord("research/rocm-0", "trainer", "rocm-0", "research", "Running", T0, None),
        JobRecord("research/mig-0", "trainer", "mig-0", "research", "Running", T0, None),
        JobRecord(
            "research/oom-0", "trainer", "Job/eval-sweep", "research", "OOMKilled", T0, oom_end
        ),
        JobRecord(
            "research/no-status-0", "trainer", "no-status-0", "research", "Unknown", None, None
        ),
        JobRecord(
            "research/bad-time-0", "trainer", "bad-time-0", "research", "Running", None, None
        ),
    ]
    assert all(job.gpu_indexes is None for job in jobs)  # the API does not say which GPUs


@pytest.mark.parametrize(
    ("status", "state", "ended_at"),
    [
        (
            {"phase": "Succeeded", "containerStatuses": [ended("main", "Completed", T0, 0)]},
            "Succeeded",
            T0,
        ),
        ({"phase": "Failed", "containerStatuses": [ended("main", None, T0, 3)]}, "ExitCode:3", T0),
        (
            {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": "Allocate failed"},
            "UnexpectedAdmissionError",
            None,
        ),
        (
            {"phase": "Running", "containerStatuses": [ended("a", "Error", T0), running("b")]},
            "Error",
            None,
        ),
        (
            {
                "phase": "Failed",
                "initContainerStatuses": [ended("fetch", "OOMKilled", T0)],
                "containerStatuses": [
                    {"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}}
                ],
            },
            "OOMKilled",
            T0,
        ),
        ({"phase": "Pending"}, "Pending", None),
        ({"phase": 7, "startTime": 7, "containerStatuses": "x"}, "Unknown", None),
    ],
)
def test_a_pods_state_and_end_are_read_as_kubectl_would_show_them(
    status: dict[str, Any], state: str, ended_at: datetime | None
) -> None:
    job = k8s_pods.job_of(pod("p", status=status))
    assert job is not None
    assert (job.state, job.ended_at) == (state, ended_at)


def test_an_answer_that_is_not_a_pod_list_is_an_error() -> None:
    with pytest.raises(ValueError, match="no pod list"):
        k8s_pods.jobs_of_pod_list({"kind": "Status"})


def test_a_refusal_of_the_api_is_an_error_text_not_an_exception(
    kube: tuple[FakeApi, Path],
) -> None:
    api, config = kube
    api.forbid = True
    assert k8s_pods.jobs_on_node(str(config), NODE, timeout_s=5) == (
        [],
        '403 Forbidden: pods is forbidden: User "system:serviceaccount:fleetwatch:fleetwatch" '
        'cannot list resource "pods" in API group "" at the cluster scope',
    )


def test_an_unreachable_api_or_a_missing_kubeconfig_is_an_error_text(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    jobs, error = k8s_pods.jobs_on_node(str(config), NODE, timeout_s=3)
    assert jobs == [] and error is not None and "MaxRetryError" in error
    jobs, error = k8s_pods.jobs_on_node(str(tmp_path / "missing"), NODE, timeout_s=3)
    assert jobs == [] and error is not None and error.startswith("ConfigException")


def test_a_label_that_is_not_one_node_name_is_never_asked(kube: tuple[FakeApi, Path]) -> None:
    api, config = kube
    jobs, error = k8s_pods.jobs_on_node(str(config), "a,spec.nodeName!=b", timeout_s=5)
    assert jobs == [] and error is not None and "not one Kubernetes node name" in error
    assert api.requests == []


@pytest.fixture
def live(db_url: str, tmp_path: Path, kube: tuple[FakeApi, Path]) -> Iterator[LiveServer]:
    """A server that manages Kubernetes."""
    server = LiveServer(make_settings(db_url, tmp_path, kubeconfig=str(kube[1])))
    server.start()
    yield server
    server.stop()


def _incident_after_xid_79(live: LiveServer, db_url: str, at: datetime) -> int:
    """Node ``NODE`` (its Kubernetes name is its hostname) reports, then an Xid 79 at ``at``;
    returns the incident it opened."""
    token = create_token(db_url, NODE)
    assert post_batch(live.url, token, batch(NODE)).status_code == 200
    assert post_batch(live.url, token, xid_batch(NODE, at, xid=79)).status_code == 200
    (incident,) = httpx.get(f"{live.url}/api/v1/incidents").json()
    return int(incident["id"])


def _capture(db_url: str, config: Path) -> int:
    with session_factory(db_url) as factory:
        return capture.capture_due(factory, Backends(kubeconfig=str(config), timeout_s=5))


def test_an_xid_79_captures_the_gpu_pods_that_ran_on_the_node_as_jobs_hit(
    live: LiveServer, db_url: str, kube: tuple[FakeApi, Path]
) -> None:
    api, config = kube
    at = datetime.now(UTC)
    started = at - timedelta(hours=2)
    api.pods = [
        pod(
            "llm-pretrain-worker-0",
            owner=("PyTorchJob", "llm-pretrain"),
            status={
                "phase": "Running",
                "startTime": rfc3339(started),
                "containerStatuses": [running()],
            },
        ),
        pod(
            "eval-0",
            "eval",
            account=None,
            status={
                "phase": "Failed",
                "startTime": rfc3339(started),
                "containerStatuses": [ended("main", "OOMKilled", at + timedelta(seconds=2))],
            },
        ),
        pod(  # ended before the fault: not hit
            "old-0",
            status={
                "phase": "Succeeded",
                "startTime": rfc3339(started),
                "containerStatuses": [ended("main", "Completed", at - timedelta(hours=1), 0)],
            },
        ),
        pod(  # no start readable: counted as not started, as a job Slurm has not started
            "bad-time-0",
            status={"phase": "Running", "startTime": "soon", "containerStatuses": [running()]},
        ),
        pod("notebook-0", containers=[container(limits={"cpu": "8"})]),
    ]
    incident_id = _incident_after_xid_79(live, db_url, at)

    assert _capture(db_url, config) == 1
    assert _capture(db_url, config) == 0  # once per incident and system
    (listing,) = api.requests
    assert (listing["method"], listing["path"]) == ("GET", "/api/v1/pods")
    assert listing["query"] == {"fieldSelector": [f"spec.nodeName={NODE}"]}

    detail = httpx.get(f"{live.url}/api/v1/incidents/{incident_id}").json()
    assert detail["jobs_error"] is None
    (captured,) = detail["jobs_captures"]
    assert (captured["system"], captured["target"], captured["error"]) == (
        "kubernetes",
        NODE,
        None,
    )
    assert detail["jobs_captured_at"] == captured["captured_at"]
    jobs = [
        (j["system"], j["job_id"], j["user"], j["name"], j["partition"], j["state"], j["hit"])
        for j in detail["jobs"]
    ]
    assert jobs == [
        ("kubernetes", "eval/eval-0", "eval", "eval-0", "eval", "OOMKilled", True),
        (
            "kubernetes",
            "research/llm-pretrain-worker-0",
            "trainer",
            "PyTorchJob/llm-pretrain",
            "research",
            "Running",
            True,
        ),
    ]
    assert [j["gpu_indexes"] for j in detail["jobs"]] == [None, None]
    assert detail["jobs"][0]["ended_at"] is not None and detail["jobs"][1]["ended_at"] is None

    page = httpx.get(f"{live.url}/incidents/{incident_id}").text
    assert 'data-job="research/llm-pretrain-worker-0" data-system="kubernetes"' in page
    assert "<td>Kubernetes</td>" in page and ">not known</span>" in page


def test_a_refusal_of_the_api_is_stored_on_the_capture_and_shown(
    live: LiveServer, db_url: str, kube: tuple[FakeApi, Path]
) -> None:
    api, config = kube
    api.forbid = True
    incident_id = _incident_after_xid_79(live, db_url, datetime.now(UTC))

    assert _capture(db_url, config) == 1
    detail = httpx.get(f"{live.url}/api/v1/incidents/{incident_id}").json()
    forbidden = (
        '403 Forbidden: pods is forbidden: User "system:serviceaccount:fleetwatch:fleetwatch" '
        'cannot list resource "pods" in API group "" at the cluster scope'
    )
    assert detail["jobs"] == []
    assert [(c["system"], c["error"]) for c in detail["jobs_captures"]] == [
        ("kubernetes", forbidden)
    ]
    assert detail["jobs_error"] == f"kubernetes: {forbidden}"
    page = httpx.get(f"{live.url}/incidents/{incident_id}").text
    assert 'id="incident-jobs-error-kubernetes"' in page
    assert "Kubernetes could not be asked for the jobs of node gpu-node-07" in page
    assert 'id="incident-jobs-none"' not in page
