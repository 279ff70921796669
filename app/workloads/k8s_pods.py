"""A Kubernetes node's GPU pods as jobs, through the official client:
``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` (``list_pod_for_all_namespaces``; RBAC
``pods: list`` cluster-wide, as the drain needs). The client is built as the remediation's
(:class:`app.remediation.kubernetes.KubeTarget`: a kubeconfig file or ``in-cluster``).

A pod is a job where one of its containers or init containers asks for a GPU in its
``resources.limits`` or ``resources.requests``: ``nvidia.com/gpu``, another vendor's
``<vendor>/gpu`` (``amd.com/gpu``), or a MIG slice ``nvidia.com/mig-<profile>`` (MIG's mixed
strategy), with a quantity other than ``0`` (extended resources are whole numbers, which the
API writes as digits). A pod that sees GPUs without asking for them (a DaemonSet such as
dcgm-exporter) is not a job; nor is one that gets GPUs through Dynamic Resource Allocation
(``resourceClaims``), which this does not read.

Each pod becomes a :class:`~app.workloads.records.JobRecord`:

* ``job_id``: ``<namespace>/<name>``; ``partition``: the namespace;
* ``user``: its ``serviceAccountName``, else its namespace where that is absent or ``default``
  (every namespace has a ``default`` account: it names no one, and Kubernetes keeps no
  submitting user);
* ``name``: its controlling owner as ``<kind>/<name>`` (``Job/…``, ``PyTorchJob/…``), else the
  pod's name;
* ``state``: the reason of a container (init containers too) that ended other than
  ``Completed`` (``OOMKilled``, ``Error``; ``ExitCode:<n>`` where it gives none), else the
  pod's reason (``Evicted``, ``UnexpectedAdmissionError`` where the device plugin lost a GPU),
  else its phase (``Running``, ``Pending`` …; ``Unknown`` where it has none);
* ``started_at``: ``status.startTime``, when the kubelet took the pod (``None`` where it is
  absent or unreadable: the capture counts such a pod as not started);
* ``ended_at``: the latest ``finishedAt`` of its containers once every container ended, or the
  pod ``Succeeded`` / ``Failed``; ``None`` while one runs;
* ``gpu_indexes``: always ``None``. The API says how many GPUs a pod asked for, not which:
  the device plugin's choice is known only to the node's kubelet (its PodResources socket).

A finished pod stays listed until it is garbage-collected (a Job's pods with the Job), so a pod
the fault killed is still seen when the capture runs soon after.

The list is read as JSON (``_preload_content=False``), not as the client's models: they turn
one unreadable field (a bad timestamp) into an error for the whole list, and one odd pod must
not hide the others. A pod without a name or namespace is skipped; any other field it lacks or
that is unreadable is ``None`` or its default.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from app.remediation import kubernetes
from app.workloads.records import JobRecord

_GPU_RESOURCE = re.compile(r"[^/]+/gpu|nvidia\.com/mig-.+")
FINISHED_PHASES = ("Succeeded", "Failed")


def k8s_time(value: object) -> datetime | None:
    """An RFC 3339 time of the API (``2026-12-14T10:00:00Z``) in UTC; ``None`` for anything
    else (missing, not a string, no offset)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo is not None else None


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _nonzero(quantity: object) -> bool:
    if isinstance(quantity, bool) or not isinstance(quantity, str | int):
        return False
    return str(quantity).strip() not in ("", "0")


def requests_gpus(spec: dict[str, Any]) -> bool:
    """Whether a pod's ``spec`` asks for a GPU (see the module) in any container or init
    container."""
    for container in _list(spec.get("containers")) + _list(spec.get("initContainers")):
        resources = _dict(_dict(container).get("resources"))
        for kind in ("limits", "requests"):
            for name, quantity in _dict(resources.get(kind)).items():
                if _GPU_RESOURCE.fullmatch(str(name)) and _nonzero(quantity):
                    return True
    return False


