"""A real Kubernetes control plane on 127.0.0.1 for tests, benchmarks and local trials
(`caldera k8s dev-cluster`): a developer's tool beside the controller, not part of it.

    etcd ── kube-apiserver (token auth, RBAC, TLS) ── kube-controller-manager
                     │                            └─ kube-scheduler
                     └──────────── KWOK: N fake GPU nodes and what their kubelets would do

- `cluster`: `DevCluster`, the processes started, waited for, stopped (start → ready → stop);
- `bins`: where the control plane's binaries are (`scripts/cluster-bins.sh` builds them);
- `nodes`: the fake GPU nodes KWOK keeps (`NodeShape`, a scenario's `ScenarioNodes`);
- `pki`: the cluster's certificates, keys and kubeconfigs;
- `processes`: free ports, whether a pid is still ours, stopping in waves;
- `volcano`: the optional real Volcano (where its binaries are, what each is told);
- `stages.yaml`: KWOK's pod lifecycle; `crds.yaml`: stand-in Queue/PodGroup CRDs;
- `errors`: `DevClusterError`, the one error.

It may import the controller's client (`caldera.k8s.cluster.client`, to install CRDs and nodes);
the controller never imports it (tests/test_import_direction.py).
"""

from caldera.devcluster.bins import COMPONENTS, find_bins
from caldera.devcluster.cluster import DevCluster
from caldera.devcluster.errors import DevClusterError
from caldera.devcluster.nodes import KWOK_LABEL, Nodes, NodeShape, ScenarioNodes

__all__ = [
    "COMPONENTS",
    "KWOK_LABEL",
    "DevCluster",
    "DevClusterError",
    "NodeShape",
    "Nodes",
    "ScenarioNodes",
    "find_bins",
]
