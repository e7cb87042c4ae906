"""Real 429s from API Priority and Fairness (issue 9, defect 3: one 429 failed the job for
good), on the real control plane. A FlowSchema sends every request of user bob to a priority
level with the fewest seats there are (`nominalConcurrencyShares: 0`, nothing borrowed: one
request at a time) that rejects what it cannot seat at once (`limitResponse: Reject`). A
thread of bob's holds that seat most of the time with a request the server itself keeps for
3 s (a LIST at a resourceVersion the cache has not reached answers 504 "Too large resource
version" only after waiting for it), then lets go for a moment: bob's other requests meet real
429s with the server's `Retry-After`, and get through in the pauses. The seat is held by the
server's clock, not by how fast the flooding client can send (eight threads of quick LISTs
kept it busy too rarely on a loaded CI machine).

- without retries (`retry_budget=0`: the old behaviour) a 429 fails the call;
- with them, the client waits what `Retry-After` says and every call succeeds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from caldera.devcluster import DevCluster
from caldera.k8s.cluster import transport as kube_transport
from caldera.k8s.cluster.api import ClusterUnavailable
from caldera.k8s.cluster.client import KubeClusterAPI, load_api_client

k8s: Any = kubernetes

LEVEL = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
    "kind": "PriorityLevelConfiguration",
    "metadata": {"name": "caldera-test-starved"},
    "spec": {
        "type": "Limited",
        "limited": {
            "nominalConcurrencyShares": 0,
            "lendablePercent": 0,
            "borrowingLimitPercent": 0,
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
HOLD_PAUSE = 1.5  # seconds the holder lets go of bob's seat between two 3 s holds
FAR_AHEAD = 10**12  # a resourceVersion the watch cache has not reached: the server waits 3 s


@pytest.fixture
def bob_starved(dev_cluster: DevCluster, api_client: Any) -> Iterator[Callable[[], Any]]:
    """bob may list nodes and pods (RBAC); API Priority and Fairness gives him one seat and
    refuses the rest. Yields a maker of bob's clients; a flood runs while the test does."""
    admin = api_client("admin")
    rbac = k8s.client.RbacAuthorizationV1Api(admin)
    flow = k8s.client.FlowcontrolApiserverV1Api(admin)
    opened: list[Any] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        rbac.create_cluster_role(
            {
                "metadata": {"name": "t-read"},
                "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}],
            }
        )
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": "t-read"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "t-read"},
                "subjects": [{"kind": "User", "name": "bob",
                              "apiGroup": "rbac.authorization.k8s.io"}],
            }
        )  # fmt: skip
        level = flow.create_priority_level_configuration(LEVEL)
        flow.create_flow_schema(SCHEMA)

        def bob() -> Any:
            made = load_api_client(str(dev_cluster.kubeconfig("bob")))
            opened.append(made)
            return made

        probe = k8s.client.CoreV1Api(bob())

        def classified() -> bool:  # the API server has taken the schema in
            answer = _seated(lambda: probe.list_node(limit=1, _preload_content=False))
            uid = answer.headers.get("X-Kubernetes-PF-PriorityLevel-UID")
            return bool(uid == level.metadata.uid)

        deadline = time.monotonic() + 30
        while not classified():
            assert time.monotonic() < deadline, "bob's requests never reached the starved level"
            time.sleep(0.2)
        version = _seated(lambda: probe.list_node(limit=1)).metadata.resource_version
        far = str(int(version) + FAR_AHEAD)

        def hold() -> None:
            core = k8s.client.CoreV1Api(bob())
            while not stop.is_set():
                try:
                    core.list_node(resource_version=far, resource_version_match="NotOlderThan",
                                   _preload_content=False)  # fmt: skip
                except k8s.client.ApiException as error:
                    if error.status == 429:  # bob's own call had the seat: take it right after
                        stop.wait(0.05)
                        continue
                stop.wait(HOLD_PAUSE)

        threads.append(threading.Thread(target=hold, daemon=True))
        for thread in threads:
            thread.start()
        yield bob
    finally:  # also when the set-up failed half way: the next test creates the same objects
        stop.set()
        for thread in threads:
            thread.join(10)
        for made in opened:
            made.close()
        deletions: list[Callable[[], Any]] = [
            lambda: flow.delete_flow_schema("caldera-test-bob"),
            lambda: flow.delete_priority_level_configuration("caldera-test-starved"),
            lambda: rbac.delete_cluster_role_binding("t-read"),
            lambda: rbac.delete_cluster_role("t-read"),
        ]
        for delete in deletions:
            try:
                delete()
            except k8s.client.ApiException as error:
                if error.status != 404:
                    raise


def _seated(call: Callable[[], Any]) -> Any:
    """One of the set-up's own requests as bob: his one seat may be taken for a moment (by
    the request before, still being let go), so a 429 here is waited out, for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return call()
        except k8s.client.ApiException as error:
            if error.status != 429 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_without_retries_a_429_fails_the_call_in_one_line(bob_starved: Any) -> None:
    """The control: what issue 9 found (one 429, and the job failed for good)."""
    api = KubeClusterAPI(bob_starved(), request_timeout=10, retry_budget=0)
    deadline = time.monotonic() + 60
    while True:
        try:
            api.list_nodes("caldera.io/kwok=true")
        except ClusterUnavailable as error:
            assert "answered 429" in str(error) and "\n" not in str(error), error
            break
        assert time.monotonic() < deadline, "no 429 in 60 s: the flood did not starve bob"


def test_a_429_is_waited_out_as_retry_after_says_and_the_call_succeeds(
    bob_starved: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[float | None] = []  # each 429's Retry-After, as the client read it
    reader = kube_transport._retry_after

    def record(error: Any) -> float | None:
        said.append(reader(error))
        return said[-1]

    monkeypatch.setattr(kube_transport, "_retry_after", record)
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        time.sleep(seconds)

    api = KubeClusterAPI(bob_starved(), request_timeout=10, retry_budget=120, sleep=sleep)
    deadline = time.monotonic() + 90
    while api.retries < 2:  # until two 429s have been met and waited out
        assert len(api.list_nodes("caldera.io/kwok=true")) == 4  # every call succeeds
        assert time.monotonic() < deadline, "fewer than two 429s in 90 s"
    assert len(said) == len(pauses) == api.retries
    for server, pause in zip(said, pauses, strict=True):
        # The server asked for >= 1 s; the client's own first back-offs would be 0.4 s and
        # 0.8 s: it waited what the server said, plus at most 25 % jitter.
        assert server is not None and server >= 1, said
        assert server <= pause <= server * 1.25, (said, pauses)