def _owner(meta: dict[str, Any]) -> str | None:
    owners = [_dict(o) for o in _list(meta.get("ownerReferences"))]
    for owner in sorted(owners, key=lambda o: o.get("controller") is not True):
        kind, name = _str(owner.get("kind")), _str(owner.get("name"))
        if kind and name:
            return f"{kind}/{name}"
    return None


def _terminated(statuses: list[Any]) -> list[dict[str, Any]]:
    """The ``state.terminated`` of each container status that has one."""
    states = (_dict(_dict(s).get("state")).get("terminated") for s in statuses)
    return [t for t in states if isinstance(t, dict)]


def _state(status: dict[str, Any], ended: list[dict[str, Any]]) -> str:
    for terminated in ended:
        reason = _str(terminated.get("reason"))
        if reason and reason != "Completed":
            return reason
        code = terminated.get("exitCode")
        if not reason and isinstance(code, int) and code != 0:
            return f"ExitCode:{code}"
    return _str(status.get("reason")) or _str(status.get("phase")) or "Unknown"


def _ended_at(status: dict[str, Any], containers: list[Any], init: list[Any]) -> datetime | None:
    all_ended = bool(containers) and len(_terminated(containers)) == len(containers)
    if not all_ended and status.get("phase") not in FINISHED_PHASES:
        return None
    times = [k8s_time(t.get("finishedAt")) for t in _terminated(containers + init)]
    return max((t for t in times if t is not None), default=None)


def job_of(pod: object) -> JobRecord | None:
    """The job of one pod of the API's list (a dict as the JSON holds it); ``None`` where it
    asks for no GPU or has no name or namespace."""
    item = _dict(pod)
    meta, spec, status = (_dict(item.get(k)) for k in ("metadata", "spec", "status"))
    name, namespace = _str(meta.get("name")), _str(meta.get("namespace"))
    if name is None or namespace is None or not requests_gpus(spec):
        return None
    account = _str(spec.get("serviceAccountName"))
    containers = _list(status.get("containerStatuses"))
    init = _list(status.get("initContainerStatuses"))
    return JobRecord(
        job_id=f"{namespace}/{name}",
        user=account if account and account != "default" else namespace,
        name=_owner(meta) or name,
        partition=namespace,
        state=_state(status, _terminated(containers) + _terminated(init)),
        started_at=k8s_time(status.get("startTime")),
        ended_at=_ended_at(status, containers, init),
        gpu_indexes=None,
    )


def jobs_of_pod_list(body: object) -> list[JobRecord]:
    """The jobs of a ``PodList`` (parsed JSON), in its order; a pod that is not a job, or too
    broken to name, is left out (one odd pod never hides the others).

    Raises:
        ValueError: ``body`` is not a pod list (no ``items`` list).
    """
    items = _dict(body).get("items")
    if not isinstance(items, list):
        raise ValueError("the API's answer holds no pod list")
    return [job for job in map(job_of, items) if job is not None]


def jobs_on_node(
    kubeconfig: str, node: str, *, timeout_s: float
) -> tuple[list[JobRecord], str | None]:
    """The GPU pods on Kubernetes node ``node`` as jobs (see the module), and an error text
    where the pods could not be listed (then the list is empty): the API's refusal with its
    status and message (``403 Forbidden: …``), an unreachable or slow API server (one wait is
    at most ``timeout_s`` seconds), a kubeconfig that cannot be read, an answer that is not a
    pod list, or a ``node`` that is not one node name (never asked: a field selector must not
    reach other nodes' pods). Never raises.
    """
    if not kubernetes.valid_node_name(node):
        return [], f"{node[:80]!r} is not one Kubernetes node name: fix the k8s_node label"
    try:
        api = kubernetes.KubeTarget(kubeconfig).api()
        response = api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}",
            _request_timeout=timeout_s,
            _preload_content=False,
        )
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        return jobs_of_pod_list(body), None
    except Exception as exc:  # the API's refusal, unreachable, a bad kubeconfig or answer
        return [], kubernetes.error_text(exc)
