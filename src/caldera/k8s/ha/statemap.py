"""The controller's own state in the cluster: the ConfigMap `caldera-state` in the state
namespace (`kubernetes.state_namespace`).

What the core decides from its history rather than from what the cluster shows — the queues'
waiting modes (throttles, core/throttle.py), and with fair share over time their decayed
usage (key `fair_share`, caldera/k8s/ha/fairshare_store.py) — must survive a controller restart
and a new leader, so it lives beside the jobs in the API server. The runtime reads it when it starts
(`read_throttles`); the actuator writes it whenever the waiting modes change
(`write_throttles`). Either side may be the first to find it missing: both create it the same
way, and a namespace that does not exist is an operator's mistake with one fix, named in the
error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from caldera.core import Throttle
from caldera.errors import NotFound
from caldera.k8s import names
from caldera.k8s.cluster.api import ClusterAPI, ClusterConflict, ClusterError, ClusterUnavailable
from caldera.trainingjob_api import MANAGED

__all__ = ["create_state_map", "read_throttles", "write_throttles"]


def read_throttles(api: ClusterAPI, namespace: str) -> dict[str, Throttle]:
    """The waiting modes kept in the state ConfigMap; none, and the ConfigMap made, when it
    does not exist yet."""
    found = api.read_config_map(namespace, names.STATE_CONFIG_MAP)
    if found is None:
        create_state_map(api, namespace, {"throttles": "{}"})
        return {}
    data = json.loads((found.get("data") or {}).get("throttles") or "{}")
    return {
        queue: Throttle(queue, str(row["job"]), float(row["since"])) for queue, row in data.items()
    }


def write_throttles(api: ClusterAPI, namespace: str, throttles: Mapping[str, Throttle]) -> None:
    """Replace the waiting modes kept in the state ConfigMap (made if missing)."""
    rows = {q: {"job": t.job, "since": t.since} for q, t in sorted(throttles.items())}
    data = {"throttles": json.dumps(rows, sort_keys=True)}
    try:
        api.patch_config_map(namespace, names.STATE_CONFIG_MAP, {"data": data})
    except ClusterUnavailable:
        raise
    except ClusterError:
        create_state_map(api, namespace, data)


def create_state_map(api: ClusterAPI, namespace: str, data: dict[str, str]) -> None:
    """Create the state ConfigMap holding `data`; one made meanwhile by another writer wins
    (also for the decayed usage, caldera/k8s/ha/fairshare_store.py)."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": names.STATE_CONFIG_MAP, "labels": {MANAGED: "true"}},
        "data": data,
    }
    try:
        api.create_config_map(namespace, body)
    except ClusterConflict:
        pass
    except NotFound:
        raise ClusterError(
            f"namespace {namespace} (kubernetes.state_namespace) does not exist: "
            "create it (caldera k8s render --rbac)"
        ) from None
