"""The informer cache (issue 10, deliverable 2) against the local API stub: list once, watch
from the list's resourceVersion with bookmarks, re-open a watch from where it was, re-list on
410 Gone only, keep pods slim; and the runtime reading through it (a pod it just created and
the cache has not seen yet is not taken for gone)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from apiserver_stub import StubAPIServer
from k8s_support import SETTINGS, World, training_job

from caldera.core import PolicyConfig
from caldera.k8s import FakeClock, FakeCluster, KubeRuntime
from caldera.k8s.cluster.cache import NOT_ENDED, Informer, InformerCache, slim_node, slim_pod
from caldera.k8s.cluster.client import KubeClusterAPI
from caldera.k8s.controller import Controller
from caldera.k8s.reading.nodes import read_nodes
from caldera.model import Queue
from caldera.trainingjob_api import GROUP, JOB, PLURAL, VERSION

JOBS = f"{GROUP}/{VERSION}"


@pytest.fixture
def stub() -> Iterator[StubAPIServer]:
    server = StubAPIServer().start()
    yield server
    server.stop()


@pytest.fixture
def api(stub: StubAPIServer) -> Iterator[KubeClusterAPI]:
    configuration = kubernetes.client.Configuration(host=stub.url)
    configuration.retries = False
    api_client = kubernetes.client.ApiClient(configuration)
    yield KubeClusterAPI(api_client, request_timeout=5)
    api_client.close()


def pod(name: str, phase: str = "Running", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "n-0", "containers": [{"name": "m", "image": "i", "args": ["x"]}]},
        "status": {"phase": phase},
    }


def lists(stub: StubAPIServer) -> list[Any]:
    return [r for r in stub.calls("GET", "/pods") if "watch" not in r.query]


def test_an_informer_lists_once_then_follows_the_watch(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    stub.put("v1", "pods", pod("a"), "team")
    wake = threading.Event()
    informer = Informer(api, "pods", "team", wake=wake)
    informer.watch_once()  # lists first, then watches from that version
    assert [p["metadata"]["name"] for p in informer.items()] == ["a"]
    assert wake.is_set() and informer.lists == 1
    stub.put("v1", "pods", pod("b"), "team")
    stub.update("v1", "pods", "a", "team", {"status": {"phase": "Succeeded"}})
    stub.remove("v1", "pods", "b", "team")
    stub.put("v1", "pods", pod("c"), "team")
    informer.watch_once()
    informer.watch_once()  # a watch re-opened (after its timeout) carries on: no re-list
    by_name = {p["metadata"]["name"]: p for p in informer.items()}
    assert sorted(by_name) == ["a", "c"]
    assert by_name["a"]["status"]["phase"] == "Succeeded"
    assert informer.lists == 1 and len(lists(stub)) == 1
    watches = [r for r in stub.calls("GET", "/pods") if r.query.get("watch") == ["true"]]
    assert all(r.query["allowWatchBookmarks"] == ["true"] for r in watches)
    versions = [int(r.query["resourceVersion"][0]) for r in watches]
    assert versions == sorted(versions) and versions[-1] > versions[0]  # moved on


def test_a_watch_answered_410_gone_lists_again(stub: StubAPIServer, api: KubeClusterAPI) -> None:
    stub.put("v1", "pods", pod("a"), "team")
    informer = Informer(api, "pods", "team")
    informer.watch_once()
    stub.put("v1", "pods", pod("b"), "team")
    stub.compact()  # the version the informer holds is compacted away
    informer.watch_once()  # 410 Gone
    informer.watch_once()  # lists again, then watches
    assert informer.lists == 2
    assert sorted(p["metadata"]["name"] for p in informer.items()) == ["a", "b"]


def test_the_running_pods_informer_drops_a_pod_that_ends(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    stub.put("v1", "pods", pod("a"), "other")
    informer = Informer(api, "pods", field_selector=NOT_ENDED, slim=slim_pod)
    informer.watch_once()
    assert [p["metadata"]["name"] for p in informer.items()] == ["a"]
    stub.update("v1", "pods", "a", "other", {"status": {"phase": "Failed"}})
    informer.watch_once()
    # An object that stops matching a watch's field selector comes as DELETED.
    assert informer.items() == []


def test_pods_are_kept_slim() -> None:
    full = pod("a", **{JOB: "j"})
    full["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    full["metadata"]["managedFields"] = [{"manager": "kubectl"}] * 50
    slim = slim_pod(full)
    assert slim["metadata"]["labels"] == {JOB: "j"}
    assert "managedFields" not in slim["metadata"]
    assert slim["spec"]["containers"] == [{"name": "m", "resources": {"requests": {"cpu": "1"}}}]
    assert slim["spec"]["nodeName"] == "n-0"


def test_a_node_heartbeat_changes_nothing_the_controller_reads_and_wakes_nobody(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    node = FakeCluster().add_node("n-0", labels={"caldera.io/hypernode": "a"})
    node["status"]["conditions"][0].update(
        lastHeartbeatTime="2026-12-01T10:00:00Z", lastTransitionTime="2026-12-01T09:00:00Z"
    )
    node["metadata"]["managedFields"] = [{"manager": "kwok"}] * 20
    stub.put("v1", "nodes", node)
    wake = threading.Event()
    informer = Informer(api, "nodes", wake=wake, slim=slim_node)
    informer.watch_once()
    (kept,) = informer.items()
    assert read_nodes([kept], SETTINGS) == read_nodes([node], SETTINGS)
    assert "managedFields" not in kept["metadata"]
    wake.clear()
    beat = {
        "status": {
            "conditions": [
                {**node["status"]["conditions"][0], "lastHeartbeatTime": "2026-12-01T10:00:40Z"}
            ]
        }
    }
    stub.update("v1", "nodes", "n-0", "", beat)
    informer.watch_once()
    assert not wake.is_set() and informer.events == 0
    stub.update("v1", "nodes", "n-0", "", {"spec": {"unschedulable": True}})  # a cordon
    informer.watch_once()
    assert wake.is_set()
    assert informer.items()[0]["spec"] == {"unschedulable": True}


def test_the_runtime_runs_a_job_through_the_informer_cache(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    stub.put("v1", "nodes", FakeCluster().add_node("n-0"))
    stub.put(
        JOBS,
        PLURAL,
        {"metadata": {"name": "job", "generation": 1}, "spec": training_job(gpus=8)},
        "team",
    )
    cache = InformerCache(api, SETTINGS)
    clock = FakeClock()
    runtime = KubeRuntime(api, [Queue("team")], PolicyConfig(), SETTINGS, clock, reads=cache)

    def sync() -> None:
        for informer in cache.informers.values():
            informer.watch_once()

    sync()
    runtime.step()  # admitted, started: the pod is created
    assert stub.get("v1", "pods", "job-1-0", "team") is not None
    clock.now += 1
    runtime.step()  # the cache has not seen the pod yet: it is not taken for gone
    assert runtime.jobs["team/job"].tasks[0].done is False
    sync()
    stub.update(
        "v1",
        "pods",
        "job-1-0",
        "team",
        {"spec": {"nodeName": "n-0"}, "status": {"phase": "Running"}},
    )
    sync()
    clock.now += 1
    runtime.step()
    job = stub.get(JOBS, PLURAL, "job", "team")
    assert job is not None and job["status"]["state"] == "Running"
    assert runtime.jobs["team/job"].running_since is not None
    lists_made = cache.lists
    sync()
    assert cache.lists == lists_made  # steady state: no re-list

    # What `caldera bench k8s` reads from the controller's `stats:` lines: a step in steady
    # state runs the cycle (its timer) and sends nothing at all.
    controller = Controller(runtime)
    before = controller.stats()
    assert before["lists"] == len(cache.informers) and before["requests"] > 0
    clock.now += 10
    runtime.step()
    after = controller.stats()
    assert after["cycles"] == before["cycles"] + 1
    assert after["requests"] == before["requests"] and after["lists"] == before["lists"]


def test_a_quiet_cluster_still_cycles_on_the_timer() -> None:
    """Nothing wakes the loop of a quiet cluster (heartbeats wake nobody), so the runtime's
    own timer does: effective weights move with time."""
    world = World().hypernode("a", "n", count=1).start()
    now = world.cluster.clock()
    wakeup = world.rt.next_wakeup
    assert wakeup is not None and now < wakeup <= now + 5.0
