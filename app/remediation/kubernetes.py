"""Kubernetes node states through the official ``kubernetes`` client (API ``core/v1`` and
``policy/v1`` evictions; Kubernetes 1.22 and newer).

* **cordon**: ``PATCH /api/v1/nodes/{node}`` ``{"spec": {"unschedulable": true}}`` (a strategic
  merge patch, as ``kubectl cordon``), with the reason in the annotation
  ``fleetwatch.io/quarantine-reason``;
* **drain**: every pod on the node (``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``)
  but DaemonSet pods, mirror (static) pods and finished pods gets an eviction
  (``POST /api/v1/namespaces/{ns}/pods/{pod}/eviction``), so PodDisruptionBudgets are honoured:
  an eviction the API refuses with 429 (a budget would be broken) leaves the action failed, to be
  retried by the worker until the budget allows it, as ``kubectl drain`` retries;
* **uncordon**: ``{"spec": {"unschedulable": false}}`` and the annotation removed.

The client is configured from ``FLEETWATCH_KUBECONFIG``: a kubeconfig file, or ``in-cluster``
for the pod's ServiceAccount. docs/remediation.md has the least RBAC it needs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from app.remediation.commands import MAX_OUTPUT, Outcome

REASON_ANNOTATION = "fleetwatch.io/quarantine-reason"
#: On a cordon Fleetwatch made to mirror a Slurm drain: the drain's reason.
MIRROR_ANNOTATION = "fleetwatch.io/mirrored-slurm-drain"
# A node name is a DNS subdomain (RFC 1123): lower-case labels of letters, digits and '-'.
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
IN_CLUSTER = "in-cluster"


def valid_node_name(name: str) -> bool:
    """Whether ``name`` is a Kubernetes node name (a DNS subdomain of at most 253 characters)."""
    return len(name) <= 253 and bool(_NODE_NAME.fullmatch(name))


def cordon_call(node: str, reason: str) -> list[str]:
    """The API call that cordons ``node``, as the action log shows it."""
    body = {
        "metadata": {"annotations": {REASON_ANNOTATION: reason}},
        "spec": {"unschedulable": True},
    }
    return ["PATCH", f"/api/v1/nodes/{node}", json.dumps(body, ensure_ascii=False)]


def uncordon_call(node: str, annotation: str = REASON_ANNOTATION) -> list[str]:
    """The API call that uncordons ``node`` and removes ``annotation``."""
    body = {
        "metadata": {"annotations": {annotation: None}},
        "spec": {"unschedulable": False},
    }
    return ["PATCH", f"/api/v1/nodes/{node}", json.dumps(body)]


def mirror_cordon_call(node: str, slurm_reason: str) -> list[str]:
    """The API call that cordons ``node`` because Slurm drained it (``slurm_reason``)."""
    body = {
        "metadata": {"annotations": {MIRROR_ANNOTATION: slurm_reason}},
        "spec": {"unschedulable": True},
    }
    return ["PATCH", f"/api/v1/nodes/{node}", json.dumps(body, ensure_ascii=False)]


@dataclass(frozen=True)
class KubeNode:
    """A node as the API lists it: cordoned (``spec.unschedulable``) and its annotations."""

    name: str
    cordoned: bool
    annotations: dict[str, str]


def list_nodes(target: KubeTarget, *, timeout_s: float) -> list[KubeNode]:
    """Every node (``GET /api/v1/nodes``).

    Raises:
        Exception: the client's, where the API cannot be reached or refuses.
    """
    items = target.api().list_node(_request_timeout=timeout_s).items
    return [
        KubeNode(
            name=item.metadata.name,
            cordoned=bool(item.spec and item.spec.unschedulable),
            annotations=dict(item.metadata.annotations or {}),
        )
        for item in items
        if item.metadata is not None and item.metadata.name
    ]


def drain_call(node: str) -> list[str]:
    """The API calls that drain ``node``, as the action log shows them."""
    return [
        "GET",
        f"/api/v1/pods?fieldSelector=spec.nodeName={node}",
        "POST /api/v1/namespaces/{namespace}/pods/{pod}/eviction"
        " (each pod but DaemonSet, mirror and finished pods)",
    ]


@dataclass(frozen=True)
class KubeTarget:
    """Where the API is: a kubeconfig path, or :data:`IN_CLUSTER`."""

    kubeconfig: str

    def api(self) -> Any:
        """A ``CoreV1Api`` on a client of its own (never the library's global one)."""
        from kubernetes import client, config

        if self.kubeconfig == IN_CLUSTER:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.CoreV1Api(client.ApiClient(configuration))
        return client.CoreV1Api(config.new_client_from_config(config_file=self.kubeconfig))


def run(target: KubeTarget, command: list[str], *, timeout_s: float) -> Outcome:
    """Carry out a logged call (:func:`cordon_call`, :func:`uncordon_call`,
    :func:`drain_call`); never raises for the API's answer (a refusal is a failed outcome with
    the status and message)."""
    from kubernetes.client.exceptions import ApiException

    try:
        api = target.api()
        method, path = command[0], command[1]
        if method == "PATCH":
            node = path.rsplit("/", 1)[1]
            api.patch_node(
                node,
                json.loads(command[2]),
                _request_timeout=timeout_s,
                _content_type="application/strategic-merge-patch+json",
            )
            return Outcome(0, f"patched node {node}")
        if method == "GET":
            node = path.rsplit("=", 1)[1]
            return _drain(api, node, timeout_s)
        return Outcome(None, f"unknown call {method}")
    except ApiException as exc:
        return Outcome(exc.status or None, error_text(exc)[:MAX_OUTPUT])
    except Exception as exc:  # a config file missing, the API unreachable …
        return Outcome(None, error_text(exc)[:MAX_OUTPUT])


def error_text(exc: Exception) -> str:
    """A failed call in one line: ``<status> <reason>: <the API's message>`` for an answer of
    the API (``403 Forbidden: pods is forbidden: …``), ``<type>: <text>`` for anything else (a
    kubeconfig missing, the API unreachable or too slow)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}: {_message(exc)}"
    return f"{type(exc).__name__}: {exc}"


def _message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or "")


def evictable(pod: Any) -> bool:
    """Whether a drain evicts ``pod``: not owned by a DaemonSet, not a mirror (static) pod,
    not finished (``Succeeded`` / ``Failed``)."""
    meta = pod.metadata
    owners = meta.owner_references or []
    if any(o.kind == "DaemonSet" for o in owners):
        return False
    if "kubernetes.io/config.mirror" in (meta.annotations or {}):
        return False
    return (pod.status.phase if pod.status else None) not in ("Succeeded", "Failed")


def _drain(api: Any, node: str, timeout_s: float) -> Outcome:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    pods = api.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node}", _request_timeout=timeout_s
    ).items
    evicted, blocked, gone = [], [], []
    for pod in pods:
        if not evictable(pod):
            continue
        name, namespace = pod.metadata.name, pod.metadata.namespace
        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        )
        try:
            api.create_namespaced_pod_eviction(name, namespace, body, _request_timeout=timeout_s)
            evicted.append(f"{namespace}/{name}")
        except ApiException as exc:
            if exc.status == 404:
                gone.append(f"{namespace}/{name}")
            elif exc.status == 429:
                blocked.append(f"{namespace}/{name}")
            else:
                raise
    lines = [f"evicted {len(evicted)}: {', '.join(evicted) or '-'}"]
    if gone:
        lines.append(f"gone already {len(gone)}: {', '.join(gone)}")
    if blocked:
        lines.append(
            f"blocked by a PodDisruptionBudget {len(blocked)}: {', '.join(blocked)} (retried)"
        )
        return Outcome(1, "\n".join(lines)[:MAX_OUTPUT])
    return Outcome(0, "\n".join(lines)[:MAX_OUTPUT])
