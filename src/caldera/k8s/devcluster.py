"""A real Kubernetes control plane on 127.0.0.1, for tests and local trials.

    etcd ── kube-apiserver (token auth, RBAC, TLS) ── kube-controller-manager
                     │                            └─ kube-scheduler
                     └──────────── KWOK: N fake GPU nodes and what their kubelets would do

The binaries come from `scripts/cluster-bins.sh` (built from Go modules into a cache). Every
process listens on 127.0.0.1 only, on ports picked free at start; certificates (a CA, the
API server's serving certificate, the service-account signing key) are generated with
`cryptography` into the cluster's folder. Users are static bearer tokens: `admin` (group
`system:masters`) for the components and the tests' set-up, and users with no rights at all
(`alice` in group `team-a`, `bob` in group `team-b` by default: `DevCluster.users`) whom
tests grant exactly what they need with RBAC, to the user or to the group.

KWOK manages the nodes this module creates (label `caldera.io/kwok=true`): the node shape
(GPUs, topology labels caldera reads, see `caldera.k8s.nodes`) comes from `NodeShape`, and the
pod lifecycle from `devcluster_stages.yaml` (bound → Running; an annotation completes or fails
a pod after a duration; a deleted pod goes when its grace period ends).

Volcano is optional: by default the scheduler is kube-scheduler (pods bind one by one, no
gang) and the Queue/PodGroup CRDs are caldera's schema-less stand-ins (`devcluster_crds.yaml`).
Given a Volcano (`DevCluster.volcano`: `caldera.k8s.devcluster_volcano.find_volcano`, the one
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
import datetime as dt
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
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
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from caldera.k8s.devcluster_errors import DevClusterError
from caldera.k8s.devcluster_volcano import (
    SEED_001,
    VolcanoBins,
    conf_text,
    controllers_args,
    scheduler_args,
    volcano_crds,
    webhook_args,
    webhook_configurations,
)

if TYPE_CHECKING:
    from caldera.model import Node

__all__ = [
    "COMPONENTS",
    "DevCluster",
    "DevClusterError",
    "NodeShape",
    "ScenarioNodes",
    "find_bins",
]

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KWOK_LABEL = "caldera.io/kwok"
STATE_FILE = "state.json"
_SERVICE_CIDR = "10.96.0.0/16"


# -- binaries ------------------------------------------------------------------------------------


def _repo_script() -> Path | None:
    script = Path(__file__).resolve().parents[3] / "scripts" / "cluster-bins.sh"
    return script if script.is_file() else None


def find_bins(build: bool = False) -> Path:
    """The folder holding the control plane's binaries.

    `CALDERA_CLUSTER_BIN_DIR` names it outright; otherwise the repository's
    `scripts/cluster-bins.sh` says where the pinned versions are cached (building them first
    when `build`). Raises DevClusterError saying what is missing."""
    explicit = os.environ.get("CALDERA_CLUSTER_BIN_DIR")
    if explicit:
        folder = Path(explicit)
    else:
        script = _repo_script()
        if script is None:
            raise DevClusterError(
                "no control-plane binaries: set CALDERA_CLUSTER_BIN_DIR "
                "(scripts/cluster-bins.sh builds them from a caldera checkout)"
            )
        if build and shutil.which("go") is None:
            raise DevClusterError(
                "no control-plane binaries, and Go is not installed to build them"
            )
        args = [str(script)] if build else [str(script), "--path"]
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["not built yet"])[-1]
            hint = "" if build else " (run `make cluster-bins`)"
            raise DevClusterError(f"no control-plane binaries: {last}{hint}")
        folder = Path(done.stdout.strip().splitlines()[-1])
    missing = [b for b in (*COMPONENTS, "kubectl") if not (folder / b).is_file()]
    if missing:
        raise DevClusterError(f"{folder} lacks {', '.join(missing)}")
    return folder


# -- nodes ---------------------------------------------------------------------------------------


class Nodes(Protocol):
    """What the cluster needs of its nodes: how many, and their Node objects."""

    @property
    def count(self) -> int: ...

    def manifests(self) -> list[dict[str, Any]]: ...


def _node_manifest(
    name: str,
    room: Mapping[str, str],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                KWOK_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"capacity": dict(room), "allocatable": dict(room)},
    }


@dataclass(frozen=True, slots=True)
class NodeShape:
    """The fake GPU nodes: `count` nodes `kwok-gpu-00`…, grouped `per_hypernode` to a leaf
    switch (`caldera.io/hypernode`) and `hypernodes_per_spine` leaves to a spine."""

    count: int = 4
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1024Gi"
    gpu_model: str = "H100"
    gpu_memory_mib: int = 81559
    nvlink_island: int = 8
    per_hypernode: int = 2
    hypernodes_per_spine: int = 2

    def manifests(self) -> list[dict[str, Any]]:
        nodes = []
        for i in range(self.count):
            leaf = i // self.per_hypernode
            spine = leaf // self.hypernodes_per_spine
            room = {
                "cpu": self.cpu,
                "memory": self.memory,
                "nvidia.com/gpu": str(self.gpus),
                "pods": "110",
            }
            labels = {
                "nvidia.com/gpu.product": self.gpu_model,
                "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
                "nvidia.com/gpu.count": str(self.gpus),
                "caldera.io/nvlink-island": str(self.nvlink_island),
                "caldera.io/hypernode": f"leaf-{leaf}",
                "caldera.io/spine": f"spine-{spine}",
            }
            nodes.append(_node_manifest(f"kwok-gpu-{i:02d}", room, labels))
        return nodes


_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, slots=True)
class ScenarioNodes:
    """A scenario's nodes (`caldera.model.Node`, in the scenario's order) as KWOK nodes.

    Each is named `n<index>-<its name>` (index zero-padded), so that sorting by name — the
    order caldera's controller reads nodes in — keeps the scenario's order and a node's index
    is the same in the simulator and on the cluster. Topology: `caldera.io/hypernode`
    `leaf-<tier1>`, `caldera.io/spine` `spine-<tier2>`, `caldera.io/nvlink-island`; the GPU
    model, memory and count as GPU feature discovery labels them. MIG slices are not offered
    (no device plugin advertises them here)."""

    nodes: tuple[Node, ...]

    @property
    def count(self) -> int:
        return len(self.nodes)

    def names(self) -> list[str]:
        width = max(len(str(len(self.nodes) - 1)), 3)
        return [
            f"n{node.index:0{width}d}-{_NOT_DNS.sub('-', node.name.lower()).strip('-')}"[:63]
            for node in self.nodes
        ]

    def manifests(self) -> list[dict[str, Any]]:
        manifests = []
        for name, node in zip(self.names(), self.nodes, strict=True):
            room = {
                "cpu": f"{node.cpu}m",
                "memory": f"{node.memory}Mi",
                "nvidia.com/gpu": str(node.gpus),
                "pods": "110",
            }
            labels = {
                "nvidia.com/gpu.product": node.gpu_model,
                "nvidia.com/gpu.count": str(node.gpus),
                "caldera.io/nvlink-island": str(node.island_size),
                "caldera.io/hypernode": f"leaf-{node.tier1}",
                "caldera.io/spine": f"spine-{node.tier2}",
            }
            if node.gpu_memory:
                labels["nvidia.com/gpu.memory"] = str(node.gpu_memory)
            manifests.append(_node_manifest(name, room, labels))
        return manifests


# -- certificates and kubeconfigs ------------------------------------------------------------------


def _write_pki(folder: Path) -> None:
    """A CA, the API server's serving certificate (127.0.0.1, localhost, the service IP) and
    the service-account signing key: P-256 keys, generated in milliseconds."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "caldera-dev-cluster-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    service_ip = next(ipaddress.IPv4Network(_SERVICE_CIDR).hosts())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        x509.IPAddress(service_ip),
    ]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    files = {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "ca.key": pem_key(ca_key),
        "apiserver.crt": server.public_bytes(serialization.Encoding.PEM),
        "apiserver.key": pem_key(server_key),
        "sa.key": pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.write_bytes(data)
        path.chmod(0o600)


def _issue_serving_cert(folder: Path, name: str) -> None:
    """`name.crt` / `name.key` in `folder`: a P-256 serving certificate for 127.0.0.1 signed by
    the cluster's CA (`ca.crt`, `ca.key` written by `_write_pki`), for a server the API server
    calls (Volcano's admission webhooks)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise DevClusterError(f"{folder / 'ca.key'}: not the dev cluster's CA key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    for path, data in (
        (folder / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
        (folder / f"{name}.key", key_pem),
    ):
        path.write_bytes(data)
        path.chmod(0o600)


def _kubeconfig(server: str, ca_file: Path, user: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "caldera-dev",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "caldera-dev", "user": user}}],
        "current-context": user,
    }


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (all held open together, so they differ)."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


# -- the cluster ---------------------------------------------------------------------------------


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
    # The real Volcano (caldera.k8s.devcluster_volcano.find_volcano), or None: kube-scheduler
    # alone, with caldera's stand-in CRDs.
    volcano: VolcanoBins | None = None
    volcano_conf: Mapping[str, Any] = field(default_factory=lambda: SEED_001)
    volcano_period: float = 1.0  # seconds between vc-scheduler's cycles (its default: 1 s)
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

    def _audit_flags(self, folder: Path) -> list[str]:
        if not self.audit_users:
            return []
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                {"level": "Metadata", "users": list(self.audit_users)},
                {"level": "None"},
            ],
        }
        path = folder / "audit-policy.yaml"
        path.write_text(yaml.safe_dump(policy))
        return [
            f"--audit-policy-file={path}",
            f"--audit-log-path={self.audit_log()}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ]

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
        _terminate(pids, self._state.get("bins", ""), self._state.get("executables", ()))
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
        _terminate({"kube-apiserver": self.pids["kube-apiserver"]}, str(bins))
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
        return {name: _alive(int(pid), bins, extra) for name, pid in pids.items()}

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
        _write_pki(folder / "pki")
        etcd_client, etcd_peer, api = _free_ports(3)
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
            path.write_text(yaml.safe_dump(_kubeconfig(server, ca, user, token)))
            path.chmod(0o600)
            kubeconfigs[user] = str(path)
        (folder / "kwok-stages.yaml").write_text(
            resources.files("caldera.k8s").joinpath("devcluster_stages.yaml").read_text()
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
        ports = self._state["ports"]
        client = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        self._spawn(
            bins,
            "etcd",
            [
                "--name=dev",
                f"--data-dir={folder / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=dev={peer}",
                "--unsafe-no-fsync",  # a test cluster: losing it on a power cut is fine
                "--log-level=warn",
            ],
        )

    def _launch_apiserver(self, bins: Path, folder: Path) -> None:
        pki = folder / "pki"
        ports = self._state["ports"]
        self._spawn(
            bins,
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports['apiserver']}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={_SERVICE_CIDR}",
                # privileged pods are refused by caldera's own filter, not by a server flag
                "--allow-privileged=true",
                "--profiling=false",
                *self._audit_flags(folder),
                "--v=1",
            ],
        )

    def _launch_rest(self, bins: Path, folder: Path) -> None:
        admin = self._state["kubeconfigs"]["admin"]
        pki = folder / "pki"
        self._spawn(
            bins,
            "kube-controller-manager",
            [
                f"--kubeconfig={admin}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-cluster-ip-range={_SERVICE_CIDR}",
                *([f"--node-monitor-grace-period={self.node_grace:g}s"] if self.node_grace else []),
                "--v=1",
            ],
        )
        scheduler_config = folder / "kube-scheduler.yaml"
        scheduler_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": admin},
                    "leaderElection": {"leaderElect": False},
                    "profiles": [{"schedulerName": "default-scheduler"}],
                }
            )
        )
        self._spawn(
            bins, "kube-scheduler", [f"--config={scheduler_config}", "--secure-port=0", "--v=1"]
        )
        (kwok_port,) = _free_ports(1)
        # KWOK renews a lease about once a lease duration: keep it a third of the grace
        # (kube-controller-manager's default grace is 50 s).
        lease = int(self.node_grace // 3) if self.node_grace else 40
        self._spawn(
            bins,
            "kwok",
            [
                f"--kubeconfig={admin}",
                f"--config={folder / 'kwok-stages.yaml'}",
                f"--manage-nodes-with-label-selector={KWOK_LABEL}=true",
                f"--server-address=127.0.0.1:{kwok_port}",
                f"--node-lease-duration-seconds={lease}",
                "--node-ip=10.244.0.1",
                "--cidr=10.244.0.0/16",
            ],
        )

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

        from caldera.k8s.client import load_api_client

        api_client = load_api_client(self._state["kubeconfigs"]["admin"])
        try:
            k8s: Any = kubernetes
            core = k8s.client.CoreV1Api(api_client)
            crds = k8s.client.ApiextensionsV1Api(api_client)
            if self.volcano is not None:
                docs = volcano_crds(self.volcano)
            else:
                text = resources.files("caldera.k8s").joinpath("devcluster_crds.yaml").read_text()
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
            _issue_serving_cert(pki, "webhook")
            (port,) = _free_ports(1)
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
                "vc-webhook-manager to serve", started, lambda: _serves_tls(port, pki / "ca.crt")
            )
        conf = self.folder / "volcano-scheduler.conf"
        conf.write_text(conf_text(self.volcano_conf))
        self._spawn(
            bins,
            "vc-scheduler",
            scheduler_args(admin, conf, self.volcano_period),
            exe=volcano.scheduler,
        )
        self._spawn(bins, "vc-controller-manager", controllers_args(admin), exe=volcano.controllers)

    def _save_state(self) -> None:
        assert self.folder is not None
        path = self.folder / STATE_FILE
        path.write_text(json.dumps(self._state, indent=1))
        path.chmod(0o600)


def _serves_tls(port: int, ca_file: Path) -> bool:
    """Whether a TLS server on 127.0.0.1:`port` completes a handshake with a certificate the
    CA in `ca_file` signed for 127.0.0.1 (what the API server will check)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1"),
    ):
        return True


