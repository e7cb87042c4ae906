"""The domain model's small pieces: quantities, node expansion, time windows (DESIGN §2)."""

from __future__ import annotations

import pytest

from caldera.model import (
    JobSpec,
    JobType,
    NodeGroup,
    TimeWindow,
    expand_node_groups,
    parse_cpu,
    parse_gpu_milli,
    parse_memory_mib,
)

H = 3600.0
DAY = 24 * H  # t = 0 is Monday 00:00 UTC


@pytest.mark.parametrize(
    ("text", "want"),
    [("2048Gi", 2048 * 1024), ("512Mi", 512), ("1Ti", 1024 * 1024), (64, 64), ("1G", 954)],
    ids=["Gi", "Mi", "Ti", "bare number is MiB", "G is 10^9 bytes, rounded up to MiB"],
)
def test_parse_memory(text: str | int, want: int) -> None:
    assert parse_memory_mib(text) == want


@pytest.mark.parametrize("bad", ["lots", "-1Gi", "12XB", True, -5])
def test_parse_memory_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_memory_mib(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "want"), [("500m", 500), (4, 4000), ("2.5", 2500)])
def test_parse_cpu(text: str | int, want: int) -> None:
    assert parse_cpu(text) == want


@pytest.mark.parametrize(("gpus", "want"), [(1, 1000), (8, 8000), (0.5, 500), (0.25, 250)])
def test_parse_gpu(gpus: float, want: int) -> None:
    assert parse_gpu_milli(gpus) == want


@pytest.mark.parametrize("bad", [1.5, -1, float("inf")])
def test_parse_gpu_refuses_fractions_above_one(bad: float) -> None:
    with pytest.raises(ValueError):
        parse_gpu_milli(bad)


def test_job_spec_rules() -> None:
    assert JobSpec("j", "j", "q", JobType.NORMAL, 0, tasks=4).min_available == 4  # default: all
    with pytest.raises(ValueError):
        JobSpec("j", "j", "q", JobType.NORMAL, 0, tasks=2, min_available=3)
    with pytest.raises(ValueError):
        JobSpec("j", "j", "q", JobType.NORMAL, 0, tasks=2, gpu=500)  # shares: one task only
    with pytest.raises(ValueError):
        JobSpec("j", "j", "q", JobType.NORMAL, 0, gpu=1500)
    spec = JobSpec("j", "j", "q", JobType.LARGE, 0, tasks=4, gpu=8000, min_available=2)
    assert (spec.priority, spec.gang_request.gpu, spec.full_request.gpu) == (800, 16000, 32000)


def test_node_groups_number_topology_domains_across_groups() -> None:
    nodes = expand_node_groups(
        [
            NodeGroup("a", count=4, gpus=8, nvlink_island=4, nodes_per_tier1=2, tier1_per_tier2=1),
            NodeGroup("b", count=3, gpus=4),
        ]
    )
    assert [n.name for n in nodes] == ["a-0", "a-1", "a-2", "a-3", "b-0", "b-1", "b-2"]
    assert [n.tier1 for n in nodes] == [0, 0, 1, 1, 2, 2, 2]  # domains never span groups
    assert [n.tier2 for n in nodes] == [0, 0, 1, 1, 2, 2, 2]
    assert [n.island_size for n in nodes] == [4, 4, 4, 4, 4, 4, 4]  # 0: the whole node
    assert nodes[0].island_of(5) == 1


def test_node_groups_refuse_a_bad_island_and_duplicate_names() -> None:
    with pytest.raises(ValueError, match="nvlink_island"):
        expand_node_groups([NodeGroup("a", count=1, gpus=8, nvlink_island=3)])
    with pytest.raises(ValueError, match="duplicate node name"):
        expand_node_groups([NodeGroup("a", count=1, gpus=8), NodeGroup("a", count=1, gpus=8)])


WORKDAYS = TimeWindow(frozenset({1, 2, 3, 4, 5}), 9, 18)
SUNDAY_NIGHT = TimeWindow(frozenset({7}), 22, 6)  # Sunday 22:00 to Monday 06:00


@pytest.mark.parametrize(
    ("window", "t", "inside"),
    [
        (WORKDAYS, 9 * H, True),
        (WORKDAYS, 18 * H, False),  # [start, end)
        (WORKDAYS, 8.99 * H, False),
        (WORKDAYS, 5 * DAY + 10 * H, False),  # Saturday
        (WORKDAYS, 7 * DAY + 10 * H, True),  # next Monday
        (SUNDAY_NIGHT, 6 * DAY + 23 * H, True),  # Sunday 23:00
        (SUNDAY_NIGHT, 7 * DAY + 3 * H, True),  # Monday 03:00 belongs to Sunday's night
        (SUNDAY_NIGHT, 3 * H, True),  # the first Monday too (the week wraps)
        (SUNDAY_NIGHT, 7 * DAY + 6 * H, False),
        (SUNDAY_NIGHT, DAY + 3 * H, False),  # Tuesday 03:00: Monday night is not in it
    ],
)
def test_time_window_contains(window: TimeWindow, t: float, inside: bool) -> None:
    assert window.contains(t) is inside


@pytest.mark.parametrize(
    ("window", "t", "edge"),
    [
        (WORKDAYS, 0, 9 * H),  # Monday 00:00 → opens 09:00
        (WORKDAYS, 12 * H, 18 * H),  # inside → closes 18:00
        (WORKDAYS, 4 * DAY + 19 * H, 7 * DAY + 9 * H),  # Friday evening → Monday 09:00
        (SUNDAY_NIGHT, 12 * H, 6 * DAY + 22 * H),
        (SUNDAY_NIGHT, 6 * DAY + 23 * H, 7 * DAY + 6 * H),
    ],
)
def test_time_window_next_edge(window: TimeWindow, t: float, edge: float) -> None:
    assert window.next_edge(t) == edge
    assert window.contains(edge) is not window.contains(t)
