"""caldera installed on the session's real control plane, as an operator installs it, and the
controller running as users run it (`caldera k8s run`, its own process).

- `caldera` (session): `helm install` of deploy/helm/caldera (the TrainingJob CRD, the
  controller's least-privilege RBAC, the users' ClusterRoles, the admission policy), with the
  chart's Deployment scaled to 0: the controller runs here as its own process, **as the
  chart's ServiceAccount** (a token from the TokenRequest API, never admin), so every
  end-to-end test exercises exactly the RBAC the chart grants, and the API server's audit log
  records what it used (tests/k8s_real/test_real_zz_chart_lifecycle.py); namespaces
  `team-a` (normal jobs), `serving`
  (critical allowed) and `elsewhere` (not served); RoleBindings: alice (group team-a) and
  bob (group team-b) may submit in all three, only group team-a holds the `critical` verb,
  in `serving`; one controller for the session (grace period 3 s, resync 2 s, short start
  timeouts: compressed time). `restart_controller()` kills it (SIGKILL) and starts another.
- `clean` (each test): afterwards every TrainingJob is deleted and the test waits until no
  caldera pod is left, so each test starts on an empty cluster of 4 x 8 GPUs.
- `Cluster.apply(user, manifest)`: `kubectl apply -f -` with that user's kubeconfig (the
  real kubectl built with the control plane); `wait(...)`: `kubectl wait --for=condition=…`.

kube-scheduler binds the pods (Volcano is not part of this control plane): it honours
caldera's required node affinity, so a pod binds only where caldera decided, but pod by pod.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from real_support import wait_for

from caldera.devcluster import DevCluster
from caldera.k8s.access.admission import POLICY_NAME
from caldera.k8s.cluster.client import load_api_client
from caldera.trainingjob_api import API_VERSION, GROUP, JOB, KIND, MANAGED, PLURAL, VERSION

__all__ = [
    "CHART",
    "CONTROLLER_USER",
    "GRACE",
    "Cluster",
    "caldera",
    "clean",
    "free_port",
    "helm",
    "helm_values",
    "service_account_kubeconfig",
    "training_job",
    "without_admission_policy",
]

k8s: Any = kubernetes
CALDERA = Path(sys.executable).with_name("caldera")
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "caldera"
CONTROLLER_USER = "system:serviceaccount:caldera-system:caldera-controller"
GRACE = 3  # the policy's grace period, seconds
SERVED = ("team-a", "serving")
ELSEWHERE = "elsewhere"

CONFIG: dict[str, Any] = {
    "queues": [
        {"name": "team-a", "weight": 1},
        {"name": "serving", "weight": 1, "guarantee": {"gpu": 8}, "reclaimable": False},
    ],
    "policy": {"grace_period": GRACE, "throttle_timeout": 20},
    "kubernetes": {
        "namespaces": {
            "team-a": {"queues": ["team-a"]},
            "serving": {"queues": ["serving"], "critical": True},
        },
        "state_namespace": "caldera-system",
        "scheduler_name": "default-scheduler",  # Volcano is not part of this control plane
        "image": "registry.example/train:v1",
        "resync": 2,
        "bind_timeout": 20,
        "ready_timeout": 20,
        "terminating_timeout": 5,
        # Compressed time: a standby takes over 6 s after the leader's last renewal.
        "leader_election": {"lease_duration": 6, "renew_deadline": 4, "retry_period": 1},
    },
}


def training_job(
    name: str,
    replicas: int = 1,
    gpus: int = 8,
    type: str = "normal",
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A TrainingJob manifest: `replicas` pods asking for `gpus` each (in the container's
    limits, the Kubernetes way); `annotations` on the pod template (KWOK's stages read
    `caldera.io/kwok-run-for` and friends)."""
    template: dict[str, Any] = {
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
        }
    }
    if annotations:
        template["metadata"] = {"annotations": annotations}
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "type": type,
            "tasks": [{"name": "worker", "replicas": replicas, "template": template}],
            **spec,
        },
    }
    if status is not None:
        manifest["status"] = status
    return manifest


