"""Kubernetes cordons and Slurm drains mirrored into each other (``FLEETWATCH_MIRROR_CORDONS``):
against a real one-node Slurm (:mod:`tests.slurm_cluster`) and a local HTTP server that keeps
Kubernetes nodes and applies the patches it gets (the API subset: ``GET /api/v1/nodes``,
``PATCH /api/v1/nodes/{name}``). A cordon drains the Slurm node with the mirror's reason and
the uncordon resumes it; an operator's Slurm drain cordons the Kubernetes node with its reason
and the resume uncordons it; drains and cordons the mirror did not make are never undone; a
quarantined node and a node with an action in flight are left alone. Plus the decision table
itself. Postgres and SQLite."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.remediation import kubernetes, mirror, slurm
from app.remediation.kubernetes import KubeNode
from app.remediation.service import Backends
from app.remediation.slurm import SlurmNode
from app.remediation.worker import ActionWorker
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token
from tests.live_server import LiveServer
from tests.slurm_cluster import SlurmCluster, cluster_for_test

MIRRORED = "fleetwatch: mirrored Kubernetes cordon"


class FakeNodes:
    """Kubernetes nodes ``name → {"unschedulable", "annotations"}``, patched as the API
    would (a null annotation removes it); every request recorded."""

    def __init__(self, names: list[str]) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            n: {"unschedulable": False, "annotations": {}} for n in names
        }
        self.requests: list[tuple[str, str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _node(self, name: str) -> dict[str, Any]:
                state = fake.nodes[name]
                return {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "annotations": state["annotations"]},
                    "spec": {"unschedulable": state["unschedulable"]},
                }

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path, None))
                items = [self._node(n) for n in fake.nodes]
                self._answer({"apiVersion": "v1", "kind": "NodeList", "items": items})

            def do_PATCH(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw)
                name = self.path.rsplit("/", 1)[1]
                fake.requests.append(("PATCH", self.path, body))
                state = fake.nodes[name]
                state["unschedulable"] = body["spec"]["unschedulable"]
                for key, value in body["metadata"]["annotations"].items():
                    if value is None:
                        state["annotations"].pop(key, None)
                    else:
                        state["annotations"][key] = value
                self._answer(self._node(name))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "k", "cluster": {"server": self.url}}],
                    "users": [{"name": "fw", "user": {"token": "t"}}],
                    "contexts": [{"name": "k", "context": {"cluster": "k", "user": "fw"}}],
                    "current-context": "k",
                }
            )
        )
        return path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    yield from cluster_for_test(tmp_path, monkeypatch)


def _slurm(cluster: SlurmCluster) -> SlurmNode:
    return slurm.parse_show_node(cluster.run("scontrol", "show", "node", "-o", cluster.node))


def test_cordons_and_drains_are_mirrored_both_ways(
    cluster: SlurmCluster, db_url: str, tmp_path: Path
) -> None:
    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    kube = FakeNodes([cluster.node])
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    live = LiveServer(
        make_settings(db_url, tmp_path, slurm_scontrol=scontrol, kubeconfig=str(config))
    )
    live.start()
    backends = Backends(scontrol=scontrol, kubeconfig=str(config))
    try:
        assert post_batch(
            live.url, create_token(db_url, cluster.node), batch(cluster.node)
        ).is_success
        with session_factory(db_url) as factory:
            worker = ActionWorker(factory, kubeconfig=str(config))

            def sync() -> list[tuple[str, str]]:
                done = [(p.system, p.verb) for p in mirror.run_once(factory, backends)]
                worker.run_once()
                return done

            assert sync() == []  # in line: nothing to do

            # Someone cordons the node in Kubernetes: Slurm drains it.
            kube.nodes[cluster.node]["unschedulable"] = True
            assert sync() == [("slurm", "drain")]
            drained = _slurm(cluster)
            assert drained.drained and drained.reason == f"{MIRRORED} of {cluster.node}"
            assert sync() == []
            # Uncordoned: the mirrored drain is lifted.
            kube.nodes[cluster.node]["unschedulable"] = False
            assert sync() == [("slurm", "resume")]
            assert not _slurm(cluster).drained

            # An operator drains in Slurm: Kubernetes is cordoned with the reason.
            cluster.run(
                "scontrol",
                "update",
                f"NodeName={cluster.node}",
                "State=DRAIN",
                "Reason=fan 3 failed",
            )
            assert sync() == [("kubernetes", "cordon")]
            node = kube.nodes[cluster.node]
            assert node["unschedulable"] is True
            assert node["annotations"] == {kubernetes.MIRROR_ANNOTATION: "fan 3 failed"}
            assert sync() == []
            # Resumed in Slurm: the mirrored cordon is lifted, the annotation removed.
            cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
            assert sync() == [("kubernetes", "uncordon")]
            assert kube.nodes[cluster.node] == {"unschedulable": False, "annotations": {}}

            # A node out of service (Fleetwatch drains and cordons it itself) is left alone.
            moved = httpx.post(
                f"{live.url}/api/v1/nodes/{cluster.node}/lifecycle",
                json={"to_state": "quarantined", "reason": "Xid 79"},
            )
            assert moved.status_code == 200
            worker.run_once()
            assert _slurm(cluster).drained
            assert kube.nodes[cluster.node]["unschedulable"] is True
            assert sync() == []
        body = httpx.get(f"{live.url}/api/v1/nodes/{cluster.node}/lifecycle").json()
        mirrored = [
            (a["system"], a["verb"], a["status"])
            for a in reversed(body["actions"])
            if a["actor"] == mirror.ACTOR
        ]
        assert mirrored == [
            ("slurm", "drain", "succeeded"),
            ("slurm", "resume", "succeeded"),
            ("kubernetes", "cordon", "succeeded"),
            ("kubernetes", "uncordon", "succeeded"),
        ]
    finally:
        live.stop()
        kube.close()


def _s(state: str, reason: str | None = None) -> SlurmNode:
    flags = frozenset(state.split("+"))
    return SlurmNode("n1", state, flags, reason)


def _k(cordoned: bool, **annotations: str) -> KubeNode:
    return KubeNode("n1", cordoned, dict(annotations))


OURS = {kubernetes.REASON_ANNOTATION: "Xid 79"}
MIRROR = {kubernetes.MIRROR_ANNOTATION: "fan"}


@pytest.mark.parametrize(
    ("slurm_node", "kube_node", "wanted"),
    [
        (_s("IDLE"), _k(False), None),
        (_s("IDLE"), _k(True), ("slurm", "drain")),
        (_s("IDLE"), KubeNode("n1", True, OURS), None),  # Fleetwatch's own cordon
        (_s("IDLE+DRAIN", f"{MIRRORED} of n1"), _k(False), ("slurm", "resume")),
        (_s("IDLE+DRAIN", f"{MIRRORED} of n1"), _k(True), None),
        (_s("IDLE+DRAIN", "fleetwatch: Xid 79"), _k(False), None),  # ours, not a mirror
        (_s("MIXED+DRAIN", "fan"), _k(False), ("kubernetes", "cordon")),
        (_s("MIXED+DRAIN", "fan"), _k(True), None),  # someone else's cordon: left as it is
        (_s("IDLE"), KubeNode("n1", True, MIRROR), ("kubernetes", "uncordon")),
        (_s("IDLE+DRAIN", "fan"), KubeNode("n1", True, MIRROR), None),
        (_s("DOWN+DRAIN", None), _k(False), ("kubernetes", "cordon")),
    ],
)
def test_the_decision_table(
    slurm_node: SlurmNode, kube_node: KubeNode, wanted: tuple[str, str] | None
) -> None:
    found = mirror.plan(1, slurm_node, kube_node, "/usr/bin/scontrol")
    assert (None if found is None else (found.system, found.verb)) == wanted
    if wanted == ("kubernetes", "cordon"):
        assert found is not None
        body = json.loads(found.command[2])
        assert body["metadata"]["annotations"] == {
            kubernetes.MIRROR_ANNOTATION: slurm_node.reason or "drained in Slurm"
        }
