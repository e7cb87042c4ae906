"""Reading Kubernetes nodes into caldera's topology, the room other pods hold, and the guard
that every pod removal passes (protection judged from the job, never from pod labels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from caldera.k8s import Blocked, KubeSettings, Purpose, foreign_usage, read_nodes, refusal
from caldera.k8s.settings import NodeLabels
from caldera.model import JobSpec, JobType
from caldera.trainingjob_api import JOB_TYPE, MANAGED, PROTECTED

SETTINGS = KubeSettings()


def node(
    name: str,
    gpus: str | None = "8",
    labels: dict[str, str] | None = None,
    cpu: str = "127910m",
    memory: str = "1056330584Ki",
    ready: str = "True",
    unschedulable: bool = False,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ],
        },
    }


def test_gpus_model_memory_and_islands_come_from_allocatable_and_labels() -> None:
    state = read_nodes(
        [
            node(
                "b",
                labels={
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.memory": "81559",
                    "caldera.io/nvlink-island": "4",
                },
            ),
            node("a", gpus=None, labels={"nvidia.com/gpu.count": "4"}),
        ],
        SETTINGS,
    )
    a, b = state.nodes
    assert (a.name, a.index, a.gpus, a.gpu_model, a.island_size) == ("a", 0, 4, "GPU", 4)
    assert (b.name, b.index, b.gpus, b.island_size) == ("b", 1, 8, 4)
    assert b.gpu_model == "NVIDIA-H100-80GB-HBM3"
    assert b.gpu_memory == 81559
    assert b.cpu == 127_910
    assert b.memory == 1056330584 // 1024  # KiB to MiB, rounded down
    assert state.closed == frozenset()


def test_hypernode_and_spine_labels_become_tier_domains_and_unlabelled_nodes_stand_alone() -> None:
    hyper = "caldera.io/hypernode"
    spine = "caldera.io/spine"
    state = read_nodes(
        [
            node("n1", labels={hyper: "h1", spine: "s1"}),
            node("n2", labels={hyper: "h1", spine: "s1"}),
            node("n3", labels={hyper: "h2", spine: "s1"}),
            node("n4", labels={hyper: "h3"}),
            node("n5"),
            node("n6"),
        ],
        SETTINGS,
    )
    tier1 = {n.name: n.tier1 for n in state.nodes}
    tier2 = {n.name: n.tier2 for n in state.nodes}
    assert tier1["n1"] == tier1["n2"] != tier1["n3"]
    assert len({tier1["n4"], tier1["n5"], tier1["n6"], tier1["n1"], tier1["n3"]}) == 5
    assert tier2["n1"] == tier2["n2"] == tier2["n3"]
    assert len({tier2["n1"], tier2["n4"], tier2["n5"], tier2["n6"]}) == 4


def test_label_names_are_settings() -> None:
    settings = KubeSettings(labels=NodeLabels(hypernode="example.com/leaf", gpu_model="gpu"))
    state = read_nodes(
        [
            node("x", labels={"example.com/leaf": "l", "gpu": "A100"}),
            node("y", labels={"example.com/leaf": "l"}),
        ],
        settings,
    )
    assert state.nodes[0].tier1 == state.nodes[1].tier1
    assert state.nodes[0].gpu_model == "A100"


def test_an_island_label_that_does_not_divide_the_gpus_is_ignored() -> None:
    state = read_nodes([node("x", labels={"caldera.io/nvlink-island": "3"})], SETTINGS)
    assert state.nodes[0].island_size == 8


def test_cordoned_and_not_ready_nodes_are_closed() -> None:
    state = read_nodes(
        [node("ok"), node("cordoned", unschedulable=True), node("sick", ready="False")], SETTINGS
    )
    assert state.closed == frozenset({"cordoned", "sick"})
    assert [n.name for n in state.nodes] == ["cordoned", "ok", "sick"]  # held, not dropped


def test_a_node_kubernetes_taints_for_its_conditions_is_closed() -> None:
    """Issue 40: the node lifecycle controller lifts `node.kubernetes.io/not-ready` some time
    after the node turns Ready; a pod pinned there meanwhile waited, with a FailedScheduling
    Event at every try of the scheduler. Other taints (a team's own, PreferNoSchedule) are
    the pods' tolerations' business."""

    def tainted(name: str, key: str, effect: str = "NoSchedule") -> dict[str, Any]:
        row = node(name)
        row["spec"]["taints"] = [{"key": key, "effect": effect}]
        return row

    state = read_nodes(
        [
            tainted("fresh", "node.kubernetes.io/not-ready"),
            tainted("gone", "node.kubernetes.io/unreachable", "NoExecute"),
            tainted("soft", "node.kubernetes.io/memory-pressure", "PreferNoSchedule"),
            tainted("teams", "example.com/dedicated"),
            node("ok"),
        ],
        SETTINGS,
    )
    assert state.closed == frozenset({"fresh", "gone"})
    assert state.sick == {}  # closed for now, not a sick GPU


def pod(
    name: str,
    node_name: str | None,
    containers: list[dict[str, str]],
    init: list[dict[str, str]] | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "x", "labels": labels or {}},
        "spec": {
            **({"nodeName": node_name} if node_name else {}),
            "containers": [{"resources": {"requests": c}} for c in containers],
            "initContainers": [{"resources": {"requests": c}} for c in init or []],
        },
        "status": {"phase": phase},
    }


def test_foreign_pods_hold_what_the_scheduler_would_count() -> None:
    usage = foreign_usage(
        [
            pod(
                "sum", "n1", [{"nvidia.com/gpu": "2", "cpu": "1"}, {"cpu": "500m", "memory": "1Gi"}]
            ),
            pod("init-peak", "n1", [{"cpu": "1"}], init=[{"cpu": "4", "nvidia.com/gpu": "1"}]),
            pod("done", "n1", [{"nvidia.com/gpu": "8"}], phase="Succeeded"),
            pod("unbound", None, [{"nvidia.com/gpu": "8"}], phase="Pending"),
            pod("other-node", "n9", [{"nvidia.com/gpu": "8"}]),
            pod("ours", "n1", [{"nvidia.com/gpu": "8"}], labels={MANAGED: "true"}),
            pod("cpu-only", "n2", [{"cpu": "250m"}]),
        ],
        ["n1", "n2"],
        SETTINGS,
    )
    assert usage == {
        "n1": Blocked(gpus=3, cpu=1500 + 4000, memory=1024, pods=2),  # a pod slot each
        "n2": Blocked(gpus=0, cpu=250, memory=0, pods=1),
    }


@dataclass(frozen=True)
class Job:
    """What the guard knows of the job a pod is removed for."""

    spec: JobSpec
    uid: str = "uid-job"


def job_of(type: str = "normal", namespace: str = "team", **labels: str) -> Job:
    spec = JobSpec(
        id=f"{namespace}/job",
        name="job",
        queue="team",
        type=JobType(type),
        submit=0,
        namespace=namespace,
        labels=labels,
    )
    return Job(spec)


def caldera_pod(
    labels: dict[str, str] | None = None,
    namespace: str = "team",
    owner: str = "uid-job",
    **spec: Any,
) -> dict[str, Any]:
    """A pod as caldera creates it for a normal job, with the given changes."""
    return {
        "metadata": {
            "name": "job-1-0",
            "namespace": namespace,
            "labels": {MANAGED: "true", JOB_TYPE: "normal", **(labels or {})},
            "ownerReferences": [{"kind": "TrainingJob", "name": "job", "uid": owner}],
        },
        "spec": {"priorityClassName": "normal-job", "priority": 100, **spec},
    }


GUARD_CASES = [
    ({}, job_of(), Purpose.EVICT, None),
    ({"labels": {MANAGED: "false"}}, None, Purpose.CLEANUP, "was not created by caldera"),
    ({"namespace": "kube-system"}, job_of(), Purpose.STOP, "is in kube-system"),
    ({"namespace": "kube-system"}, job_of(), Purpose.EVICT, "is in kube-system"),
    ({"owner": "someone-else"}, job_of(), Purpose.STOP, "does not belong to job team/job"),
    ({}, job_of("critical"), Purpose.EVICT, "of a critical job"),
    ({}, job_of(protected="true"), Purpose.EVICT, "of a protected job"),
    ({}, job_of(namespace="kube-system"), Purpose.EVICT, "of a system job"),
    ({}, None, Purpose.EVICT, "belongs to no job caldera knows"),
    ({"labels": {"protected": "true", PROTECTED: "true"}}, job_of(), Purpose.EVICT, None),
    ({"priority": 1000, "priorityClassName": "critical-job"}, job_of(), Purpose.EVICT, None),
    ({}, job_of("critical"), Purpose.STOP, None),
    ({}, job_of(protected="true"), Purpose.CLEANUP, None),
]


@pytest.mark.parametrize(
    ("change", "job", "purpose", "want"),
    GUARD_CASES,
    ids=[
        "a normal victim",
        "not caldera's",
        "kube-system, even to stop",
        "kube-system victim",
        "another owner's pod under the name",
        "critical job",
        "protected job",
        "system job",
        "no job",
        "labels a user wrote protect nothing",
        "a pod's priority fields protect nothing either",
        "a critical gang that broke may be stopped",
        "a protected job's leftovers may be cleaned",
    ],
)
def test_guard(change: dict[str, Any], job: Job | None, purpose: Purpose, want: str | None) -> None:
    got = refusal(caldera_pod(**change), purpose, job)
    if want is None:
        assert got is None
    else:
        assert got is not None and want in got
