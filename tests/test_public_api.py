"""The public API, pinned (STYLE: "the public API is exported from the package root and a test
pins it"). Adding a name is a deliberate change: update the list here in the same commit;
removing or renaming one breaks users and needs a reason in the commit message."""

from __future__ import annotations

import importlib

import pytest

CORE = [
    "Admission",
    "CALDERA",
    "CapacityError",
    "DEFAULT_SLO",
    "Decisions",
    "Evict",
    "EvictReason",
    "Hold",
    "JobIndex",
    "JobView",
    "Nominate",
    "Nomination",
    "PendingVictim",
    "Policy",
    "PolicyConfig",
    "Release",
    "Room",
    "SearchMemo",
    "Snapshot",
    "Start",
    "TaskPlacement",
    "Throttle",
    "ThrottleOff",
    "ThrottleOn",
    "UNIX_WEEK_OFFSET",
    "WaitReason",
    "Waiting",
    "WaitingReasons",
    "admit",
    "could_ever_fit",
    "effective_weight",
    "run",
]

MODEL = [
    "CRITICAL_PRIORITY",
    "Checkpointing",
    "ESCALATION_CEILING",
    "GPU_MILLI",
    "IllegalTransition",
    "JobSpec",
    "MAX_TIME_SHARING",
    "MigProfile",
    "JobState",
    "JobType",
    "Node",
    "NodeGroup",
    "PRIORITY_CLASSES",
    "PreemptionPolicy",
    "PriorityClass",
    "Queue",
    "QueueState",
    "Resources",
    "TRANSITIONS",
    "TimeWindow",
    "TopologyMode",
    "TopologySpec",
    "check_transition",
    "deserved_shares",
    "expand_node_groups",
    "parse_cpu",
    "parse_gpu_milli",
    "parse_memory_mib",
    "parse_profile",
    "priority_class",
    "shares_time",
    "slice_milli",
    "time_share",
]


@pytest.mark.parametrize(
    ("module", "want"), [("caldera.core", CORE), ("caldera.model", MODEL)], ids=["core", "model"]
)
def test_public_api_is_pinned(module: str, want: list[str]) -> None:
    package = importlib.import_module(module)
    assert sorted(package.__all__) == sorted(want)
    assert len(set(package.__all__)) == len(package.__all__), "a name is exported twice"
    for name in package.__all__:
        assert hasattr(package, name), f"{module}.{name} is in __all__ but missing"


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from caldera.core import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(CORE)


def test_the_job_type_table_is_seed_000() -> None:
    """DESIGN §2: the one table mapping job types to priority classes."""
    from caldera.model import PRIORITY_CLASSES, JobType, PreemptionPolicy

    table = {t.value: (c.name, c.value, c.preemption_policy) for t, c in PRIORITY_CLASSES.items()}
    assert table == {
        "critical": ("critical-job", 1000, PreemptionPolicy.PREEMPT_LOWER),
        "large-job": ("large-job", 800, PreemptionPolicy.PREEMPT_LOWER),
        "normal": ("normal-job", 100, PreemptionPolicy.PREEMPT_LOWER),
        "debug": ("debug-job", 50, PreemptionPolicy.NEVER),
    }
    assert set(JobType) == set(PRIORITY_CLASSES)
