"""A real Kubernetes control plane on 127.0.0.1, for tests and local trials.

    etcd ── kube-apiserver (token auth, RBAC, TLS) ── kube-controller-manager
                     │                            └─ kube-scheduler
                     └──────────── KWOK: N fake GPU nodes and what their kubelets would do

The binaries come from `scripts/cluster-bins.sh` (built from Go modules into a cache:
`caldera.devcluster.bins`). Every
process listens on 127.0.0.1 only, on ports picked free at start; certificates (a CA, the
API server's serving certificate, the service-account signing key) are generated with
`cryptography` into the cluster's folder. Users are static bearer tokens: `admin` (group
`system:masters`) for the components and the tests' set-up, and users with no rights at all
(`alice` in group `team-a`, `bob` in group `team-b` by default: `DevCluster.users`) whom
tests grant exactly what they need with RBAC, to the user or to the group.

KWOK manages the nodes this module creates (label `caldera.io/kwok=true`): the node shape
(GPUs, topology labels caldera reads, see `caldera.k8s.reading.nodes`) comes from `NodeShape`
(caldera.devcluster.nodes), and the pod lifecycle from `stages.yaml` (bound → Running; an
annotation completes or fails a pod after a duration; a deleted pod goes when its grace
period ends).

Volcano is optional: by default the scheduler is kube-scheduler (pods bind one by one, no
gang) and the Queue/PodGroup CRDs are caldera's schema-less stand-ins (`crds.yaml`).
Given a Volcano (`DevCluster.volcano`: `caldera.devcluster.volcano.find_volcano`, the one
`make cluster-bins` builds from the Go module proxy or the CALDERA_VOLCANO_* variables),
Volcano's own CRDs replace the stand-ins and, once they are established, vc-scheduler
(configured as seed 001) and vc-controller-manager run beside kube-scheduler; with
`volcano_webhook`, vc-webhook-manager first (Volcano's Queue, PodGroup, Pod and Job admission,
TLS on 127.0.0.1 from the cluster's CA, its webhook configurations registered by the dev
cluster).
docs/kubernetes.md and docs/evaluation.md ("Against the real Volcano") say more.

The nodes are either a uniform `NodeShape` or `ScenarioNodes`: a scenario's nodes, named so
that their order by name (the order caldera's controller reads them in) is the scenario's.

A cluster lives in one folder (`state.json`, kubeconfigs, certificates, etcd data, logs), so
`caldera k8s dev-cluster stop` can end what `start` left running in the background.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from caldera.devcluster.bins import find_bins
from caldera.devcluster.components import (
    apiserver_args,
    audit_args,
    controller_manager_args,
    etcd_args,
    kube_scheduler_args,
    kwok_args,
)
from caldera.devcluster.errors import DevClusterError
from caldera.devcluster.nodes import KWOK_LABEL, Nodes, NodeShape
from caldera.devcluster.pki import issue_serving_cert, user_kubeconfig, write_pki
from caldera.devcluster.processes import alive, free_ports, serves_tls, terminate
from caldera.devcluster.volcano import (
    SEED_001,
    VolcanoBins,
    conf_text,
    controllers_args,
    scheduler_args,
    volcano_crds,
    webhook_args,
    webhook_configurations,
)

__all__ = ["STATE_FILE", "DevCluster"]

STATE_FILE = "state.json"


@dataclass
class DevCluster:
    """One control plane in `folder`. `start()` returns once the API server is ready, the
    CRDs are established, the nodes are Ready and `default` can take pods; `stop()` ends
    every process it started (SIGTERM, then SIGKILL) and removes a folder it created."""

    folder: Path | None = None
    bins: Path | None = None
    nodes: Nodes = field(default_factory=NodeShape)
    # user → groups; none of them has any right until a test binds a role
    users: Mapping[str, Sequence[str]] = field(
        default_factory=lambda: {"alice": ("team-a",), "bob": ("team-b",)}
    )
    start_timeout: float = 90.0
    # The real Volcano (caldera.devcluster.volcano.find_volcano), or None: kube-scheduler
    # alone, with caldera's stand-in CRDs.
    volcano: VolcanoBins | None = None
    volcano_conf: Mapping[str, Any] = field(default_factory=lambda: SEED_001)
    volcano_period: float = 1.0  # seconds between vc-scheduler's cycles (its default: 1 s)
    # More flags for vc-controller-manager: its client's rate (`--kube-api-qps`, default 50 a
    # second) and its job workers (`--worker-threads`, default 3) bound how fast Volcano Jobs
    # become pods.
    volcano_controller_flags: Sequence[str] = ()
    # vc-webhook-manager too: Volcano's admission of Queues, PodGroups, Pods and Volcano Jobs.
    volcano_webhook: bool = False
    # Seconds a node's heartbeat may be late before the node lifecycle controller declares it
    # NotReady (kube-controller-manager's --node-monitor-grace-period; None: its 50 s), and
    # KWOK's node leases last a third of it. On a loaded machine KWOK renews a thousand leases
    # of 40 s late and nodes flap NotReady, tainted.
    node_grace: float | None = None
    # Users whose every request the API server writes to its audit log (`audit_log()`, JSON
    # lines at level Metadata): what a ServiceAccount really used, against what its RBAC grants.
    audit_users: Sequence[str] = ()
    _owns_folder: bool = field(default=False, repr=False)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _state: dict[str, Any] = field(default_factory=dict, repr=False)  # holds the tokens

    # -- public ----------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return str(self._state["server"])

    @property
    def started_in(self) -> float:
        """Seconds `start()` took."""
        return float(self._state.get("started_in", 0.0))

    @property
    def tokens(self) -> dict[str, str]:
        return dict(self._state["tokens"])

    def kubeconfig(self, user: str = "admin") -> Path:
        """The kubeconfig file of `user` (admin or one of `users`)."""
        return Path(self._state["kubeconfigs"][user])

    def ca_file(self) -> Path:
        return Path(self._state["ca"])

    def audit_log(self) -> Path:
        """The API server's audit log (requests of `audit_users`, one JSON event a line)."""
        assert self.folder is not None
        return self.folder / "audit.log"

    def start(self) -> DevCluster:
        bins = self.bins or find_bins()
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="caldera-dev-cluster-"))
            self._owns_folder = True
        folder = self.folder
        if (folder / STATE_FILE).exists():
            raise DevClusterError(
                f"{folder} already holds a dev cluster: stop it first "
                "(caldera k8s dev-cluster stop)"
            )
        started = time.monotonic()
        try:
            self._prepare(folder, bins)
            self._launch_etcd(bins, folder)
            self._wait("etcd's /health", started, self._etcd_healthy)
            self._launch_apiserver(bins, folder)
            self._wait_ready(started)
            self._launch_rest(bins, folder)
            self._save_state()
            self._install(started)
        except BaseException:
            self.stop()
            raise
        self._state["started_in"] = round(time.monotonic() - started, 2)
        self._save_state()
        return self

    def stop(self) -> None:
        """End every process (SIGTERM; SIGKILL after 10 s), newest first; remove the folder if
        this object created it."""
        pids = {name: proc.pid for name, proc in self._procs.items()}
        if not pids:
            pids = {n: int(p) for n, p in self._state.get("pids", {}).items()}
        terminate(pids, self._state.get("bins", ""), self._state.get("executables", ()))
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        self._procs.clear()
        if self.folder is not None:
            (self.folder / STATE_FILE).unlink(missing_ok=True)
            if self._owns_folder:
                shutil.rmtree(self.folder, ignore_errors=True)

    def restart_apiserver(self) -> float:
        """Stop the API server (SIGTERM, as a rolling upgrade does) and start it again with
        the same port, etcd and certificates; return the seconds it was away. For tests of
        clients that must ride out an API-server restart."""
        assert self.folder is not None
        bins = Path(self._state["bins"])
        began = time.monotonic()
        terminate({"kube-apiserver": self.pids["kube-apiserver"]}, str(bins))
        old = self._procs.pop("kube-apiserver", None)
        if old is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.wait(timeout=5)
        self._launch_apiserver(bins, self.folder)
        self._wait_ready(time.monotonic())
        self._save_state()
        return round(time.monotonic() - began, 2)

    @property
    def pids(self) -> dict[str, int]:
        """Process id of each component started."""
        return {name: int(pid) for name, pid in self._state.get("pids", {}).items()}

    def running(self) -> dict[str, bool]:
        """Whether each component's process is alive."""
        pids = self._state.get("pids", {})
        bins, extra = self._state.get("bins", ""), self._state.get("executables", ())
        return {name: alive(int(pid), bins, extra) for name, pid in pids.items()}

    def log(self, component: str) -> str:
        assert self.folder is not None
        path = self.folder / "logs" / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @classmethod
    def attach(cls, folder: Path) -> DevCluster:
        """The cluster a `start` left running in `folder` (for `stop` and `kubeconfig`)."""
        state_path = folder / STATE_FILE
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError):
            raise DevClusterError(f"no dev cluster in {folder}") from None
        cluster = cls(folder=folder, bins=Path(state["bins"]))
        cluster._state = state
        return cluster

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- start, step by step -----------------------------------------------------------------------

    def _prepare(self, folder: Path, bins: Path) -> None:
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        write_pki(folder / "pki")
        etcd_client, etcd_peer, api = free_ports(3)
        tokens = {"admin": secrets.token_hex(16)}
        tokens.update({user: secrets.token_hex(16) for user in self.users})
        lines = [f'{tokens["admin"]},admin,uid-admin,"system:masters"']
        for user, groups in self.users.items():
            lines.append(f'{tokens[user]},{user},uid-{user},"{",".join(groups)}"')
        token_file = folder / "pki" / "tokens.csv"
        token_file.write_text("\n".join(lines) + "\n")
        token_file.chmod(0o600)
        server = f"https://127.0.0.1:{api}"
        ca = folder / "pki" / "ca.crt"
        kubeconfigs = {}
        for user, token in tokens.items():
            path = folder / f"kubeconfig-{user}.yaml"
            path.write_text(yaml.safe_dump(user_kubeconfig(server, ca, user, token)))
            path.chmod(0o600)
            kubeconfigs[user] = str(path)
        (folder / "kwok-stages.yaml").write_text(
            resources.files("caldera.devcluster").joinpath("stages.yaml").read_text()
        )
        self._state = {
            "bins": str(bins),
            "server": server,
            "ca": str(ca),
            "ports": {"etcd": etcd_client, "etcd-peer": etcd_peer, "apiserver": api},
            "tokens": tokens,
            "kubeconfigs": kubeconfigs,
            "nodes": [n["metadata"]["name"] for n in self.nodes.manifests()],
            "pids": {},
            # Volcano's binaries live outside `bins`: a pid is checked against these too.
            "executables": [str(p) for p in self.volcano.executables()] if self.volcano else [],
        }

    def _spawn(self, bins: Path, name: str, args: list[str], exe: Path | None = None) -> None:
        assert self.folder is not None
        log = (self.folder / "logs" / f"{name}.log").open("ab")
        try:
            proc = subprocess.Popen(
                [str(exe or bins / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives `caldera k8s dev-cluster start`; no ^C echo
                cwd=self.folder,
            )
        finally:
            log.close()
        self._procs[name] = proc
        self._state["pids"][name] = proc.pid

    def _launch_etcd(self, bins: Path, folder: Path) -> None:
        self._spawn(bins, "etcd", etcd_args(folder, self._state["ports"]))

    def _launch_apiserver(self, bins: Path, folder: Path) -> None:
        audit = audit_args(folder, self.audit_users, self.audit_log())
        self._spawn(bins, "kube-apiserver", apiserver_args(folder, self._state["ports"], audit))

    def _launch_rest(self, bins: Path, folder: Path) -> None:
        admin = self._state["kubeconfigs"]["admin"]
        manager = controller_manager_args(admin, folder, self.node_grace)
        self._spawn(bins, "kube-controller-manager", manager)
        self._spawn(bins, "kube-scheduler", kube_scheduler_args(admin, folder))
        (kwok_port,) = free_ports(1)
        self._spawn(bins, "kwok", kwok_args(admin, folder, kwok_port, self.node_grace))

    def _check_alive(self) -> None:
        for name, proc in self._procs.items():
            code = proc.poll()
            if code is not None:
                tail = " | ".join(self.log(name).strip().splitlines()[-3:])
                raise DevClusterError(f"{name} exited with code {code}: {tail[-400:]}")

    def _get(self, path: str) -> tuple[int, bytes]:
        context = ssl.create_default_context(cafile=self._state["ca"])
        request = urllib.request.Request(
            self.server + path,
            headers={"Authorization": f"Bearer {self._state['tokens']['admin']}"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), bytes(error.read())

    def _wait(self, what: str, started: float, ready: Any, interval: float = 0.1) -> None:
        while True:
            self._check_alive()
            try:
                if ready():
                    return
            except (OSError, urllib.error.URLError):
                pass
            except Exception as error:  # the client's ApiException: 404 until it exists
                if getattr(error, "status", None) != 404:
                    raise
            if time.monotonic() - started > self.start_timeout:
                raise DevClusterError(
                    f"dev cluster: timed out after {self.start_timeout:.0f} s waiting for {what}"
                )
            time.sleep(interval)

    def _etcd_healthy(self) -> bool:
        url = f"http://127.0.0.1:{self._state['ports']['etcd']}/health"
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(json.loads(response.read()).get("health") == "true")

    def _wait_ready(self, started: float) -> None:
        self._wait("the API server's /readyz", started, lambda: self._get("/readyz")[0] == 200)

    def _install(self, started: float) -> None:
        import kubernetes

        from caldera.k8s.cluster.client import load_api_client

        api_client = load_api_client(self._state["kubeconfigs"]["admin"])
        try:
            k8s: Any = kubernetes
            core = k8s.client.CoreV1Api(api_client)
            crds = k8s.client.ApiextensionsV1Api(api_client)
            if self.volcano is not None:
                docs = volcano_crds(self.volcano)
            else:
                text = resources.files("caldera.devcluster").joinpath("crds.yaml").read_text()
                docs = list(yaml.safe_load_all(text))
            wanted = []
            for doc in docs:
                crds.create_custom_resource_definition(doc)
                wanted.append(doc["metadata"]["name"])
            for node in self.nodes.manifests():
                core.create_node(node)

            def established() -> bool:
                for name in wanted:
                    crd = crds.read_custom_resource_definition(name)
                    conditions = {c.type: c.status for c in crd.status.conditions or []}
                    if conditions.get("Established") != "True":
                        return False
                return True

            def nodes_ready() -> bool:
                listed = core.list_node(label_selector=f"{KWOK_LABEL}=true").items
                ready = 0
                for node in listed:
                    for c in node.status.conditions or []:
                        if c.type == "Ready" and c.status == "True":
                            ready += 1
                return ready == self.nodes.count

            def default_account() -> bool:
                return any(
                    sa.metadata.name == "default"
                    for sa in core.list_namespaced_service_account("default").items
                )

            self._wait("the CRDs to be established", started, established)
            self._wait(f"{self.nodes.count} KWOK nodes to be Ready", started, nodes_ready)
            self._wait("the default service account", started, default_account)
            if self.volcano is not None:
                self._launch_volcano(self.volcano, api_client, started)
                custom = k8s.client.CustomObjectsApi(api_client)

                def default_queue_open() -> bool:
                    # vc-scheduler creates the `default` queue, vc-controller-manager opens it
                    queue = custom.get_cluster_custom_object(
                        "scheduling.volcano.sh", "v1beta1", "queues", "default"
                    )
                    return bool((queue.get("status") or {}).get("state") == "Open")

                self._wait("Volcano's default queue to be Open", started, default_queue_open)
        finally:
            api_client.close()

    def _launch_volcano(self, volcano: VolcanoBins, api_client: Any, started: float) -> None:
        """Volcano, once its CRDs are established: the admission webhook first when asked
        (registered, then serving, before anything creates a Queue), then vc-scheduler (which
        creates the `default` queue) and vc-controller-manager (which opens it)."""
        import kubernetes

        assert self.folder is not None
        bins = Path(self._state["bins"])
        admin = self._state["kubeconfigs"]["admin"]
        if self.volcano_webhook:
            if volcano.webhook is None:
                raise DevClusterError(
                    "volcano_webhook: no vc-webhook-manager (make cluster-bins builds one; "
                    "or set CALDERA_VOLCANO_WEBHOOK)"
                )
            pki = self.folder / "pki"
            issue_serving_cert(pki, "webhook")
            (port,) = free_ports(1)
            self._state["ports"]["volcano-webhook"] = port
            url = f"https://127.0.0.1:{port}"
            ca_bundle = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
            k8s: Any = kubernetes
            admission = k8s.client.AdmissionregistrationV1Api(api_client)
            for body in webhook_configurations(url, ca_bundle):
                if body["kind"] == "MutatingWebhookConfiguration":
                    admission.create_mutating_webhook_configuration(body)
                else:
                    admission.create_validating_webhook_configuration(body)
            self._spawn(
                bins,
                "vc-webhook-manager",
                webhook_args(admin, port, pki),
                exe=volcano.webhook,
            )
            self._wait(
                "vc-webhook-manager to serve", started, lambda: serves_tls(port, pki / "ca.crt")
            )
        conf = self.folder / "volcano-scheduler.conf"
        conf.write_text(conf_text(self.volcano_conf))
        self._spawn(
            bins,
            "vc-scheduler",
            scheduler_args(admin, conf, self.volcano_period),
            exe=volcano.scheduler,
        )
        self._spawn(
            bins,
            "vc-controller-manager",
            controllers_args(admin, self.volcano_controller_flags),
            exe=volcano.controllers,
        )

    def _save_state(self) -> None:
        assert self.folder is not None
        path = self.folder / STATE_FILE
        path.write_text(json.dumps(self._state, indent=1))
        path.chmod(0o600)