@dataclass
class Cluster:
    dev: DevCluster
    folder: Path
    log: Path
    config: Path
    helm: Path
    proc: subprocess.Popen[bytes] | None = None
    clients: list[Any] = field(default_factory=list)
    controller_kubeconfig: Path = Path()  # the chart's ServiceAccount's token
    metrics_port: int = 0

    # -- the controller ----------------------------------------------------------------------

    def start_controller(self) -> None:
        self.proc = self.spawn_controller(self.log)

    def spawn_controller(self, log: Path, metrics_port: int = 0) -> subprocess.Popen[bytes]:
        """`caldera k8s run` as its own process, as the chart's ServiceAccount, logging to
        `log` (a replica: with leader election on, it leads or waits as a standby), serving
        /metrics on `metrics_port` (default: the session's; each replica binds its own, as
        each pod of the chart's Deployment has its own address)."""
        out = log.open("ab")
        proc = subprocess.Popen(
            [str(CALDERA), "k8s", "run",
             "--kubeconfig", str(self.controller_kubeconfig), "--config", str(self.config),
             "--metrics-bind", f"127.0.0.1:{metrics_port or self.metrics_port}"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
        out.close()
        return proc

    def lease(self) -> dict[str, Any]:
        """The controllers' leader-election Lease (spec), {} when there is none."""
        coordination = k8s.client.CoordinationV1Api(self.client())
        try:
            lease = coordination.read_namespaced_lease("caldera-controller", "caldera-system")
        except k8s.client.ApiException as error:
            if error.status == 404:
                return {}
            raise
        return dict(self.client().sanitize_for_serialization(lease)["spec"])

    def stop_controller(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("the controller did not stop on SIGTERM within 20 s")
        self.proc = None

    def restart_controller(self) -> None:
        """A crash (SIGKILL: no clean shutdown) and a new controller, as a Deployment does."""
        self.stop_controller(kill=True)
        self.start_controller()

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    # -- users -------------------------------------------------------------------------------

    def client(self, user: str = "admin") -> Any:
        api_client = load_api_client(str(self.dev.kubeconfig(user)))
        self.clients.append(api_client)
        return api_client

    def kubectl(
        self, user: str, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        bins = Path(self.dev._state["bins"])  # the kubectl built with the control plane
        return subprocess.run(
            [str(bins / "kubectl"), "--kubeconfig", str(self.dev.kubeconfig(user)), *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def apply(
        self, user: str, namespace: str, manifest: dict[str, Any]
    ) -> subprocess.CompletedProcess[str]:
        return self.kubectl(
            user, "-n", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(manifest)
        )

    def wait(self, namespace: str, name: str, condition: str, timeout: int = 60) -> None:
        """`kubectl wait --for=condition=…` on a TrainingJob (fails the test on timeout)."""
        done = self.kubectl(
            "admin", "-n", namespace, "wait", f"--for=condition={condition}",
            f"{PLURAL}/{name}", f"--timeout={timeout}s",
        )  # fmt: skip
        if done.returncode == 0:
            return
        pods = [
            (p.metadata.name, p.spec.node_name, p.status.phase) for p in self.pods(namespace, name)
        ]
        pytest.fail(
            f"{name} {condition}: {done.stderr.strip()}\n"
            f"status: {dump(self.status(namespace, name))}\n"
            f"pods: {pods}\n"
            f"nodes: {dump(self.nodes_summary())}\n"
            f"{self.log_tail(60)}"
        )

    def nodes_summary(self) -> dict[str, Any]:
        """What a failed wait needs to say why nothing fits: each node's taints, cordon,
        readiness, allocatable and the pods bound to it (every namespace)."""
        core = k8s.client.CoreV1Api(self.client())
        bound: dict[str, list[str]] = {}
        for pod in core.list_pod_for_all_namespaces().items:
            if pod.spec.node_name:
                bound.setdefault(pod.spec.node_name, []).append(
                    f"{pod.metadata.namespace}/{pod.metadata.name}:{pod.status.phase}"
                )
        summary: dict[str, Any] = {}
        for node in core.list_node().items:
            ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
            summary[node.metadata.name] = {
                "unschedulable": node.spec.unschedulable,
                "taints": [t.key for t in node.spec.taints or []],
                "ready": ready,
                "allocatable": node.status.allocatable,
                "pods": bound.get(node.metadata.name, []),
            }
        return summary

    # -- reading -----------------------------------------------------------------------------

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        custom = k8s.client.CustomObjectsApi(self.client())
        found: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
        return found

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.job(namespace, name).get("status") or {})

    def state(self, namespace: str, name: str) -> str:
        return str(self.status(namespace, name).get("state", ""))

    def condition(self, namespace: str, name: str, kind: str) -> tuple[str, str, str] | None:
        for condition in self.status(namespace, name).get("conditions") or []:
            if condition["type"] == kind:
                return condition["status"], condition["reason"], condition.get("message", "")
        return None

    def events(self, namespace: str, name: str) -> list[str]:
        core = k8s.client.CoreV1Api(self.client())
        found = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={KIND}"
        ).items
        return [e.reason for e in sorted(found, key=lambda e: e.metadata.name)]

    def pods(self, namespace: str, job: str) -> list[Any]:
        core = k8s.client.CoreV1Api(self.client())
        return list(core.list_namespaced_pod(namespace, label_selector=f"{JOB}={job}").items)

    def running_pods(self, namespace: str, job: str) -> list[Any]:
        return [
            p
            for p in self.pods(namespace, job)
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]


@contextmanager
def without_admission_policy(cluster: Cluster) -> Iterator[None]:
    """The policy's binding removed (a cluster where the operator never installed it): the
    controller's own checks are then the only line."""
    binding = cluster.kubectl(
        "admin", "get", "validatingadmissionpolicybinding", POLICY_NAME, "-o", "yaml"
    ).stdout
    body = yaml.safe_load(binding)
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        body["metadata"].pop(key, None)
    cluster.kubectl("admin", "delete", "validatingadmissionpolicybinding", POLICY_NAME)
    probe = training_job("probe", type="critical")

    def policy_gone() -> bool:
        done = cluster.kubectl(
            "bob", "-n", "team-a", "create", "--dry-run=server", "-f", "-",
            stdin=yaml.safe_dump(probe),
        )  # fmt: skip
        return done.returncode == 0

    wait_for("the API server to drop the policy binding", policy_gone)
    try:
        yield
    finally:
        cluster.kubectl("admin", "apply", "-f", "-", stdin=yaml.safe_dump(body))
        wait_for("the policy binding back", lambda: not policy_gone())


def helm_values(config: dict[str, Any], **chart: Any) -> dict[str, Any]:
    """The chart's values for a caldera.yaml `config`: the controller runs outside (0 replicas)."""
    return {"config": config, "controller": {"replicas": 0}, **chart}


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The Helm built from Go modules (scripts/helm-bin.sh), as admin, its state in the folder."""
    home = cluster.folder / "helm"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return subprocess.run(
        [str(cluster.helm), "--kubeconfig", str(cluster.dev.kubeconfig()), *args],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip


def service_account_kubeconfig(cluster: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding a token of `account` from the TokenRequest API (one day)."""
    core = k8s.client.CoreV1Api(cluster.client())
    token = core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 86400}}
    ).status.token
    admin = yaml.safe_load(cluster.dev.kubeconfig().read_text())
    user = f"system:serviceaccount:{namespace}:{account}"
    admin["users"] = [{"name": user, "user": {"token": token}}]
    for context in admin["contexts"]:
        context["context"]["user"] = user
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return path


def _install(cluster: Cluster) -> None:
    """What an operator does: namespaces, `helm install` of the chart, the users' bindings."""
    for namespace in (*SERVED, ELSEWHERE):
        cluster.kubectl("admin", "create", "namespace", namespace)
    values = cluster.folder / "values.yaml"
    values.write_text(yaml.safe_dump(helm_values(yaml.safe_load(cluster.config.read_text()))))
    done = helm(
        cluster, "install", "caldera", str(CHART), "--namespace", "caldera-system",
        "--create-namespace", "--values", str(values),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cluster.controller_kubeconfig = service_account_kubeconfig(
        cluster, "caldera-system", "caldera-controller", cluster.folder / "controller.kubeconfig"
    )
    cluster.kubectl(
        "admin", "wait", "--for=condition=Established",
        f"crd/{PLURAL}.{GROUP}", "--timeout=60s",
    )  # fmt: skip
    for namespace in (*SERVED, ELSEWHERE):
        for group in ("team-a", "team-b"):
            cluster.kubectl(
                "admin", "-n", namespace, "create", "rolebinding", f"submit-{group}",
                "--clusterrole=caldera-submitter", f"--group={group}",
            )  # fmt: skip
    cluster.kubectl(
        "admin", "-n", "serving", "create", "rolebinding", "critical-team-a",
        "--clusterrole=caldera-critical", "--group=team-a",
    )  # fmt: skip
    core = k8s.client.CoreV1Api(cluster.client())
    for namespace in (*SERVED, ELSEWHERE):
        wait_for(
            f"the default service account in {namespace}",
            lambda namespace=namespace: any(
                sa.metadata.name == "default"
                for sa in core.list_namespaced_service_account(namespace).items
            ),
        )


@pytest.fixture(scope="session")
def caldera(
    dev_cluster: DevCluster, helm_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("caldera")
    config = folder / "caldera.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    cluster = Cluster(dev_cluster, folder, folder / "controller.log", config, helm_bin)
    cluster.metrics_port = free_port()
    _install(cluster)
    cluster.start_controller()
    try:
        yield cluster
    finally:
        cluster.stop_controller()
        for api_client in cluster.clients:
            api_client.close()


@pytest.fixture
def clean(caldera: Cluster) -> Iterator[Cluster]:
    """The test's jobs go afterwards; the next test starts on an empty cluster."""
    began = time.monotonic()
    yield caldera
    if caldera.proc is None or caldera.proc.poll() is not None:
        caldera.start_controller()
    for namespace in (*SERVED, ELSEWHERE):
        caldera.kubectl("admin", "-n", namespace, "delete", PLURAL, "--all", "--wait=false")
    core = k8s.client.CoreV1Api(caldera.client())

    def no_pods() -> bool:
        return not core.list_pod_for_all_namespaces(label_selector=f"{MANAGED}=true").items

    wait_for("every caldera pod gone", no_pods)
    sys.stderr.write(f"[{time.monotonic() - began:.0f} s]\n")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def dump(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)
