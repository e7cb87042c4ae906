"""`pack_with_victims` (core/defrag.py, issue 37): bounds derived in pack-with-victims.yaml."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

from caldera.sim import load_scenario, simulate

HERE = Path(__file__).resolve().parent
PACKS = "pack-with-victims.yaml"
LOSSY = "pack-with-victims-lossy.yaml"


@functools.cache
def run(name: str, on: bool) -> dict[str, Any]:
    data = load_scenario(HERE / name)
    return simulate(replace(data, config=replace(data.config, pack_with_victims=on)))


def starts(name: str, on: bool) -> dict[str, tuple[float, dict[str, int]]]:
    """Each job's first start: (time, placement)."""
    first: dict[str, tuple[float, dict[str, int]]] = {}
    for e in run(name, on)["events"]:
        if e["kind"] == "start":
            first.setdefault(e["job"], (e["t"], e["placement"]))
    return first


def evictions(name: str, on: bool) -> list[tuple[float, str, str]]:
    return [
        (e["t"], e["job"], e["preemptor"]) for e in run(name, on)["events"] if e["kind"] == "evict"
    ]


def test_both_scenarios_turn_the_rule_on() -> None:
    assert load_scenario(HERE / PACKS).config.pack_with_victims
    assert load_scenario(HERE / LOSSY).config.pack_with_victims


def test_a_critical_job_takes_a_lossless_victim_beside_critical_work() -> None:
    assert evictions(PACKS, True)[0] == (10.0, "r2", "c2")
    assert starts(PACKS, True)["c2"] == (40.0, {"n-1": 4})  # leaf 0, inside its 60 s SLO


def test_the_leaf_kept_free_of_critical_work_starts_a_hard_gang() -> None:
    assert evictions(PACKS, True)[1] == (20.0, "r3", "whole")
    assert starts(PACKS, True)["whole"] == (50.0, {"n-2": 8, "n-3": 8})


def test_without_the_rule_the_critical_job_opens_the_other_leaf() -> None:
    assert starts(PACKS, False)["c2"] == (10.0, {"n-2": 4})
    assert evictions(PACKS, False) == []
    assert "whole" not in starts(PACKS, False)  # both leaves hold critical work to the end


def test_victims_that_would_lose_work_leave_the_free_room_to_the_critical_job() -> None:
    assert starts(LOSSY, True)["c2"] == (10.0, {"n-2": 4})
    assert evictions(LOSSY, True) == []


def test_nothing_is_lost() -> None:
    for name in (PACKS, LOSSY):
        for on in (True, False):
            assert all(j["lost_gpu_seconds"] == 0.0 for j in run(name, on)["jobs"])
            assert run(name, on)["metrics"]["sla_attainment"]["critical"] == 1.0
