"""What a tenant writes cannot crash, stall or cheat the controller (issue 34), on the fakes:
quantities read as Kubernetes reads them, pod templates checked once at intake (fields,
nesting, GPUs over every container), deep JSON decoded, a pod's reports range-checked,
and any error acting for one job failing that job alone. The real control plane:
tests/k8s_real/test_real_hostile.py."""

from __future__ import annotations

import contextlib
import copy
import json
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from k8s_support import SETTINGS, World

from caldera.errors import RecordError
from caldera.k8s import read_training_job
from caldera.k8s.cluster.wirejson import DECODE_DEPTH, TOO_DEEP, loads
from caldera.k8s.effects.render import task_pod
from caldera.k8s.observe.pods import read_reports
from caldera.k8s.reading.nodes import pod_requests
from caldera.k8s.reading.podtemplate import effective_requests, nesting_problem
from caldera.k8s.reading.quantities import MAX_QUANTITY, cpu_millis, memory_mib, parse_quantity
from caldera.model import Queue
from caldera.trainingjob_api import (
    API_VERSION,
    ATTEMPT,
    CHECKPOINT,
    JOB,
    KIND,
    MANAGED,
    PROGRESS,
    RANK,
)

QUEUES = {"team": Queue("team")}


def manifest(containers: list[dict[str, Any]], **task: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "job", "namespace": "team", "uid": "u1"},
        "spec": {
            "tasks": [
                {"name": "w", "replicas": 1, "template": {"spec": {"containers": containers}}}
                | task
            ]
        },
    }


def container(**resources: Any) -> dict[str, Any]:
    return (
        {"name": "c", "image": "i", "resources": {"limits": resources}}
        if resources
        else {
            "name": "c",
            "image": "i",
        }
    )


def read(obj: dict[str, Any]) -> Any:
    return read_training_job(obj, SETTINGS, QUEUES, 0.0)


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    top = node
    for _ in range(levels):
        node["x"] = {}
        node = node["x"]
    return top


# -- quantities ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (4, Fraction(4)),
        ("4", Fraction(4)),
        (0.5, Fraction(1, 2)),
        ("500m", Fraction(1, 2)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1e3", Fraction(1000)),
        ("1P", Fraction(10**15)),
        ("2k", Fraction(2000)),
        ("100n", Fraction(1, 10**7)),
        (".5", Fraction(1, 2)),
    ],
    ids=str,
)
def test_quantities_read_as_kubernetes_reads_them(value: Any, want: Fraction) -> None:
    assert parse_quantity(value) == want


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -1, "-1", "1e308", 1e306, "1e999999999", "4 cores", "", True, None, "NaN"],
    ids=repr,
)
def test_nan_inf_negative_and_absurd_quantities_are_refused_in_one_line(value: Any) -> None:
    with pytest.raises(ValueError) as raised:
        parse_quantity(value)
    assert "\n" not in str(raised.value)


