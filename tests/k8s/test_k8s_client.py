"""The real `ClusterAPI` — the official `kubernetes` client — against a local HTTP stub of the
API server: the paths, query strings, bodies and headers it sends, how failures read (and which
are asked again), a whole preemption driven through it, the RBAC the controller needs, and
`caldera k8s run` end to end on a kubeconfig. No cluster is contacted: the stub listens on
127.0.0.1 only. (The real API server: tests/k8s_real.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from apiserver_stub import Recorded, StubAPIServer
from k8s_support import SETTINGS as K8S_SETTINGS
from k8s_support import training_job
from typer.testing import CliRunner

from caldera.cli.main import app
from caldera.core import PolicyConfig
from caldera.k8s import (
    ClusterConflict,
    ClusterUnavailable,
    EvictionBlocked,
    FakeClock,
    FakeCluster,
    Forbidden,
    Invalid,
    KubeRuntime,
    QuotaExceeded,
    VolcanoMissing,
    names,
    priority_classes,
    volcano_queue,
)
from caldera.k8s.access.admission import (
    CONTROLLER_POD_GROUP_RULES,
    CONTROLLER_READ_RULES,
    CONTROLLER_STATE_RULES,
    CONTROLLER_WRITE_RULES,
)
from caldera.k8s.cluster.client import QUEUE_CONFLICT_TRIES, KubeClusterAPI, load_api_client
from caldera.k8s.controller import sync_cluster_objects
from caldera.k8s.reporting.events import JobEvent, Reason, event_body
from caldera.model import Queue
from caldera.trainingjob_api import GROUP, KIND, MANAGED, PLURAL, VERSION

SETTINGS = replace(K8S_SETTINGS, request_timeout=5)
JOBS = f"{GROUP}/{VERSION}"


@pytest.fixture
def stub() -> Iterator[StubAPIServer]:
    server = StubAPIServer().start()
    yield server
    server.stop()


def client_for(url: str) -> Any:
    configuration = kubernetes.client.Configuration(host=url)
    configuration.retries = False
    return kubernetes.client.ApiClient(configuration)


@pytest.fixture
def api(stub: StubAPIServer) -> Iterator[KubeClusterAPI]:
    api_client = client_for(stub.url)
    yield KubeClusterAPI(api_client, request_timeout=5)
    api_client.close()


def add_node(stub: StubAPIServer, name: str, hypernode: str = "a") -> None:
    stub.put(
        "v1", "nodes", FakeCluster().add_node(name, labels={"caldera.io/hypernode": hypernode})
    )


def add_job(stub: StubAPIServer, name: str, **fields: Any) -> None:
    stub.put(
        JOBS,
        PLURAL,
        {
            "apiVersion": JOBS,
            "kind": KIND,
            "metadata": {"name": name, "generation": 1},
            "spec": training_job(**fields),
        },
        namespace="team",
    )


def last(stub: StubAPIServer, method: str, contains: str = "") -> Recorded:
    calls = stub.calls(method, contains)
    assert calls, f"no {method} request with {contains!r} in its path"
    return calls[-1]


# -- one call at a time ------------------------------------------------------------------------


def test_list_nodes_sends_the_label_selector_and_returns_wire_objects(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    add_node(stub, "n-0")
    stub.put("v1", "nodes", {"metadata": {"name": "cpu-0", "labels": {"pool": "cpu"}}})
    nodes = api.list_nodes("caldera.io/hypernode=a")
    request = last(stub, "GET", "/api/v1/nodes")
    assert request.query == {"labelSelector": ["caldera.io/hypernode=a"]}
    assert [n["metadata"]["name"] for n in nodes] == ["n-0"]
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"  # wire form, not models


def test_list_pods_in_a_namespace_or_everywhere_with_selectors(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    stub.put(
        "v1",
        "pods",
        {
            "metadata": {"name": "a", "labels": {MANAGED: "true"}},
            "status": {"phase": "Running"},
        },
        namespace="team",
    )
    stub.put(
        "v1",
        "pods",
        {"metadata": {"name": "b"}, "status": {"phase": "Succeeded"}},
        namespace="other",
    )
    mine = api.list_pods("team", f"{MANAGED}=true")
    assert last(stub, "GET").path == "/api/v1/namespaces/team/pods"
    assert [p["metadata"]["name"] for p in mine] == ["a"]
    running = api.list_pods("", "", "status.phase!=Succeeded,status.phase!=Failed")
    request = last(stub, "GET")
    assert request.path == "/api/v1/pods"
    assert request.query == {"fieldSelector": ["status.phase!=Succeeded,status.phase!=Failed"]}
    assert [p["metadata"]["name"] for p in running] == ["a"]


def test_create_and_delete_a_pod_with_grace_period_and_uid_precondition(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "job-1-0"},
        "spec": {"terminationGracePeriodSeconds": 120, "containers": [{"name": "t"}]},
    }
    created = api.create_pod("team", body)
    post = last(stub, "POST")
    assert post.path == "/api/v1/namespaces/team/pods"
    assert post.body == body
    with pytest.raises(ClusterConflict, match="already exists"):
        api.create_pod("team", body)

    with pytest.raises(ClusterConflict, match="Precondition"):
        api.delete_pod("team", "job-1-0", 120, uid="someone-else")
    assert api.delete_pod("team", "job-1-0", 120, uid=created["metadata"]["uid"]) is True
    delete = last(stub, "DELETE")
    assert delete.path == "/api/v1/namespaces/team/pods/job-1-0"
    assert delete.body == {
        "gracePeriodSeconds": 120,
        "preconditions": {"uid": created["metadata"]["uid"]},
    }
    assert api.delete_pod("team", "job-1-0", 120) is False  # already gone: not an error


def test_pod_groups_are_volcano_custom_objects(stub: StubAPIServer, api: KubeClusterAPI) -> None:
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "job-1"},
        "spec": {"minMember": 2, "queue": "team"},
    }
    api.create_pod_group("team", group)
    post = last(stub, "POST")
    assert post.path == "/apis/scheduling.volcano.sh/v1beta1/namespaces/team/podgroups"
    assert post.body == group
    assert api.delete_pod_group("team", "job-1") is True
    delete = last(stub, "DELETE")
    assert delete.path == "/apis/scheduling.volcano.sh/v1beta1/namespaces/team/podgroups/job-1"
    assert delete.body == {"propagationPolicy": "Background"}


def test_a_status_is_written_to_the_status_subresource_as_a_merge_patch(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    add_job(stub, "job")
    status = {"state": "Running", "reason": None, "conditions": [{"type": "Admitted"}]}
    api.patch_job_status("team", "job", status)
    request = last(stub, "PATCH")
    assert request.path == f"/apis/{JOBS}/namespaces/team/{PLURAL}/job/status"
    assert request.content_type == "application/merge-patch+json"
    assert request.body == {"status": status}
    stored = stub.get(JOBS, PLURAL, "job", "team")
    assert stored is not None
    assert stored["status"] == {"state": "Running", "conditions": [{"type": "Admitted"}]}


def test_an_eviction_goes_through_the_eviction_api_with_grace_and_uid(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    api.create_pod("team", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    uid = (stub.get("v1", "pods", "p", "team") or {})["metadata"]["uid"]
    assert api.evict_pod("team", "p", 30, uid) is True
    post = last(stub, "POST", "/eviction")
    assert post.path == "/api/v1/namespaces/team/pods/p/eviction"
    assert post.body["kind"] == "Eviction"
    assert post.body["deleteOptions"] == {"gracePeriodSeconds": 30, "preconditions": {"uid": uid}}
    assert api.evict_pod("team", "p", 30) is False  # already gone


def test_answers_nobody_reads_still_give_their_connection_back(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    """Deletes, evictions and Events had their raw answers left unread, which kept each
    connection out of the pool: every one of them opened a new (TLS) connection."""
    for i in range(5):
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"}}
        api.create_pod("team", body)
    before = stub.connections
    for i in range(5):
        said = JobEvent("team", "job", "uid-1", Reason.STARTED, "attempt 1", 1.0e9 + i)
        api.create_event("team", event_body(said, "test", i))
        api.evict_pod("team", f"p{i}", 30)
        api.delete_pod("team", f"p{i}", 0)
        api.delete_service("team", f"s{i}")  # 404: read as well
    assert stub.connections - before <= 1


def test_an_eviction_a_disruption_budget_refuses_is_eviction_blocked(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    stub.fail(
        "POST",
        "/api/v1/namespaces/team/pods/p/eviction",
        429,
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    with pytest.raises(EvictionBlocked, match="disruption budget"):
        api.evict_pod("team", "p", 30)
    assert len(stub.calls("POST", "/eviction")) == 1  # a budget's no is not asked again


@pytest.mark.parametrize("status", [429, 503], ids=["priority and fairness", "unavailable"])
def test_a_busy_api_server_is_asked_again_with_backoff(stub: StubAPIServer, status: int) -> None:
    """Issue 9, defect 3: one 429 or 5xx no longer fails a pod create for good."""
    api_client = client_for(stub.url)
    pauses: list[float] = []
    api = KubeClusterAPI(api_client, request_timeout=5, retry_budget=5, sleep=pauses.append)
    stub.fail("POST", "/api/v1/namespaces/team/pods", status, "too many requests", times=2)
    try:
        api.create_pod("team", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    finally:
        api_client.close()
    assert len(stub.calls("POST", "/pods")) == 3
    assert len(pauses) == 2 and all(0 < p <= 5 for p in pauses)
    assert stub.get("v1", "pods", "p", "team") is not None


def test_retry_after_is_honoured_and_the_budget_bounds_the_wait(stub: StubAPIServer) -> None:
    api_client = client_for(stub.url)
    pauses: list[float] = []
    api = KubeClusterAPI(api_client, request_timeout=5, retry_budget=3.5, sleep=pauses.append)
    stub.fail("GET", "/api/v1/nodes", 429, "slow down", retry_after=2)
    try:
        with pytest.raises(ClusterUnavailable, match="answered 429"):
            api.list_nodes()
    finally:
        api_client.close()
    assert pauses and all(2 <= p <= 2.5 for p in pauses)  # Retry-After, plus jitter
    assert sum(pauses) <= 3.5


def test_a_quota_refusal_is_not_now_rather_than_forbidden(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    stub.fail(
        "POST",
        "/api/v1/namespaces/team/pods",
        403,
        'pods "p" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=8',
    )
    with pytest.raises(QuotaExceeded, match="exceeded quota"):
        api.create_pod("team", {"metadata": {"name": "p"}})


def test_queues_are_created_then_replaced_keeping_what_others_wrote(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    body = volcano_queue(Queue("team", weight=3), SETTINGS)
    api.apply_queue(body)
    assert last(stub, "POST").path == "/apis/scheduling.volcano.sh/v1beta1/queues"
    stub.update(
        "scheduling.volcano.sh/v1beta1",
        "queues",
        "team",
        "",
        {"metadata": {"annotations": {"owner": "platform-team"}}},
    )
    api.apply_queue(volcano_queue(Queue("team", weight=5), SETTINGS))
    put = last(stub, "PUT")
    assert put.path == "/apis/scheduling.volcano.sh/v1beta1/queues/team"
    assert put.body["spec"]["weight"] == 5
    assert put.body["metadata"]["resourceVersion"]  # optimistic concurrency kept
    assert put.body["metadata"]["annotations"]["owner"] == "platform-team"
    assert [q["metadata"]["name"] for q in api.list_queues()] == ["team"]


def test_a_queue_replace_refused_for_a_stale_version_is_read_and_made_again(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    """Volcano's queue controller writes a Queue's status right after it is created, so a
    replace made from the read before is refused (409): apply_queue reads again and replaces,
    a bounded number of times (the real-Volcano admission test met it in a clean-clone run)."""
    api.apply_queue(volcano_queue(Queue("team", weight=3), SETTINGS))
    path = "/apis/scheduling.volcano.sh/v1beta1/queues/team"
    stale = "the object has been modified; please apply your changes to the latest version"
    stub.fail("PUT", path, 409, stale, times=2)
    reads = len(stub.calls("GET", path))  # the create's read (404)
    api.apply_queue(volcano_queue(Queue("team", weight=5), SETTINGS))
    assert len(stub.calls("PUT", path)) == 3 and len(stub.calls("GET", path)) == reads + 3
    assert last(stub, "PUT").body["spec"]["weight"] == 5
    stub.fail("PUT", path, 409, stale)  # refused for good: the conflict surfaces
    with pytest.raises(ClusterConflict, match="has been modified"):
        api.apply_queue(volcano_queue(Queue("team", weight=7), SETTINGS))
    assert len(stub.calls("PUT", path)) == 3 + QUEUE_CONFLICT_TRIES


def test_priority_classes_are_created_once_and_never_silently_changed(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    for body in priority_classes():
        api.apply_priority_class(body)
    posts = stub.calls("POST", "/apis/scheduling.k8s.io/v1/priorityclasses")
    assert [p.body["metadata"]["name"] for p in posts] == [
        "critical-job",
        "large-job",
        "normal-job",
        "debug-job",
    ]
    for body in priority_classes():
        api.apply_priority_class(body)
    assert len(stub.calls("POST")) == 4  # already there and equal: nothing written
    stub.update("scheduling.k8s.io/v1", "priorityclasses", "large-job", "", {"value": 900})
    with pytest.raises(ClusterConflict, match="exists with value 900") as error:
        api.apply_priority_class(priority_classes()[1])
    assert "\n" not in str(error.value)


def test_a_watch_yields_event_types(stub: StubAPIServer, api: KubeClusterAPI) -> None:
    for name in ("a", "b"):
        stub.put(
            "v1",
            "pods",
            {"metadata": {"name": name, "labels": {MANAGED: "true"}}},
            namespace="team",
        )
    events = list(api.watch("pods", "team", f"{MANAGED}=true", 5))
    assert events == ["ADDED", "ADDED"]
    request = last(stub, "GET")
    assert request.query["watch"] == ["true"]
    assert request.query["timeoutSeconds"] == ["5"]
    assert request.query["labelSelector"] == [f"{MANAGED}=true"]


# -- failures read as one line -----------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_api_server_is_one_line() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    api_client = client_for(url)
    try:
        with pytest.raises(ClusterUnavailable) as error:
            KubeClusterAPI(api_client, request_timeout=2).check(["team"])
    finally:
        api_client.close()
    assert str(error.value) == f"cannot reach the Kubernetes API at {url}: connection refused"


def test_a_cluster_without_volcano_says_so() -> None:
    stub = StubAPIServer(volcano=False).start()
    api_client = client_for(stub.url)
    try:
        with pytest.raises(VolcanoMissing, match="the Volcano CRDs are not installed"):
            KubeClusterAPI(api_client).check(["team"])
        with pytest.raises(VolcanoMissing):
            KubeClusterAPI(api_client).create_pod_group("team", {"metadata": {"name": "x"}})
    finally:
        api_client.close()
        stub.stop()


@pytest.mark.parametrize(
    ("status", "error", "text"),
    [
        (403, Forbidden, r"forbidden \(403\)"),
        (422, Invalid, "admission webhook denied"),
        (500, ClusterUnavailable, "answered 500"),
    ],
    ids=["rbac", "webhook", "server error"],
)
def test_api_errors_keep_the_servers_message(
    stub: StubAPIServer, api: KubeClusterAPI, status: int, error: type[Exception], text: str
) -> None:
    stub.fail("POST", "/api/v1/namespaces/team/pods", status, "admission webhook denied it")
    with pytest.raises(error, match=text) as raised:
        api.create_pod("team", {"metadata": {"name": "p"}})
    assert "\n" not in str(raised.value)


# -- a preemption through the real client ------------------------------------------------------


def test_a_preemption_through_the_official_client(stub: StubAPIServer, api: KubeClusterAPI) -> None:
    stub.graceful = True  # deleted pods stay Terminating until the test removes them
    for i in range(2):
        add_node(stub, f"n-{i}")
    clock = FakeClock()
    policy = PolicyConfig(grace_period=120, eviction_budget=1.0)
    runtime = KubeRuntime(api, [Queue("team")], policy, SETTINGS, clock=clock)
    for i in range(2):
        add_job(stub, f"small{i}")
    runtime.step()
    created = [r.body for r in stub.calls("POST", "/pods")]
    assert [p["metadata"]["name"] for p in created] == ["small0-1-0", "small1-1-0"]
    pinned = {
        p["metadata"]["name"]: p["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchFields"][0]["values"]
        for p in created
    }
    assert pinned == {"small0-1-0": ["n-0"], "small1-1-0": ["n-1"]}
    for name, node in (("small0-1-0", "n-0"), ("small1-1-0", "n-1")):
        stub.update(
            "v1", "pods", name, "team", {"spec": {"nodeName": node}, "status": {"phase": "Running"}}
        )

    clock.now += 600
    add_job(stub, "big", type="large-job", tasks=2, gpus=8)
    runtime.step()
    evictions = stub.calls("POST", "/eviction")
    assert [e.path.split("/")[-2] for e in evictions] == ["small0-1-0", "small1-1-0"]
    for eviction in evictions:
        name = eviction.path.split("/")[-2]
        uid = (stub.get("v1", "pods", name, "team") or {})["metadata"]["uid"]
        assert eviction.body["deleteOptions"] == {
            "gracePeriodSeconds": 120,
            "preconditions": {"uid": uid},
        }
    victim = stub.get(JOBS, PLURAL, "small0", "team")
    assert victim is not None
    assert victim["status"]["state"] == "Releasing"
    big = stub.get(JOBS, PLURAL, "big", "team")
    assert big is not None
    promised = big["status"]["controller"]["nomination"]
    throttles = stub.get("v1", "configmaps", names.STATE_CONFIG_MAP, "caldera-system")
    assert throttles is not None and "team/big" in throttles["data"]["throttles"]

    clock.now += 60
    runtime.step()
    assert not stub.calls("POST", "/namespaces/team/pods/big")
    for name in ("small0-1-0", "small1-1-0"):  # the kubelet is done with them
        stub.remove("v1", "pods", name, "team")
    clock.now += 61
    runtime.step()
    big_pods = [
        r.body for r in stub.calls("POST", "/pods") if r.body["metadata"]["name"].startswith("big")
    ]
    assert [
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]["matchFields"][0]["values"][0]
        for p in big_pods
    ] == [p["node"] for p in promised["placement"]]
    assert last(stub, "POST", "/podgroups").body["metadata"]["name"] == "big-1"
    small = stub.get(JOBS, PLURAL, "small0", "team")
    assert small is not None and small["status"]["state"] == "Pending"
    events = [r.body for r in stub.calls("POST", "/events")]
    assert {"Preempted", "Requeued"} <= {e["reason"] for e in events}
    # first starts, admitted and started in one step: the conditions say both, no Event
    # (issue 40: it was two Events, then one)
    assert not {"Admitted", "Started"} & {e["reason"] for e in events}


def verb(request: Recorded) -> str:
    if request.method == "GET":
        if request.query.get("watch") == ["true"]:
            return "watch"
        parts = [p for p in request.path.split("/") if p]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            rest = rest[2:]
        return "get" if len(rest) >= 2 else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[request.method]


def group_and_resource(path: str) -> tuple[str, str]:
    parts = [p for p in path.split("/") if p]
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    if len(rest) >= 3:
        return group, f"{rest[0]}/{rest[2]}"  # a subresource: pods/eviction, …/status
    return group, rest[0]


def test_the_rbac_rules_cover_every_call_the_controller_makes(
    stub: StubAPIServer, api: KubeClusterAPI
) -> None:
    test_a_preemption_through_the_official_client(stub, api)
    api.check(["team"])
    sync_cluster_objects(api, [Queue("team")], SETTINGS)
    sync_cluster_objects(api, [Queue("team", weight=2)], SETTINGS)  # now a replace
    list(api.watch(PLURAL, "team", "", 1))
    list(api.watch("pods", "team", "x=y", 1))
    list(api.watch("nodes", "", "", 1))
    api.delete_service("team", "nope")
    api.create_service("team", {"metadata": {"name": "svc"}})
    api.read_config_map("caldera-system", names.STATE_CONFIG_MAP)
    api.read_queue("team")  # after Volcano refused a PodGroup of that queue
    allowed = {
        (group, resource, v)
        for rule in (
            *CONTROLLER_READ_RULES,
            *CONTROLLER_WRITE_RULES,
            *CONTROLLER_POD_GROUP_RULES,
            *CONTROLLER_STATE_RULES,
        )
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for v in rule["verbs"]
    }
    used = {
        (*group_and_resource(r.path), verb(r))
        for r in stub.requests
        if not r.path.startswith("/version")
    }
    assert used <= allowed, f"calls the ClusterRole does not allow: {sorted(used - allowed)}"
    assert {v for _, _, v in used} >= {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
    }


def test_the_controller_writes_only_in_served_namespaces_and_its_own() -> None:
    """Issue 9, defect 8: no ClusterRole lets the controller create a pod anywhere; its
    writing roles are bound in each served namespace (never kube-system)."""
    from caldera.k8s.access.admission import controller_rbac

    objects = controller_rbac(SETTINGS)
    cluster_wide = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    for binding in cluster_wide:
        role = next(
            o
            for o in objects
            if o["kind"] == "ClusterRole" and o["metadata"]["name"] == binding["roleRef"]["name"]
        )
        verbs = {v for rule in role["rules"] for v in rule["verbs"]}
        pods = [r for r in role["rules"] if "pods" in r["resources"]]
        assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in pods)
        assert "delete" not in verbs
    bound = {o["metadata"]["namespace"] for o in objects if o["kind"] == "RoleBinding"}
    assert bound == {"team", "serving", "other", SETTINGS.state_namespace}


# -- `caldera k8s run` on a kubeconfig ---------------------------------------------------------


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": url}}],
                "users": [{"name": "ops", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "ops"}}],
                "current-context": "stub",
            }
        ),
        encoding="utf-8",
    )
    return path


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "caldera.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "queues": [{"name": "team"}],
                "kubernetes": {
                    "image": "registry.example.com/train:v1",
                    "namespaces": {"team": {"queues": ["team"]}},
                },
            }
        ),
        encoding="utf-8",
    )
    return path


def test_load_api_client_reads_a_kubeconfig(tmp_path: Path, stub: StubAPIServer) -> None:
    api_client = load_api_client(str(kubeconfig(tmp_path, stub.url)))
    try:
        assert api_client.configuration.host == stub.url
        KubeClusterAPI(api_client).list_nodes()
    finally:
        api_client.close()
    assert last(stub, "GET", "/api/v1/nodes").headers["authorization"] == "Bearer not-a-secret"


def test_run_dry_run_reads_the_cluster_and_writes_nothing(
    tmp_path: Path, stub: StubAPIServer
) -> None:
    add_node(stub, "n-0")
    add_job(stub, "job")
    result = CliRunner().invoke(
        app,
        [
            "k8s",
            "run",
            "--kubeconfig",
            str(kubeconfig(tmp_path, stub.url)),
            "--config",
            str(config_file(tmp_path)),
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "would apply priorityclass critical-job (1000)" in result.stdout
    assert "would apply queue team" in result.stdout
    assert "would create pod team/job-1-0 on n-0" in result.stdout
    assert "would update TrainingJob team/job status (state Running)" in result.stdout
    assert {r.method for r in stub.requests} == {"GET"}


def test_run_against_an_unreachable_cluster_fails_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(
        app,
        [
            "k8s",
            "run",
            "--kubeconfig",
            str(kubeconfig(tmp_path, url)),
            "--config",
            str(config_file(tmp_path)),
            "--once",
        ],
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"caldera: error: cannot reach the Kubernetes API at {url}: connection refused"
    )


def test_run_without_volcano_fails_in_one_line(tmp_path: Path) -> None:
    stub = StubAPIServer(volcano=False).start()
    try:
        result = CliRunner().invoke(
            app,
            [
                "k8s",
                "run",
                "--kubeconfig",
                str(kubeconfig(tmp_path, stub.url)),
                "--config",
                str(config_file(tmp_path)),
                "--once",
            ],
        )
    finally:
        stub.stop()
    assert result.exit_code == 1
    assert result.stderr.startswith("caldera: error: the Volcano CRDs are not installed")
    assert result.stderr.count("\n") == 1


def test_run_with_a_missing_kubeconfig_fails_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "k8s",
            "run",
            "--kubeconfig",
            str(tmp_path / "nope"),
            "--config",
            str(config_file(tmp_path)),
            "--once",
        ],
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("caldera: error: cannot load a Kubernetes configuration")
    assert result.stderr.count("\n") == 1
