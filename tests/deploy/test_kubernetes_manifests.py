"""deploy/kubernetes/: every manifest validates against the Kubernetes API schemas (strict: an
unknown or misspelt field fails) of the oldest and newest versions kubernetes-validate ships,
offline; and the properties the deployment depends on hold: the agent sees the host read-only,
runs on tainted GPU nodes and keeps its spool on the node; the servers run as non-root with
probes on /healthz and /readyz; the worker's ServiceAccount is the one the remediation RBAC
binds; the settings load; the commands are ones the command lines take."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.config import load_settings
from tests.deploy.commands import agent_args, fleetwatch_error
from tests.deploy.dockerfile_stages import IMAGE_UID

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
#: The oldest schema kubernetes-validate ships that we promise (1.29 is the oldest minor still
#: under a cloud's extended support at the time of writing) and its newest.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def load(name: str) -> list[dict[str, Any]]:
    with (KUBE / name).open(encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc is not None]


def manifest_files() -> list[str]:
    return sorted(p.name for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml")


def everything() -> list[dict[str, Any]]:
    return [doc for name in manifest_files() for doc in load(name)]


def one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in everything() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_spec(kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(kind, name)["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any]) -> dict[str, Any]:
    (only,) = spec["containers"]
    return dict(only)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", manifest_files())
def test_each_manifest_validates_against_the_kubernetes_schemas(name: str, version: str) -> None:
    docs = load(name)
    assert docs, f"{name} holds no manifest"
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} at {where}: {exc}")


def test_a_misspelt_field_is_caught() -> None:
    broken = load("server.yaml")[1]
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest_but_the_examples_and_the_migration() -> None:
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text(encoding="utf-8"))
    listed = kustomization["resources"]
    assert all((KUBE / name).is_file() for name in listed), listed
    applied_apart = {"secret.example.yaml", "migrate-job.yaml"}
    assert sorted(listed) == sorted(set(manifest_files()) - applied_apart)
    assert {image["name"] for image in kustomization["images"]} == {
        "fleetwatch",
        "fleetwatch-agent",
    }


def test_every_namespaced_object_is_in_the_fleetwatch_namespace() -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for doc in everything():
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"].get("namespace") == "fleetwatch", doc["metadata"]


def agent_argv() -> tuple[dict[str, Any], list[str]]:
    """The DaemonSet's container and its argv with ``$(VAR)`` set as the kubelet would (the
    node name from the downward API, the rest from the ConfigMap)."""
    agent = container(pod_spec("DaemonSet", "fleetwatch-agent"))
    config = one("ConfigMap", "fleetwatch-agent")["data"]
    values: dict[str, str] = {}
    for env in agent["env"]:
        if "value" in env:
            values[env["name"]] = env["value"]
        elif "fieldRef" in env["valueFrom"]:
            assert env["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
            values[env["name"]] = "gpu-node-001"
        else:
            ref = env["valueFrom"]["configMapKeyRef"]
            assert ref["name"] == "fleetwatch-agent"
            values[env["name"]] = config[ref["key"]]
    argv = [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in agent["args"]]
    assert agent["command"] == ["fleetwatch-agent"]
    return agent, argv


def test_the_agent_sees_the_host_read_only_where_its_flags_point() -> None:
    spec = pod_spec("DaemonSet", "fleetwatch-agent")
    assert spec["hostPID"] is True
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"  # the Service's name still resolves
    agent, argv = agent_argv()
    args = agent_args(argv)
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    host_paths = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}

    def host_path_at(mount_path: Path) -> tuple[str, dict[str, Any]]:
        (name,) = [n for n, m in mounts.items() if Path(m["mountPath"]) == mount_path]
        return host_paths[name]["path"], mounts[name]

    for flag, host in (("procfs", "/proc"), ("sysfs", "/sys"), ("rootfs", "/")):
        path, mount = host_path_at(args[flag])
        assert path == host, flag
        assert mount["readOnly"] is True, flag
    assert host_path_at(args["rootfs"])[1]["mountPropagation"] == "HostToContainer"
    kmsg_path, kmsg = host_path_at(Path("/dev/kmsg"))
    assert (kmsg_path, kmsg["readOnly"]) == ("/dev/kmsg", True)
    assert args["kmsg"] is None  # so the agent follows /dev/kmsg itself
    assert agent["securityContext"]["readOnlyRootFilesystem"] is True
    # Everything the agent can write is its spool (and a small tmpfs).
    writable = [m["mountPath"] for m in agent["volumeMounts"] if not m.get("readOnly")]
    assert sorted(writable) == ["/tmp", "/var/lib/fleetwatch-agent"]


def test_the_agent_spool_survives_the_pod_on_the_node() -> None:
    spec = pod_spec("DaemonSet", "fleetwatch-agent")
    agent, argv = agent_argv()
    spool = agent_args(argv)["spool_dir"]
    (mount,) = [m for m in agent["volumeMounts"] if spool.is_relative_to(m["mountPath"])]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"] == {"path": "/var/lib/fleetwatch-agent", "type": "DirectoryOrCreate"}


def test_the_agent_runs_on_gpu_nodes_whatever_taints_them_with_the_driver_mounted() -> None:
    spec = pod_spec("DaemonSet", "fleetwatch-agent")
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    assert spec["runtimeClassName"] == "nvidia"
    agent, _ = agent_argv()
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"].split(",")  # NVML and nvidia-smi
    # Monitoring takes no GPU away from the scheduler.
    for bound in ("requests", "limits"):
        assert "nvidia.com/gpu" not in agent["resources"].get(bound, {})
    assert agent["resources"]["requests"]["cpu"]
    assert agent["resources"]["limits"]["memory"]
    assert spec["automountServiceAccountToken"] is False


def test_each_agent_reads_the_token_of_its_own_node_and_names_itself_after_it() -> None:
    spec = pod_spec("DaemonSet", "fleetwatch-agent")
    agent, argv = agent_argv()
    args = agent_args(argv)
    assert args["hostname"] == "gpu-node-001"
    assert args["token_file"] == Path("/etc/fleetwatch-agent/tokens/gpu-node-001")
    assert ("k8s_node", "gpu-node-001") in args["label"]  # what cordon and drain address
    assert args["server"] == "http://fleetwatch.fleetwatch.svc:8000"
    (mount,) = [
        m for m in agent["volumeMounts"] if m["mountPath"] == "/etc/fleetwatch-agent/tokens"
    ]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "fleetwatch-agent-tokens"
    assert mount["readOnly"] is True
    one("Secret", "fleetwatch-agent-tokens")  # its shape is in secret.example.yaml


def test_the_server_runs_several_non_root_replicas_probed_on_healthz_and_readyz() -> None:
    deployment = one("Deployment", "fleetwatch-server")
    assert deployment["spec"]["replicas"] >= 2
    spec = deployment["spec"]["template"]["spec"]
    server = container(spec)
    assert server["command"] == ["fleetwatch", "serve", "--no-jobs"]
    assert fleetwatch_error(server["command"]) is None
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports["http"] == int(one("ConfigMap", "fleetwatch")["data"]["FLEETWATCH_PORT"])
    assert server["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert server["startupProbe"]["httpGet"]["path"] == "/healthz"
    # The probe waits longer than /readyz gives the database (a slow one reads as its 503).
    from app.probes import READY_TIMEOUT_S

    assert server["readinessProbe"]["timeoutSeconds"] > READY_TIMEOUT_S
    assert spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("Deployment", "fleetwatch-server"),
        ("Deployment", "fleetwatch-worker"),
        ("Job", "fleetwatch-migrate"),
    ],
)
def test_server_side_pods_are_non_root_read_only_and_bounded(kind: str, name: str) -> None:
    spec = pod_spec(kind, name)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == IMAGE_UID
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    pod = container(spec)
    assert pod["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["resources"]["requests"]["cpu"]
    assert pod["resources"]["requests"]["memory"]
    assert pod["resources"]["limits"]["memory"]
    assert [
        e["configMapRef" if "configMapRef" in e else "secretRef"]["name"] for e in pod["envFrom"]
    ] == [
        "fleetwatch",
        "fleetwatch",
    ]
    # The data dir the settings name is a writable volume (the root filesystem is not).
    data_dir = one("ConfigMap", "fleetwatch")["data"]["FLEETWATCH_DATA_DIR"]
    assert data_dir in [m["mountPath"] for m in pod["volumeMounts"]]


def test_the_worker_runs_the_jobs_under_the_account_the_remediation_rbac_binds() -> None:
    spec = pod_spec("Deployment", "fleetwatch-worker")
    assert container(spec)["command"] == ["fleetwatch", "worker"]
    assert fleetwatch_error(["fleetwatch", "worker"]) is None
    account = spec["serviceAccountName"]
    one("ServiceAccount", account)
    binding = one("ClusterRoleBinding", "fleetwatch-remediation")
    assert {"kind": "ServiceAccount", "name": account, "namespace": "fleetwatch"} in binding[
        "subjects"
    ]
    role = one("ClusterRole", binding["roleRef"]["name"])
    verbs = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    assert {("nodes", "patch"), ("pods/eviction", "create"), ("pods", "list")} <= verbs
    assert one("ConfigMap", "fleetwatch")["data"]["FLEETWATCH_KUBECONFIG"] == "in-cluster"
    # Only the worker holds a token: the web pods and the agents are bound to nothing.
    bound = {
        s["name"] for d in everything() if d["kind"].endswith("Binding") for s in d["subjects"]
    }
    assert bound == {account}


def test_the_migration_job_runs_fleetwatch_migrate_once() -> None:
    job = one("Job", "fleetwatch-migrate")
    spec = job["spec"]["template"]["spec"]
    assert container(spec)["command"] == ["fleetwatch", "migrate"]
    assert fleetwatch_error(["fleetwatch", "migrate"]) is None
    assert spec["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1


def test_the_service_and_the_disruption_budget_select_the_servers_only() -> None:
    server_labels = one("Deployment", "fleetwatch-server")["spec"]["template"]["metadata"]["labels"]
    worker_labels = one("Deployment", "fleetwatch-worker")["spec"]["template"]["metadata"]["labels"]
    service = one("Service", "fleetwatch")
    budget = one("PodDisruptionBudget", "fleetwatch-server")
    for selector in (service["spec"]["selector"], budget["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= server_labels.items()
        assert not selector.items() <= worker_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "http"
    # The agents' server URL names this Service and port.
    assert one("ConfigMap", "fleetwatch-agent")["data"]["server"] == (
        f"http://{service['metadata']['name']}.fleetwatch.svc:{port['port']}"
    )


def test_the_config_map_and_secret_are_settings_the_server_loads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name.startswith("FLEETWATCH_"):
            monkeypatch.delenv(name)
    for key, value in one("ConfigMap", "fleetwatch")["data"].items():
        monkeypatch.setenv(key, value)
    for key, value in one("Secret", "fleetwatch")["stringData"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FLEETWATCH_DATA_DIR", str(tmp_path))  # not /var/lib here
    settings = load_settings()
    assert settings.kubeconfig == "in-cluster"
    assert settings.host == "0.0.0.0"
    assert settings.secret_key is not None
    assert settings.effective_database_url.startswith("postgresql://")