def test_cpu_and_memory_round_up_as_requests_do() -> None:
    assert cpu_millis("100n") == 1 and cpu_millis(4) == 4000
    assert memory_mib(4) == 1  # 4 bytes: Kubernetes reads a bare number as bytes
    assert memory_mib("1Gi") == 1024
    assert parse_quantity(MAX_QUANTITY.numerator // MAX_QUANTITY.denominator)


# -- nesting -------------------------------------------------------------------------------


def test_deep_json_decodes_with_its_deep_part_cut_instead_of_raising() -> None:
    text = json.dumps({"metadata": {"name": "x"}, "spec": "PLACEHOLDER"})
    body = '{"a":' * 1100 + '"]}\\"{"' + "}" * 1100
    obj = loads(text.replace('"PLACEHOLDER"', body).encode())
    assert obj["metadata"] == {"name": "x"}
    level, node = 1, obj["spec"]
    while isinstance(node, dict):
        node, level = node["a"], level + 1
    assert (node, level) == (TOO_DEEP, DECODE_DEPTH)
    assert loads(b'{"a": [1, {"b": "]"}]}') == {"a": [1, {"b": "]"}]}


def test_nesting_is_bounded_without_recursion() -> None:
    assert nesting_problem(deep(100_000)) == "template is nested deeper than 48 levels"
    assert nesting_problem(deep(40)) is None
    assert nesting_problem([0] * 60_000) == "template holds more than 50000 values"


# -- the template, read once ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "want"),
    [
        (
            lambda t: t["spec"].update({"x-deep": {"a": 1}}),
            r"template\.spec: unknown field 'x-deep'",
        ),
        (lambda t: t["spec"].update({"extra": deep(1100)}), r"nested deeper than 48 levels"),
        (
            lambda t: t["spec"]["containers"][0].update({"imagee": "x"}),
            r"containers\[0\]: unknown field 'imagee'",
        ),
        (
            lambda t: t["spec"]["containers"][0]["resources"]["limits"].update(cpu="1e308"),
            r"out of range",
        ),
        (
            lambda t: t["spec"]["containers"][0]["resources"]["limits"].update(memory=math.nan),
            r"invalid quantity nan",
        ),
        (lambda t: t["spec"].update(resourceClaims=[{"name": "gpu"}]), r"resource claims"),
        (lambda t: t["spec"]["containers"][0].update(env=[{"value": "x"}]), r"env\[0\]\.name"),
        (lambda t: t.update(status={}), r"unknown field 'status'"),
    ],
    ids=["unknown-field", "nested", "container-field", "cpu-1e308", "nan", "claims", "env", "top"],
)
def test_a_template_kubernetes_could_not_run_is_refused_in_one_line(change: Any, want: str) -> None:
    obj = manifest([container(cpu=1)])
    change(obj["spec"]["tasks"][0]["template"])
    with pytest.raises(RecordError, match=want) as raised:
        read(obj)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 300


@pytest.mark.parametrize(
    ("gpus", "want"),
    [(1e306, r"gpus must be between 0 and 1024"), (math.nan, r"gpus must be between")],
    ids=["1e306", "nan"],
)
def test_absurd_gpus_are_refused_not_overflowed(gpus: float, want: str) -> None:
    with pytest.raises(RecordError, match=want):
        read(manifest([container()], gpus=gpus))


def test_an_unquoted_cpu_is_read_as_kubernetes_reads_it() -> None:
    spec = read(manifest([{"name": "c", "resources": {"requests": {"cpu": 4, "memory": 4}}}])).spec
    assert (spec.cpu, spec.memory) == (4000, 1)


def test_a_tasks_gpus_are_the_sum_over_its_containers() -> None:
    """Issue 34, item 2: container 0 asked 1 GPU, a sidecar 7; counted as 1, given 8."""
    obj = manifest([container(**{"nvidia.com/gpu": 1}), container(**{"nvidia.com/gpu": 7})])
    assert read(obj).spec.gpu == 8000


def test_init_containers_count_as_the_scheduler_counts_them() -> None:
    pod_spec = {
        "containers": [container(cpu=1), container(cpu=1)],
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": 1}}},
            {"name": "init", "resources": {"requests": {"cpu": 4}}},
        ],
    }
    assert effective_requests(pod_spec)["cpu"] == 5  # the init (4) beside the sidecar (1)
    pod_spec["initContainers"][1]["resources"]["requests"]["cpu"] = 1
    assert effective_requests(pod_spec)["cpu"] == 3  # two containers and the sidecar
    assert pod_requests({"spec": pod_spec}, "nvidia.com/gpu") == (0, 3000, 0)


@pytest.mark.parametrize(
    "resource",
    ["amd.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared", "gpu.intel.com/i915"],
)
def test_any_other_gpu_resource_anywhere_is_refused(resource: str) -> None:
    obj = manifest([container(), container(**{resource: 1})])
    with pytest.raises(RecordError, match="caldera does not count"):
        read(obj)


def test_a_sidecars_gpus_are_rendered_as_counted() -> None:
    """The pod asks for what caldera counted: the template's own split when it sums to the
    job's GPUs, else the decided GPUs on the first container and none on the others."""
    world = World().hypernode("a", "n", count=1).start()
    split = manifest([container(**{"nvidia.com/gpu": 1}), container(**{"nvidia.com/gpu": 7})])
    accepted = read(split)
    from caldera.core import TaskPlacement

    pod = task_pod(
        accepted.spec,
        accepted.workload,
        0,
        TaskPlacement(0, tuple(range(8)), 1000, 0, 0),
        world.rt.nodes,
        1,
        0,
        30.0,
        SETTINGS,
    )
    asks = [c["resources"]["limits"].get("nvidia.com/gpu") for c in pod["spec"]["containers"]]
    assert asks == ["1", 7] or asks == ["1", "7"] or asks == [1, 7]
    assert effective_requests(pod["spec"])["nvidia.com/gpu"] == 8


