"""Compressed time (caldera.replay.compress): what is divided, what is rounded, what is refused,
and that a policy without timers predicts the same thing at any compression."""

from __future__ import annotations

from pathlib import Path

import pytest

from caldera.errors import ScenarioError
from caldera.replay.compress import compress, compressed_grace
from caldera.replay.fidelity import predict
from caldera.sim import load_scenario, parse_scenario

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "examples"


@pytest.mark.parametrize(
    ("grace", "factor", "expected"),
    [(120, 60, 2), (30, 60, 1), (30, 30, 1), (30, 20, 2), (120, 1, 120), (0, 60, 1)],
)
def test_grace_periods_round_up_to_whole_seconds_at_least_one(
    grace: float, factor: float, expected: float
) -> None:
    assert compressed_grace(grace, factor) == expected


def test_every_duration_and_timer_is_divided() -> None:
    scenario = load_scenario(SHARED / "mixed-small.yaml")
    fast = compress(scenario, 60)
    before = {s.spec.name: s.spec for s in scenario.submissions}
    for submission in fast.submissions:
        spec, old = submission.spec, before[submission.spec.name]
        assert spec.submit == old.submit / 60
        assert spec.duration == (old.duration / 60 if old.duration else old.duration)
        if old.checkpoint.interval:
            assert spec.checkpoint.interval == old.checkpoint.interval / 60
        assert spec.checkpoint.cost == old.checkpoint.cost / 60
    assert fast.until == scenario.until / 60
    config, old_config = fast.config, scenario.config
    assert config.grace_period == 2  # 120 s / 60
    assert config.throttle_timeout == old_config.throttle_timeout / 60
    assert config.slo["critical"] == old_config.slo["critical"] / 60
    assert fast.nodes == scenario.nodes and fast.queues == scenario.queues


def test_a_fraction_of_a_gpu_asks_for_a_whole_one() -> None:
    scenario = load_scenario(SHARED / "mixed-small.yaml")
    notebook = next(s.spec for s in compress(scenario, 10).submissions if s.spec.name == "notebook")
    assert notebook.gpu == 1000


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"queues": [{"name": "q", "time_windows": [{"hours": [8, 18]}]}]}, "time windows"),
        ({"queues": [{"name": "q", "time_sharing": 2}]}, "time-sharing"),
    ],
)
def test_what_has_no_kwok_counterpart_is_refused_in_one_line(
    change: dict[str, object], message: str
) -> None:
    data = {
        "cluster": {"nodes": [{"prefix": "g", "count": 1, "gpus": 8}]},
        "queues": [{"name": "q"}],
        "jobs": [{"name": "a", "queue": "q", "type": "normal", "submit": 0, "duration": 60}],
        **change,
    }
    with pytest.raises(ScenarioError, match=message):
        compress(parse_scenario(data), 60)
    with pytest.raises(ScenarioError, match="at least 1"):
        compress(parse_scenario(data | {"queues": [{"name": "q"}]}), 0.5)


@pytest.mark.parametrize("factor", [2, 60])
def test_fifo_predicts_the_same_run_at_any_compression(factor: float) -> None:
    """fifo reads no timer: compressed by any factor and measured back in scenario seconds,
    it starts and ends every job at the same scenario time."""
    scenario = load_scenario(SHARED / "mixed-small.yaml")
    plain = predict(scenario, "fifo", 1)
    fast = predict(scenario, "fifo", factor)
    assert fast.start_order == plain.start_order

    def times(p: object) -> dict[str, tuple[float | None, float | None]]:
        return {j["name"]: (j["start"], j["end"]) for j in p.result["jobs"]}  # type: ignore[attr-defined]

    for name, (start, end) in times(plain).items():
        got = times(fast)[name]
        assert got[0] == pytest.approx(start) and got[1] == pytest.approx(end), name
