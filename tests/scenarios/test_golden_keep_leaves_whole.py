"""`keep_leaves_whole` (core/packing.py, issue 37): bounds derived in keep-leaves-whole.yaml."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

from caldera.sim import load_scenario, simulate

SCENARIO = Path(__file__).resolve().parent / "keep-leaves-whole.yaml"


@functools.cache
def run(keep: bool) -> dict[str, Any]:
    data = load_scenario(SCENARIO)
    return simulate(replace(data, config=replace(data.config, keep_leaves_whole=keep)))


def starts(keep: bool) -> dict[str, tuple[float, dict[str, int]]]:
    return {e["job"]: (e["t"], e["placement"]) for e in run(keep)["events"] if e["kind"] == "start"}


def test_the_scenario_turns_the_rule_on() -> None:
    assert load_scenario(SCENARIO).config.keep_leaves_whole


def test_a_critical_job_packs_beside_a_running_large_gang() -> None:
    assert starts(True)["c"] == (10.0, {"n-1": 4})  # leaf 0, with `gang`
    assert starts(False)["c"] == (10.0, {"n-2": 4})  # binpacking alone: leaf 1


def test_the_leaf_left_whole_starts_a_hard_gang_at_once() -> None:
    evicts = [
        (e["t"], e["job"], e["preemptor"]) for e in run(True)["events"] if e["kind"] == "evict"
    ]
    assert evicts == [(20.0, "r1", "whole")]
    assert starts(True)["whole"] == (50.0, {"n-2": 8, "n-3": 8})


def test_without_the_rule_the_hard_gang_waits_for_the_other_gang_to_end() -> None:
    assert starts(False)["whole"] == (20000.0, {"n-0": 8, "n-1": 8})
    assert all(e["kind"] != "evict" for e in run(False)["events"])


def test_nothing_is_lost_either_way() -> None:
    for keep in (True, False):
        assert all(j["lost_gpu_seconds"] == 0.0 for j in run(keep)["jobs"])