# -- hostile TrainingJobs through the controller --------------------------------------------

_HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["4", "500m", "1e308", "1e999999", "NaN", "-1", "64Gi", "", "x" * 300]),
    st.text(max_size=20),
)
_JSON = st.recursive(
    _HOSTILE_VALUES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_RESOURCE_NAMES = st.sampled_from(
    ["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb", "pods"]
)
_CONTAINER = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=5)},
    optional={
        "image": st.one_of(st.text(max_size=5), _HOSTILE_VALUES),
        "resources": st.one_of(
            _JSON,
            st.fixed_dictionaries(
                {},
                optional={
                    "limits": st.dictionaries(_RESOURCE_NAMES, _HOSTILE_VALUES, max_size=3),
                    "requests": st.dictionaries(_RESOURCE_NAMES, _HOSTILE_VALUES, max_size=3),
                },
            ),
        ),
        "env": st.one_of(
            _JSON, st.lists(st.dictionaries(st.sampled_from(["name", "value"]), _HOSTILE_VALUES))
        ),
        "x-unknown": _JSON,
    },
)
_TEMPLATE = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(_JSON, st.fixed_dictionaries({"labels": _JSON})),
        "spec": st.one_of(
            _JSON,
            st.fixed_dictionaries(
                {"containers": st.lists(_CONTAINER, max_size=3)},
                optional={
                    "initContainers": st.lists(_CONTAINER, max_size=2),
                    "volumes": _JSON,
                    "x-deep": _JSON,
                    "nodeSelector": _JSON,
                },
            ),
        ),
    },
)
_TASK = st.fixed_dictionaries(
    {"template": st.one_of(_TEMPLATE, _JSON)},
    optional={
        "name": st.one_of(st.text(max_size=5), _HOSTILE_VALUES),
        "replicas": _HOSTILE_VALUES,
        "gpus": _HOSTILE_VALUES,
        "gpuProfile": _HOSTILE_VALUES,
    },
)
_SPEC = st.fixed_dictionaries(
    {"tasks": st.one_of(st.lists(_TASK, min_size=1, max_size=3), _JSON)},
    optional={
        "type": st.one_of(st.sampled_from(["normal", "critical", "large-job"]), _HOSTILE_VALUES),
        "minAvailable": _HOSTILE_VALUES,
        "maxRetries": _HOSTILE_VALUES,
        "expectedDuration": _HOSTILE_VALUES,
        "checkpoint": st.one_of(
            _JSON,
            st.fixed_dictionaries(
                {}, optional={"interval": _HOSTILE_VALUES, "cost": _HOSTILE_VALUES}
            ),
        ),
        "topology": _JSON,
        "gpuModel": _JSON,
        "queue": _HOSTILE_VALUES,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_SPEC)
def test_intake_of_a_hostile_training_job_is_a_job_or_a_one_line_rejection(spec: Any) -> None:
    """The intake never raises anything but a one-line RecordError (RenderError: its
    subclass sibling, from the pod check), and what it accepts is typed and finite."""
    obj = {"metadata": {"name": "job", "namespace": "team", "uid": "u"}, "spec": spec}
    try:
        accepted = read(copy.deepcopy(obj))
        accepted.workload.check(SETTINGS)
    except RecordError as error:
        assert "\n" not in str(error)
        return
    except Exception as error:  # RenderError is fine; anything else is the bug
        from caldera.errors import RenderError

        assert isinstance(error, RenderError), repr(error)
        return
    job = accepted.spec
    assert isinstance(job.gpu, int) and isinstance(job.cpu, int) and isinstance(job.memory, int)
    assert 0 <= job.gpu <= 1024 * 1000 and job.cpu >= 0 and job.memory >= 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_SPEC)
