"""The state ConfigMap (caldera/k8s/ha/statemap.py): the waiting modes survive a restart, either
side makes the ConfigMap when it is missing, and a missing state namespace is one clear error."""

from __future__ import annotations

import pytest

from caldera.core import Throttle
from caldera.errors import NotFound
from caldera.k8s import names
from caldera.k8s.cluster.api import ClusterError, Object
from caldera.k8s.cluster.fake import FakeCluster
from caldera.k8s.ha.statemap import read_throttles, write_throttles
from caldera.trainingjob_api import MANAGED

NAMESPACE = "caldera-system"


class NoNamespace(FakeCluster):
    """The state namespace was never created: the API server refuses any object in it."""

    def create_config_map(self, namespace: str, body: Object) -> Object:
        raise NotFound(f"namespaces {namespace!r} not found")


def test_a_first_read_makes_an_empty_state_config_map() -> None:
    cluster = FakeCluster()
    assert read_throttles(cluster, NAMESPACE) == {}
    made = cluster.config_maps[(NAMESPACE, names.STATE_CONFIG_MAP)]
    assert made["data"] == {"throttles": "{}"}
    assert made["metadata"]["labels"] == {MANAGED: "true"}


@pytest.mark.parametrize("existing", [False, True], ids=["missing", "existing"])
def test_waiting_modes_written_are_read_back(existing: bool) -> None:
    cluster = FakeCluster()
    if existing:
        read_throttles(cluster, NAMESPACE)
    throttles = {"team-b": Throttle("team-b", "big-7", 120.5), "team-a": Throttle("team-a", "g", 3)}
    write_throttles(cluster, NAMESPACE, throttles)
    assert read_throttles(cluster, NAMESPACE) == throttles
    write_throttles(cluster, NAMESPACE, {})  # the modes ended: nothing is left behind
    assert read_throttles(cluster, NAMESPACE) == {}


@pytest.mark.parametrize("side", ["read", "write"])
def test_a_missing_state_namespace_is_named_with_its_fix(side: str) -> None:
    cluster = NoNamespace()
    with pytest.raises(ClusterError, match=r"namespace caldera-system .* does not exist.*--rbac"):
        if side == "read":
            read_throttles(cluster, NAMESPACE)
        else:
            write_throttles(cluster, NAMESPACE, {"q": Throttle("q", "j", 1.0)})