def _alive(pid: int, bins: str, extra: Sequence[str] = ()) -> bool:
    """Whether `pid` is still one of this cluster's processes (not a reused pid): its
    executable is one of the binaries in `bins`, or one of `extra` (links resolved)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    if not bins:
        return False
    if any(exe == os.path.realpath(path) for path in extra):
        return True
    return any(exe == os.path.realpath(Path(bins) / name) for name in COMPONENTS)


_STOP_WAVES = (
    (
        "kwok",
        "kube-scheduler",
        "kube-controller-manager",
        "vc-scheduler",
        "vc-controller-manager",
        "vc-webhook-manager",
    ),
    ("kube-apiserver",),
    ("etcd",),
)


def _terminate(
    pids: dict[str, int], bins: str, extra: Sequence[str] = (), grace: float = 10.0
) -> None:
    """Stop the clients first, then the API server, then etcd (so none of them spends its
    shutdown retrying a store that is already gone): SIGTERM each wave, SIGKILL what is left
    of it after `grace` seconds."""
    for wave in _STOP_WAVES:
        live = [pids[name] for name in wave if name in pids and _alive(pids[name], bins, extra)]
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            live = [pid for pid in live if not _reaped(pid) and _alive(pid, bins, extra)]
            if live:
                time.sleep(0.05)
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in live:
            _reaped(pid)


def _reaped(pid: int) -> bool:
    """Reap `pid` if it is our exited child; True when it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not Path(f"/proc/{pid}").exists()
    return done == pid