def test_a_hostile_training_job_never_stops_another_teams_job(spec: Any) -> None:
    """Through the whole controller on the fake cluster: a hostile job and a good one; the
    step never raises, the good job runs, the hostile one is admitted or Rejected."""
    world = World().hypernode("a", "n", count=2).start()
    world.cluster.submit("team", "bad", copy.deepcopy(spec))
    world.submit("good", namespace="other", gpus=8)
    world.step()
    world.step(1)
    assert world.state("good", "other") == "Running"
    state = (world.job("bad", "team").get("status") or {}).get("state")
    assert state in ("Rejected", "Pending", "Running", "Held", "Failed"), state
    if state == "Rejected":
        assert "Rejected" in world.events("bad")


def test_the_issues_manifests_are_rejected_with_an_event_and_others_run() -> None:
    world = World().hypernode("a", "n", count=2).start()
    bad: dict[str, dict[str, Any]] = {
        "deep": {"containers": [container()], "x-deep": {"a": 1}},
        # As the client decodes a template nested 1,100 levels (the fake copies what it holds).
        "nested": {"containers": [container()], "volumes": [loads("[" * 1100 + "]" * 1100)]},
        "cpu-big": {"containers": [container(cpu="1e308")]},
        "amd": {"containers": [container(), container(**{"amd.com/gpu": 1})]},
    }
    for name, pod_spec in bad.items():
        world.cluster.submit(
            "team", name, {"tasks": [{"replicas": 1, "template": {"spec": pod_spec}}]}
        )
    world.cluster.submit(
        "team", "huge", {"tasks": [{"replicas": 1, "gpus": 1e306, "template": {}}]}
    )
    world.submit("good", namespace="other", gpus=8)
    world.step()
    world.step(1)
    assert world.state("good", "other") == "Running"
    for name in [*bad, "huge"]:
        status = world.status(name)
        assert status["state"] == "Rejected", name
        assert status["reason"] and "\n" not in status["reason"], name
        assert "Rejected" in world.events(name), name


def test_an_unexpected_error_for_one_job_fails_that_job_not_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = World().hypernode("a", "n", count=2).start()
    original = world.cluster.create_pod

    def create_pod(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"]["name"].startswith("boom"):
            raise TypeError("the client could not serialise it")
        return original(namespace, body)

    monkeypatch.setattr(world.cluster, "create_pod", create_pod)
    world.submit("boom", gpus=8)
    world.submit("fine", namespace="other", gpus=8)
    world.step()
    world.step(1)
    world.step(1)
    assert world.state("fine", "other") == "Running"
    assert world.state("boom") in ("Failed", "Pending")
    assert "CreateRefused" in world.events("boom")


# -- pods cannot lie -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({PROGRESS: "0.5"}, (0.5, None, None)),
        ({PROGRESS: "nan"}, (None, None, "not a fraction")),
        ({PROGRESS: "inf"}, (None, None, "not a fraction")),
        ({PROGRESS: "1.5"}, (None, None, "not a fraction")),
        ({PROGRESS: "-0.1"}, (None, None, "not a fraction")),
        ({CHECKPOINT: '{"time": 100}'}, (None, 100.0, None)),
        ({CHECKPOINT: '{"time": NaN}'}, (None, None, "not a past unix time")),
        ({CHECKPOINT: "1e300"}, (None, None, "not a past unix time")),
        ({CHECKPOINT: '{"time": true}'}, (None, None, "not a past unix time")),
    ],
    ids=["ok", "nan", "inf", "above", "below", "checkpoint", "ck-nan", "ck-future", "ck-bool"],
)
def test_a_pods_reports_are_range_checked(annotations: dict[str, str], want: Any) -> None:
    progress, at, problem = read_reports(annotations, 1000.0)
    assert (progress, at) == want[:2]
    assert (problem is None) == (want[2] is None)
    if want[2]:
        assert want[2] in str(problem)


def test_progress_nan_is_ignored_with_a_warning_and_the_status_stays_writable() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("job", gpus=8)
    world.step()
    world.step(1)
    pod = world.pods("job")[0]
    world.cluster.pod("team", pod["metadata"]["name"])["metadata"].setdefault("annotations", {})[
        PROGRESS
    ] = "nan"
    world.step(1)
    world.step(1)
    assert world.rt.jobs["team/job"].reported_progress is None
    assert world.events("job").count("BadReport") == 1
    json.dumps(world.status("job"), allow_nan=False)  # nothing the API server would refuse


