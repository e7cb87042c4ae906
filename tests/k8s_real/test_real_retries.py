"""A real 429 from API Priority and Fairness (issue 9, defect 3: one 429 failed the job for
good), on the real control plane: a FlowSchema sends every request of user bob to a priority
level with no seats that rejects (429 with `Retry-After`); caldera's client waits out what
the server asks, then succeeds once the schema is gone, and gives up in one line when its
retry budget runs out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from caldera.k8s.api import ClusterUnavailable
from caldera.k8s.client import KubeClusterAPI, load_api_client
from caldera.k8s.devcluster import DevCluster

k8s: Any = kubernetes

LEVEL = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
    "kind": "PriorityLevelConfiguration",
    "metadata": {"name": "caldera-test-starved"},
    "spec": {
        "type": "Limited",
        "limited": {
            "nominalConcurrencyShares": 0,  # no seats of its own
            "lendablePercent": 0,
            "borrowingLimitPercent": 0,  # and none borrowed: every request is refused
            "limitResponse": {"type": "Reject"},
        },
    },
}
SCHEMA = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
    "kind": "FlowSchema",
    "metadata": {"name": "caldera-test-bob"},
    "spec": {
        "priorityLevelConfiguration": {"name": "caldera-test-starved"},
        "matchingPrecedence": 100,  # before global-default (9900) and catch-all
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [
            {
                "subjects": [{"kind": "User", "user": {"name": "bob"}}],
                "resourceRules": [
                    {
                        "verbs": ["*"],
                        "apiGroups": ["*"],
                        "resources": ["*"],
                        "clusterScope": True,
                        "namespaces": ["*"],
                    }
                ],
            }
        ],
    },
}


@pytest.fixture
def bob_throttled(dev_cluster: DevCluster, api_client: Any) -> Iterator[Any]:
    """bob may list nodes (RBAC) but API Priority and Fairness refuses him everything."""
    admin = api_client("admin")
    rbac = k8s.client.RbacAuthorizationV1Api(admin)
    flow = k8s.client.FlowcontrolApiserverV1Api(admin)
    rbac.create_cluster_role(
        {
            "metadata": {"name": "t-read-nodes"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "t-read-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "t-read-nodes"},
            "subjects": [{"kind": "User", "name": "bob",
                          "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )  # fmt: skip
    flow.create_priority_level_configuration(LEVEL)
    flow.create_flow_schema(SCHEMA)
    bob = load_api_client(str(dev_cluster.kubeconfig("bob")))
    core = k8s.client.CoreV1Api(bob)

    def refused() -> int | None:
        try:
            core.list_node(limit=1, _preload_content=False)
        except k8s.client.ApiException as error:
            if error.status == 429:
                return int((error.headers or {}).get("Retry-After", "0"))
            raise
        return None

    deadline = time.monotonic() + 30
    while refused() is None:  # the API server has taken the schema in
        assert time.monotonic() < deadline, "API Priority and Fairness never refused bob"
        time.sleep(0.2)
    try:
        yield bob, flow
    finally:
        bob.close()
        for delete in (
            lambda: flow.delete_flow_schema("caldera-test-bob"),
            lambda: flow.delete_priority_level_configuration("caldera-test-starved"),
            lambda: rbac.delete_cluster_role_binding("t-read-nodes"),
            lambda: rbac.delete_cluster_role("t-read-nodes"),
        ):
            try:
                delete()
            except k8s.client.ApiException as error:
                if error.status != 404:
                    raise


def test_a_429_from_priority_and_fairness_is_waited_out_as_retry_after_says(
    bob_throttled: Any,
) -> None:
    bob, flow = bob_throttled
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:  # two refusals waited out: now the server lets bob in
            flow.delete_flow_schema("caldera-test-bob")
        time.sleep(seconds)

    api = KubeClusterAPI(bob, request_timeout=10, retry_budget=60, sleep=sleep)
    nodes = api.list_nodes("caldera.io/kwok=true")
    assert len(nodes) == 4
    assert api.retries == len(pauses) >= 2
    # The server said Retry-After >= 1 s: the client's own back-off would have been 0.4 s,
    # then 0.8 s; it waited what the server asked, plus at most 25 % jitter.
    assert all(1.0 <= p <= 1.25 * 30 for p in pauses), pauses
    assert pauses[0] >= 1.0 and pauses[1] >= 1.0


def test_a_429_storm_longer_than_the_retry_budget_fails_the_call_in_one_line(
    bob_throttled: Any,
) -> None:
    bob, _ = bob_throttled
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        time.sleep(seconds)

    api = KubeClusterAPI(bob, request_timeout=10, retry_budget=3, sleep=sleep)
    began = time.monotonic()
    with pytest.raises(ClusterUnavailable, match="answered 429") as refused:
        api.list_nodes()
    assert "\n" not in str(refused.value)
    assert sum(pauses) <= 3 and time.monotonic() - began < 15
    assert api.requests == len(pauses) + 1
