"""A hard-topology gang no single domain of its tier can hold is refused on arrival: it would
otherwise wait forever (and every cycle would search victims for it)."""

from __future__ import annotations

import pytest

from caldera.core import admit
from caldera.model import (
    JobSpec,
    JobState,
    JobType,
    NodeGroup,
    Queue,
    TopologyMode,
    TopologySpec,
    expand_node_groups,
)

# Two tier-1 domains of 2 nodes x 8 GPUs (16 GPUs each), one tier-2 domain of 32 GPUs.
NODES = expand_node_groups([NodeGroup("n", 4, 8, nodes_per_tier1=2, tier1_per_tier2=2)])
QUEUES = {"q": Queue("q")}


def _gang(tasks: int, mode: TopologyMode, tier: int) -> JobSpec:
    return JobSpec(
        id="g",
        name="g",
        queue="q",
        type=JobType.LARGE,
        submit=0,
        tasks=tasks,
        gpu=8000,
        topology=TopologySpec(mode, tier),
    )


@pytest.mark.parametrize(
    ("tasks", "mode", "tier", "want"),
    [
        (2, TopologyMode.HARD, 1, JobState.PENDING),  # 16 GPUs: one leaf holds it
        (3, TopologyMode.HARD, 1, JobState.REJECTED),  # 24 GPUs: no leaf is that big
        (3, TopologyMode.HARD, 2, JobState.PENDING),  # the spine holds 32
        (3, TopologyMode.SOFT, 1, JobState.PENDING),  # soft: may spread
        (5, TopologyMode.SOFT, 1, JobState.REJECTED),  # 40 GPUs: not in the cluster at all
    ],
    ids=["leaf-fits", "leaf-too-small", "spine-fits", "soft-spreads", "cluster-too-small"],
)
def test_hard_gangs_must_fit_one_domain(
    tasks: int, mode: TopologyMode, tier: int, want: JobState
) -> None:
    admission = admit(_gang(tasks, mode, tier), QUEUES, {}, 0.0, NODES)
    assert admission.state is want
    if want is JobState.REJECTED:
        assert admission.reason