# -- what the client sends -----------------------------------------------------------------


def test_unquoted_quantities_are_rendered_in_wire_form() -> None:
    """The client's typed Pod takes quantities only as strings: `cpu: 4` was a valid
    manifest whose every start failed."""
    world = World().hypernode("a", "n", count=1).start()
    obj = manifest(
        [
            {
                "name": "c",
                "resources": {
                    "requests": {"cpu": 4, "memory": 0.5},
                    "limits": {"nvidia.com/gpu": 1},
                },
            },
            container(**{"nvidia.com/gpu": 7}),
        ]
    )
    accepted = read(obj)
    accepted.workload.check(SETTINGS)
    from caldera.core import TaskPlacement

    pod = task_pod(
        accepted.spec,
        accepted.workload,
        0,
        TaskPlacement(0, tuple(range(8)), 1000, 4000, 1),
        world.rt.nodes,
        1,
        0,
        30.0,
        SETTINGS,
    )
    first, second = pod["spec"]["containers"]
    assert first["resources"]["requests"]["cpu"] == "4"
    assert first["resources"]["requests"]["memory"] == "500m"
    assert first["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert second["resources"]["limits"]["nvidia.com/gpu"] == "7"
    from kubernetes.client import V1Pod

    V1Pod.model_validate(pod)  # what create_namespaced_pod checks before it sends


def test_a_template_the_client_would_refuse_is_rejected_at_intake() -> None:
    from caldera.errors import RenderError

    obj = manifest([{"name": "c", "image": "i", "env": [{"name": "A", "value": 3}]}])
    accepted = read(obj)
    with pytest.raises(RenderError, match=r"tasks\[0\]\.template\.spec\.containers\.0\.env\.0"):
        accepted.workload.check(SETTINGS)


# -- why a job waits -----------------------------------------------------------------------


def test_a_waiting_job_says_why_once_and_stops_saying_it_when_it_starts() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("first", gpus=8)
    world.step()
    world.submit("second", gpus=8)
    world.step(1)
    world.step(1)
    status = world.status("second")
    assert status["state"] == "Pending"
    assert status["reason"].startswith("waiting: "), status["reason"]
    assert world.condition("second", "Waiting")[0] == "True"
    assert world.events("second").count("Waiting") == 1
    for pod in world.pods("first"):
        world.cluster.finish("team", pod["metadata"]["name"], 0)
    world.step(1)
    world.step(1)
    assert world.state("second") == "Running"
    assert world.condition("second", "Waiting") == ("False", "Started")
    assert world.events("second").count("Waiting") == 1


def test_no_node_to_use_is_said_as_such() -> None:
    world = World().start()
    world.submit("lonely", gpus=8)
    world.step()
    world.step(1)
    assert world.condition("lonely", "Waiting") == ("True", "NoNodes")
    assert "no node caldera may use" in world.status("lonely")["reason"]


def test_state_column_says_starting_until_the_pods_run() -> None:
    world = World().hypernode("a", "n", count=1).start()
    world.submit("job", gpus=8)
    world.rt.step()  # started, the pods not yet bound (the fake binds on settle)
    status = world.status("job")
    assert (status["state"], status["phase"]) == ("Running", "Starting")
    world.cluster.settle()
    world.step(1)
    assert world.status("job")["phase"] == "Running"


# -- ownership by owner, not by label ------------------------------------------------------


def test_a_pod_that_loses_calderas_labels_stays_its_jobs() -> None:
    """Issue 34, item 4: removing `caldera.io/managed` from a running pod made caldera start
    attempt 2 beside it (16 GPUs for an 8-GPU job). The pod is claimed back by its owner
    reference: the job keeps attempt 1, its room stays counted, a newcomer waits."""
    world = World().hypernode("a", "n", count=1).start()
    world.submit("job", gpus=8)
    world.step()
    world.step(1)
    (pod,) = world.pods("job")
    name = pod["metadata"]["name"]
    labels = world.cluster.pod("team", name)["metadata"]["labels"]
    for key in (MANAGED, JOB, RANK, ATTEMPT):
        labels.pop(key, None)
    world.submit("newcomer", gpus=8)
    for _ in range(5):
        world.step(30)
    status = world.status("job")
    assert (status["state"], status["attempts"]) == ("Running", 1)
    assert world.state("newcomer") == "Pending"
    assert world.rt.jobs["team/job"].tasks[0].pod == name
    world.restart()  # a restarted controller takes it back too
    world.step(1)
    assert world.status("job")["attempts"] == 1
    assert world.state("newcomer") == "Pending"


# -- pinned pods that cannot bind ----------------------------------------------------------


def test_a_start_that_never_binds_is_placed_elsewhere_not_pinned_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scheduler disagrees with caldera's view of a node for a reason caldera cannot see
    (a sidecar's GPUs counted as none, before issue 34): after the start timeout that node's
    free room is withheld, so the job goes to the empty node instead of being pinned there
    again; a change of the node (a taint or cordon lifted) gives the room back at once."""
    world = World().hypernode("a", "n", count=2).start()
    world.submit("job")
    world.rt.step()
    (first,) = world.pinned("job")
    cluster = world.cluster
    bind = cluster._bind

    def refusing() -> None:  # the scheduler will not bind anything on `first`
        held = [
            p
            for p in cluster.pods.values()
            if not p["spec"].get("nodeName") and cluster._pinned_node(p) == first
        ]
        for pod in held:
            pod["spec"]["nodeName"] = "elsewhere"  # hidden from this round of binding
        bind()
        for pod in held:
            pod["spec"].pop("nodeName", None)
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
                    "1 node(s) didn't satisfy plugin(s) [NodeAffinity].",
                }
            ]

    monkeypatch.setattr(cluster, "_bind", refusing)
    world.step(world.settings.bind_timeout + 1)
    assert "StartTimeout" in world.events("job")
    assert world.rt.pods.withheld(cluster.clock()) == {first}
    said = [m for r, m in cluster.events_of("team", "job") if r == "StartTimeout"]
    assert "0/2 nodes are available: 1 Insufficient nvidia.com/gpu" in said[0], said
    for _ in range(3):
        world.step(5)
    assert world.state("job") == "Running"
    assert world.pinned("job")[-1] != first
    cluster.nodes[first]["spec"]["taints"] = [{"key": "k", "effect": "PreferNoSchedule"}]
    assert world.rt.pods.withheld(cluster.clock()) == frozenset()  # the node changed


# -- what a template may ask for -----------------------------------------------------------


@pytest.mark.parametrize(
    ("pod_spec", "want"),
    [
        ({"securityContext": {"runAsUser": 0}}, "runAsUser: 0"),
        ({"containers": [{"name": "c", "securityContext": {"runAsUser": 0}}]}, "runAsUser: 0"),
        (
            {"containers": [{"name": "c", "securityContext": {"procMount": "Unmasked"}}]},
            "procMount",
        ),
        ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "unconfined"),
        ({"runtimeClassName": "kata"}, "runtimeClassName"),
        ({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}, "sysctl"),
    ],
    ids=["root", "root-container", "procmount", "seccomp", "runtime-class", "sysctl"],
)
def test_pod_security_baseline_is_the_controllers_check_too(
    pod_spec: dict[str, Any], want: str
) -> None:
    pod_spec = {"containers": [container()], **pod_spec}
    with pytest.raises(RecordError, match=want):
        read(
            manifest(pod_spec["containers"])
            | {"spec": {"tasks": [{"replicas": 1, "template": {"spec": pod_spec}}]}}
        )


def test_the_policy_asks_the_authorizer_about_every_secret_configmap_and_claim() -> None:
    from caldera.k8s.access.admission import admission_policy

    policy, _ = admission_policy(SETTINGS)
    rules = " ".join(v["expression"] for v in policy["spec"]["validations"])
    for resource in ("secrets", "configmaps", "persistentvolumeclaims"):
        assert f"resource('{resource}')" in rules
    for path in ("secretKeyRef", "configMapKeyRef", "envFrom", "projected", "runAsUser"):
        assert path in rules
    safe = read(
        manifest([container()])
        | {
            "spec": {
                "tasks": [
                    {
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "containers": [container()],
                                "securityContext": {
                                    "runAsUser": 1000,
                                    "sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}],
                                },
                            }
                        },
                    }
                ]
            }
        }
    )
    assert safe.spec.tasks == 1


def test_describe_shows_readable_times_and_a_restart_reads_them_back() -> None:
    """`kubectl describe` printed `preempt_failed_at: 1.796e+09`: every unix time in
    `status.controller` is written as RFC 3339 (to the microsecond) and read back exactly."""
    import re

    world = World().hypernode("a", "n", count=1).start()
    world.submit("job", gpus=8)
    world.step(0.123456)
    world.step(1)
    status = world.status("job")
    text = json.dumps(status)
    assert not re.search(r"\d\.\d+e\+0\d", text), text
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", status["controller"]["submit"])
    first = world.rt.jobs["team/job"]
    before = (first.spec.submit, first.first_start, first.running_since)
    world.restart()
    world.step(1)
    again = world.rt.jobs["team/job"]
    assert (again.spec.submit, again.first_start, again.running_since) == pytest.approx(before)


# -- a namespace that cannot be read -------------------------------------------------------


class _Informed:
    """The fake cluster as informers see it; one namespace's TrainingJobs cannot be listed
    (as a 1,100-level template made the client's decoder fail on every list before)."""

    def __init__(self, cluster: Any, broken: str) -> None:
        self.cluster = cluster
        self.broken = broken

    def list_objects(
        self, kind: str, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[Any], str]:
        from caldera.errors import ClusterError

        if kind == "nodes":
            return self.cluster.list_nodes(label_selector), "1"
        if kind == "pods":
            return self.cluster.list_pods(namespace, label_selector, field_selector), "1"
        if namespace == self.broken:
            raise ClusterError(f"list {kind} in {namespace}: cannot be decoded")
        return self.cluster.list_jobs(namespace), "1"

    def watch_objects(self, *args: Any) -> Any:
        return iter(())


def test_pods_of_a_namespace_whose_jobs_cannot_be_read_are_not_orphans() -> None:
    """Issue 34: after a restart a namespace whose TrainingJobs could not be listed had a
    running pod deleted as an orphan while its status still said Running."""
    from caldera.k8s import KubeRuntime
    from caldera.k8s.cluster.cache import InformerCache

    world = World().hypernode("a", "n", count=1).start()
    world.submit("steady", namespace="other", gpus=8)
    world.step()
    world.step(1)
    assert world.state("steady", "other") == "Running"
    cache = InformerCache(_Informed(world.cluster, "other"), world.settings)
    from caldera.errors import ClusterError

    for informer in cache.informers.values():
        with contextlib.suppress(ClusterError):
            informer.watch_once()
    runtime = KubeRuntime(
        world.cluster,
        world.config.queues,
        world.config.policy,
        world.settings,
        clock=world.cluster.clock,
        reads=cache,
    )
    runtime.step()
    world.cluster.advance(30)
    runtime.step()
    assert world.deleted() == []
    assert cache.ready("team") and not cache.ready("other")


def test_every_reason_the_core_gives_has_a_condition_reason() -> None:
    from caldera.core import WaitReason
    from caldera.k8s.reporting.waiting import _KINDS

    assert set(_KINDS) == set(WaitReason)


# -- a node's pod capacity ------------------------------------------------------------------


def test_a_nodes_pod_capacity_is_room_like_any_other() -> None:
    """Issue 34, item 2: a 0-GPU gang of 600 tasks went onto one node past its 110-pod limit
    (490 never bound, all recreated every ~70 s). A node's `pods` allocatable is a resource
    the core places against: here 3 pods a node, a gang of 5 spreads, a second one waits."""
    world = World().hypernode("a", "n", count=2)
    for node in world.cluster.nodes.values():
        node["status"]["allocatable"]["pods"] = "3"
    world.start()
    assert [n.pods for n in world.rt.nodes] == [3, 3]
    world.submit("many", tasks=5, gpus=0)
    world.step()
    pinned = world.pinned("many")
    assert len(pinned) == 5 and max(pinned.count(n) for n in set(pinned)) <= 3, pinned
    world.submit("more", tasks=2, gpus=0)
    world.step(1)
    assert world.state("more") == "Pending" and world.pods("more") == []
