"""Rendering: PriorityClasses from the one table, Volcano Queues, and started jobs' PodGroup +
pinned Pods — golden manifests for a hard-topology gang, a GPU share and a critical job.

Golden files live in tests/k8s/golden/. After an intended change, regenerate them with
CALDERA_UPDATE_GOLDEN=1 and review the diff like any other change.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from caldera.core import Nomination, PendingVictim, TaskPlacement
from caldera.k8s import (
    GpuShare,
    KubeSettings,
    Owner,
    RenderError,
    Workload,
    names,
    priority_classes,
    queue_from_volcano,
    render_start,
    task_pod,
    to_yaml,
    volcano_queue,
)
from caldera.model import (
    PRIORITY_CLASSES,
    Checkpointing,
    JobSpec,
    JobType,
    NodeGroup,
    Queue,
    QueueState,
    Resources,
    TimeWindow,
    TopologyMode,
    TopologySpec,
    expand_node_groups,
)
from caldera.trainingjob_api import (
    DESERVED,
    NOMINATION,
    PLACEMENT,
    PROTECTED,
    QUEUE_STATE,
    TIME_WINDOWS,
)

GOLDEN = Path(__file__).parent / "golden"
SETTINGS = KubeSettings(image="registry.example.com/train:v1")
NODES = expand_node_groups(
    [
        NodeGroup(
            "h100",
            count=4,
            gpus=8,
            gpu_model="H100",
            cpu=128_000,
            memory=1024 * 1024,
            nvlink_island=8,
            nodes_per_tier1=4,
            gpu_memory=81_559,
        ),
        NodeGroup(
            "l40s",
            count=1,
            gpus=4,
            gpu_model="L40S",
            cpu=64_000,
            memory=512 * 1024,
            gpu_memory=46_068,
        ),
    ]
)


def check_golden(name: str, objects: list[dict[str, Any]]) -> None:
    text = to_yaml(objects)
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("CALDERA_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}: run with CALDERA_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} differs from the rendering"


def whole_node(node: int, gpus: int = 8) -> TaskPlacement:
    return TaskPlacement(node, tuple(range(gpus)), 1000, 32_000, 256 * 1024)


# -- priority classes --------------------------------------------------------------------------


@pytest.mark.parametrize("job_type", list(JobType), ids=lambda t: t.value)
def test_priority_class_values_come_from_the_one_table(job_type: JobType) -> None:
    table = PRIORITY_CLASSES[job_type]
    rendered = {pc["metadata"]["name"]: pc for pc in priority_classes()}[table.name]
    assert rendered["apiVersion"] == "scheduling.k8s.io/v1"
    assert rendered["value"] == table.value
    assert rendered["preemptionPolicy"] == table.preemption_policy.value
    assert rendered["globalDefault"] is False


def test_there_are_exactly_four_classes_and_only_debug_never_preempts() -> None:
    classes = priority_classes()
    assert [pc["metadata"]["name"] for pc in classes] == [
        "critical-job",
        "large-job",
        "normal-job",
        "debug-job",
    ]
    never = [pc["metadata"]["name"] for pc in classes if pc["preemptionPolicy"] == "Never"]
    assert never == ["debug-job"]
    assert [pc["value"] for pc in classes] == [1000, 800, 100, 50]


# -- queues ------------------------------------------------------------------------------------

GiB = 1024

QUEUE_CASES = [
    pytest.param(
        Queue(
            "prod",
            weight=80,
            deserved=Resources(384_000, 0, 0),
            guarantee=Resources(256_000, 1_000_000, 4096 * GiB),
            capability=Resources(512_000, 0, 0),
            reclaimable=False,
        ),
        {
            "weight": 80,
            "reclaimable": False,
            "capability": {"nvidia.com/gpu": "512"},
            "deserved": {"cpu": "1000", "memory": "4096Gi", "nvidia.com/gpu": "384"},
            "guarantee": {"resource": {"cpu": "1000", "memory": "4096Gi", "nvidia.com/gpu": "256"}},
        },
        {QUEUE_STATE: "Open", DESERVED: '{"nvidia.com/gpu": "384"}'},
        id="quotas: guarantee nests under resource, deserved raised to it",
    ),
    pytest.param(
        Queue("serving", weight=40, guarantee=Resources(16_000, 0, 0), reclaimable=False),
        {
            "weight": 40,
            "reclaimable": False,
            "deserved": {"nvidia.com/gpu": "16"},
            "guarantee": {"resource": {"nvidia.com/gpu": "16"}},
        },
        {QUEUE_STATE: "Open", DESERVED: "{}"},
        id="a guarantee without deserved: Volcano 1.15's webhook wants deserved >= guarantee",
    ),
    pytest.param(
        Queue(
            "dev",
            weight=0,
            state=QueueState.CLOSED,
            time_windows=(TimeWindow(frozenset({1, 2, 3, 4, 5}), 9, 18),),
        ),
        {"weight": 1, "reclaimable": True},
        {QUEUE_STATE: "Closed", TIME_WINDOWS: '[{"days":[1,2,3,4,5],"hours":[9,18]}]'},
        id="closed queue with a window: state and window in annotations, weight at least 1",
    ),
    pytest.param(
        Queue("half", deserved=Resources(500, 500, 1536)),
        {
            "weight": 1,
            "reclaimable": True,
            "deserved": {"cpu": "500m", "memory": "1536Mi", "nvidia.com/gpu": "500m"},
        },
        {QUEUE_STATE: "Open"},
        id="fractions keep their exact quantities",
    ),
]


@pytest.mark.parametrize(("queue", "want_spec", "want_annotations"), QUEUE_CASES)
def test_volcano_queue(
    queue: Queue, want_spec: dict[str, Any], want_annotations: dict[str, str]
) -> None:
    rendered = volcano_queue(queue, SETTINGS)
    assert rendered["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert rendered["kind"] == "Queue"
    assert rendered["metadata"]["name"] == queue.name
    assert rendered["spec"] == want_spec
    assert rendered["metadata"]["annotations"] == want_annotations
    assert "state" not in rendered["spec"]  # not in Volcano's schema: pruned by the API server


@pytest.mark.parametrize(
    "queue",
    [p.values[0] for p in QUEUE_CASES if p.values[0].weight > 0],
    ids=["prod", "serving", "half"],
)
def test_a_rendered_queue_reads_back_as_the_same_queue(queue: Queue) -> None:
    assert queue_from_volcano(volcano_queue(queue, SETTINGS), SETTINGS) == queue


def test_a_closed_queue_with_windows_reads_back_with_them() -> None:
    queue = next(p.values[0] for p in QUEUE_CASES if p.values[0].name == "dev")
    back = queue_from_volcano(volcano_queue(queue, SETTINGS), SETTINGS)
    assert back.state is QueueState.CLOSED
    assert back.time_windows == queue.time_windows


# -- golden jobs -------------------------------------------------------------------------------


def test_golden_gang_with_hard_topology() -> None:
    spec = JobSpec(
        id="team-a/bert-ft",
        name="bert-ft",
        queue="team-a",
        type=JobType.LARGE,
        submit=0.0,
        tasks=4,
        gpu=8000,
        cpu=32_000,
        memory=256 * 1024,
        namespace="team-a",
        topology=TopologySpec(TopologyMode.HARD, 1),
        checkpoint=Checkpointing(3600, 60, True),
    )
    workload = Workload(
        command=("torchrun", "--nnodes=4", "--nproc_per_node=8", "train.py"),
        env={"NCCL_DEBUG": "INFO"},
        template={
            "metadata": {"labels": {"team": "nlp"}},
            "spec": {
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "trainer",
                        "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}],
                    }
                ],
                "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
            },
        },
    )
    nomination = Nomination(
        placement=tuple(whole_node(i) for i in range(4)),
        victims=("team-a/n0", "team-a/n1"),
        pending=(PendingVictim("team-a/n1"),),
        since=1_800_000_000.0,
    )
    objects = render_start(
        spec,
        workload,
        [whole_node(i) for i in range(4)],
        NODES,
        attempt=2,
        grace_period=120,
        settings=SETTINGS,
        owner=Owner("bert-ft", "uid-record"),
        started_under=nomination,
    )
    assert [o["kind"] for o in objects] == ["Service", "PodGroup", "Pod", "Pod", "Pod", "Pod"]
    check_golden("gang-hard-topology", objects)


def test_golden_gpu_share() -> None:
    spec = JobSpec(
        id="team-a/notebook",
        name="notebook",
        queue="team-a",
        type=JobType.DEBUG,
        submit=0.0,
        gpu=500,
        cpu=4000,
        memory=16 * 1024,
        namespace="team-a",
    )
    placement = [TaskPlacement(4, (1,), 500, 4000, 16 * 1024)]
    objects = render_start(
        spec, Workload(command=("jupyter", "lab")), placement, NODES, 1, 120, SETTINGS
    )
    assert [o["kind"] for o in objects] == ["PodGroup", "Pod"]
    check_golden("gpu-share", objects)


def test_golden_critical_job() -> None:
    spec = JobSpec(
        id="serving/chat",
        name="chat",
        queue="serving",
        type=JobType.CRITICAL,
        submit=0.0,
        tasks=2,
        gpu=1000,
        min_available=1,
        namespace="serving",
        labels={"protected": "true"},
    )
    placement = [TaskPlacement(0, (0,), 1000), TaskPlacement(1, (0,), 1000)]
    objects = render_start(
        spec, Workload(image="registry.example.com/chat:3"), placement, NODES, 1, 120, SETTINGS
    )
    check_golden("critical-job", objects)


# -- the parts the goldens rely on -------------------------------------------------------------


def gang_pods() -> list[dict[str, Any]]:
    path = GOLDEN / "gang-hard-topology.yaml"
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d["kind"] == "Pod"]


def test_each_task_is_pinned_to_its_decided_node_by_required_affinity() -> None:
    pods = gang_pods()
    pinned = [
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        for p in pods
    ]
    assert pinned == [
        [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [f"h100-{i}"]}]}]
        for i in range(4)
    ]
    assert all("nodeName" not in p["spec"] for p in pods)  # the scheduler binds the gang
    placements = [json.loads(p["metadata"]["annotations"][PLACEMENT]) for p in pods]
    assert [pl["node"] for pl in placements] == [f"h100-{i}" for i in range(4)]
    assert all(pl["devices"] == list(range(8)) for pl in placements)


def test_gang_pods_carry_the_gang_the_grace_period_and_rank_variables() -> None:
    pods = gang_pods()
    for rank, pod in enumerate(pods):
        spec = pod["spec"]
        assert spec["schedulerName"] == "volcano"
        assert spec["priorityClassName"] == "large-job"
        assert spec["terminationGracePeriodSeconds"] == 120
        assert spec["restartPolicy"] == "Never"
        assert pod["metadata"]["annotations"][names.GROUP_NAME] == "bert-ft-2"
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env["RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "4"
        assert env["MASTER_ADDR"] == "bert-ft-0.bert-ft"
        assert env["CALDERA_JOB_ID"] == "team-a/bert-ft"
        assert env["CALDERA_CHECKPOINT_DIR"] == "/checkpoints/team-a/bert-ft"
        assert env["NCCL_DEBUG"] == "INFO"
        resources = spec["containers"][0]["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == "8"
        assert resources["limits"]["nvidia.com/gpu"] == "8"
        assert spec["tolerations"][0]["key"] == "gpu"  # from the template
        assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-record"


def test_pod_group_says_gang_size_queue_class_and_topology() -> None:
    path = GOLDEN / "gang-hard-topology.yaml"
    group = next(
        d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d["kind"] == "PodGroup"
    )
    assert group["spec"] == {
        "minMember": 4,
        "queue": "team-a",
        "priorityClassName": "large-job",
        "minResources": {"cpu": "128", "memory": "1024Gi", "nvidia.com/gpu": "32"},
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
    }
    nomination = json.loads(group["metadata"]["annotations"][NOMINATION])
    assert nomination["victims"] == ["team-a/n0", "team-a/n1"]
    assert [p["node"] for p in nomination["placement"]] == [f"h100-{i}" for i in range(4)]


def test_critical_and_protected_jobs_are_marked_not_preemptable_for_volcano_too() -> None:
    docs = list(yaml.safe_load_all((GOLDEN / "critical-job.yaml").read_text(encoding="utf-8")))
    group = next(d for d in docs if d["kind"] == "PodGroup")
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert "preemptable" not in group["spec"]  # no Volcano PodGroup CRD has this field
    assert group["metadata"]["annotations"][names.VOLCANO_PREEMPTABLE] == "false"
    assert group["spec"]["minMember"] == 1
    assert all(p["metadata"]["annotations"][names.VOLCANO_PREEMPTABLE] == "false" for p in pods)
    assert all(p["metadata"]["labels"][PROTECTED] == "true" for p in pods)
    assert all(p["spec"]["priorityClassName"] == "critical-job" for p in pods)


@pytest.mark.parametrize(
    ("share", "want"),
    [
        (GpuShare("volcano.sh/gpu-memory", "mib"), {"volcano.sh/gpu-memory": "23034"}),
        (
            GpuShare("nvidia.com/gpumem-percentage", "percent"),
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"},
        ),
        (GpuShare("caldera.io/gpu-milli", "milli"), {"caldera.io/gpu-milli": "500"}),
    ],
    ids=["volcano gpu-memory", "hami percent", "milli"],
)
def test_a_gpu_share_is_requested_in_the_configured_unit(
    share: GpuShare, want: dict[str, str]
) -> None:
    spec = JobSpec(
        id="t/s", name="s", queue="q", type=JobType.DEBUG, submit=0, gpu=500, namespace="t"
    )
    pod = task_pod(
        spec,
        Workload(),
        0,
        TaskPlacement(4, (0,), 500),
        NODES,
        1,
        0,
        120,
        replace(SETTINGS, gpu_share=share),
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == want
    assert resources["limits"] == want
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["CALDERA_GPU_FRACTION"] == "0.5"
    assert env["MASTER_ADDR"] == "127.0.0.1"


def test_a_share_on_a_node_without_gpu_memory_is_refused_in_one_line() -> None:
    nodes = expand_node_groups([NodeGroup("x", count=1, gpus=1)])
    spec = JobSpec(id="t/s", name="s", queue="q", type=JobType.DEBUG, submit=0, gpu=250)
    with pytest.raises(RenderError, match="no GPU memory label") as error:
        task_pod(spec, Workload(), 0, TaskPlacement(0, (0,), 250), nodes, 1, 0, 120, SETTINGS)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("template", "want"),
    [
        ({"spec": {"nodeName": "h100-3"}}, "nodeName is set by caldera"),
        ({"spec": {"nodeSelector": {"a": "b"}}}, "nodeSelector is set by caldera"),
        ({"spec": {"schedulerName": "default-scheduler"}}, "schedulerName is set by caldera"),
        ({"spec": {"priorityClassName": "critical-job"}}, "priorityClassName is set by caldera"),
        ({"spec": {"affinity": {"nodeAffinity": {}}}}, "nodeAffinity is set by caldera"),
        ({"kind": "Pod"}, "unknown key 'kind'"),
    ],
    ids=[
        "nodeName",
        "nodeSelector",
        "schedulerName",
        "priorityClassName",
        "nodeAffinity",
        "not a template",
    ],
)
def test_a_template_may_not_decide_scheduling(template: dict[str, Any], want: str) -> None:
    with pytest.raises(RenderError, match=want):
        Workload(image="i", template=template).check(SETTINGS)


def test_no_image_anywhere_is_refused() -> None:
    with pytest.raises(RenderError, match="no image"):
        Workload().check(replace(SETTINGS, image=""))


def test_caldera_variables_win_over_user_env_but_user_env_is_kept() -> None:
    spec = JobSpec(id="t/j", name="j", queue="q", type=JobType.NORMAL, submit=0, namespace="t")
    workload = Workload(
        env={"RANK": "7", "MY_VAR": "1"},
        template={
            "spec": {
                "containers": [
                    {
                        "env": [
                            {"name": "FROM_TEMPLATE", "value": "x"},
                            {
                                "name": "POD_IP",
                                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                            },
                        ]
                    }
                ]
            }
        },
    )
    pod = task_pod(spec, workload, 0, TaskPlacement(0, (0,), 1000), NODES, 1, 0, 120, SETTINGS)
    env = pod["spec"]["containers"][0]["env"]
    values = {e["name"]: e.get("value") for e in env}
    assert values["RANK"] == "0"
    assert values["MY_VAR"] == "1"
    assert values["FROM_TEMPLATE"] == "x"
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in env
