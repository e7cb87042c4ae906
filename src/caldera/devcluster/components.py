"""What each control-plane process of the dev cluster is told: its command line and the
configuration files it reads. Pure but for the files written into the cluster's folder;
`DevCluster` starts the processes with these (caldera.devcluster.cluster)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from caldera.devcluster.nodes import KWOK_LABEL
from caldera.devcluster.pki import SERVICE_CIDR

__all__ = [
    "apiserver_args",
    "audit_args",
    "controller_manager_args",
    "etcd_args",
    "kube_scheduler_args",
    "kwok_args",
]


def etcd_args(folder: Path, ports: Mapping[str, int]) -> list[str]:
    client = f"http://127.0.0.1:{ports['etcd']}"
    peer = f"http://127.0.0.1:{ports['etcd-peer']}"
    return [
        "--name=dev",
        f"--data-dir={folder / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=dev={peer}",
        "--unsafe-no-fsync",  # a test cluster: losing it on a power cut is fine
        "--log-level=warn",
    ]


def audit_args(folder: Path, users: Sequence[str], log: Path) -> list[str]:
    """The API server's audit flags: every request of `users` written to `log` (JSON lines
    at level Metadata), nothing else; none without users. Writes the policy into `folder`."""
    if not users:
        return []
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "users": list(users)},
            {"level": "None"},
        ],
    }
    path = folder / "audit-policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return [
        f"--audit-policy-file={path}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]


def apiserver_args(folder: Path, ports: Mapping[str, int], audit: Sequence[str]) -> list[str]:
    pki = folder / "pki"
    return [
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
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # privileged pods are refused by caldera's own filter, not by a server flag
        "--allow-privileged=true",
        "--profiling=false",
        *audit,
        "--v=1",
    ]


def controller_manager_args(admin: str, folder: Path, node_grace: float | None) -> list[str]:
    pki = folder / "pki"
    return [
        f"--kubeconfig={admin}",
        "--secure-port=0",
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        *([f"--node-monitor-grace-period={node_grace:g}s"] if node_grace else []),
        "--v=1",
    ]


def kube_scheduler_args(admin: str, folder: Path) -> list[str]:
    """kube-scheduler's flags; writes its configuration (one profile, no leader election)."""
    config = folder / "kube-scheduler.yaml"
    scheduler: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": admin},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}],
    }
    config.write_text(yaml.safe_dump(scheduler))
    return [f"--config={config}", "--secure-port=0", "--v=1"]


def kwok_args(admin: str, folder: Path, port: int, node_grace: float | None) -> list[str]:
    # KWOK renews a lease about once a lease duration: keep it a third of the grace
    # (kube-controller-manager's default grace is 50 s).
    lease = int(node_grace // 3) if node_grace else 40
    return [
        f"--kubeconfig={admin}",
        f"--config={folder / 'kwok-stages.yaml'}",
        f"--manage-nodes-with-label-selector={KWOK_LABEL}=true",
        f"--server-address=127.0.0.1:{port}",
        f"--node-lease-duration-seconds={lease}",
        "--node-ip=10.244.0.1",
        "--cidr=10.244.0.0/16",
    ]
