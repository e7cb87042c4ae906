"""GPUs as they really are, on Kubernetes (docs/gpus.md): MIG slices from the NVIDIA device
plugin's mixed strategy, pods asking for one, and GPU health from the usual agents (node
conditions and taints)."""

from __future__ import annotations

from typing import Any

import pytest

from caldera.core import TaskPlacement
from caldera.k8s import KubeSettings, read_nodes
from caldera.k8s.effects.render import Workload, mig_resource, pod_group, task_pod
from caldera.model import JobSpec, JobType

SETTINGS = KubeSettings()


def node(
    name: str,
    allocatable: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    conditions: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", **(allocatable or {})},
            "conditions": [{"type": "Ready", "status": "True"}, *(conditions or [])],
        },
    }


def test_mig_slices_come_from_the_mixed_strategy_resources() -> None:
    mixed = {
        "nvidia.com/gpu": "4",
        "nvidia.com/mig-1g.10gb": "14",
        "nvidia.com/mig-3g.40gb": "2",
        "nvidia.com/mig-bogus": "3",  # not a profile: not caldera's to offer
    }
    (a100,) = read_nodes([node("a100", mixed)], SETTINGS).nodes
    assert (a100.gpus, a100.island_size) == (4, 4)
    assert a100.slices == ("1g.10gb",) * 14 + ("3g.40gb",) * 2
    assert a100.capacity_milli == 4000 + 14 * 142 + 2 * 428


def test_a_pod_asks_for_one_slice_of_its_profile() -> None:
    (a100,) = read_nodes([node("a100", {"nvidia.com/mig-3g.40gb": "2"})], SETTINGS).nodes
    spec = JobSpec("j", "j", "inference", JobType.NORMAL, 0.0, tasks=2, gpu_profile="3g.40gb")
    placement = TaskPlacement(0, (a100.gpus,), 428)  # the first slice
    pod = task_pod(spec, Workload(image="i"), 0, placement, (a100,), 1, 0, 30, SETTINGS)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    group = pod_group(spec, 1, settings=SETTINGS)
    assert group["spec"]["minResources"] == {"nvidia.com/mig-3g.40gb": "2"}
    assert mig_resource("1g.10gb", "nvidia.com/gpu") == "nvidia.com/mig-1g.10gb"


@pytest.mark.parametrize(
    ("taints", "conditions", "want"),
    [
        ([], [], ""),
        (
            [{"key": "nvidia.com/gpu-error", "value": "fatal", "effect": "NoSchedule"}],
            [],
            "taint nvidia.com/gpu-error=fatal:NoSchedule",
        ),
        ([{"key": "nvidia.com/gpu-error", "effect": "PreferNoSchedule"}], [], ""),
        ([{"key": "example.com/maintenance", "effect": "NoSchedule"}], [], ""),
        (
            [],
            [{"type": "GpuXidError", "status": "True", "reason": "XID 79"}],
            "condition GpuXidError (XID 79)",
        ),
        ([], [{"type": "GpuXidError", "status": "False"}], ""),
        ([], [{"type": "MemoryPressure", "status": "True"}], ""),
    ],
    ids=["healthy", "taint", "soft-taint", "other-taint", "condition", "cleared", "other"],
)
def test_gpu_health_from_node_conditions_and_taints(
    taints: list[dict[str, str]], conditions: list[dict[str, str]], want: str
) -> None:
    state = read_nodes([node("n", {"nvidia.com/gpu": "8"}, taints, conditions)], SETTINGS)
    assert state.sick.get("n", "") == want
    assert ("n" in state.closed) == bool(want)  # a sick node starts nothing new
    strict = read_nodes(
        [node("n", {"nvidia.com/gpu": "8"}, taints, conditions)],
        SETTINGS,
        health_taints=(),
        health_conditions=(),
    )
    assert not strict.sick and not strict.closed
