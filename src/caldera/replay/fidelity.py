"""The simulator's prediction for a replay, and how far a replay is from it.

`predict(scenario, policy, factor)` simulates the *compressed* scenario — the very job list,
timers and grace periods the replay ran — and measures it with the replay's own measurement
(caldera.replay.measure), so that the only differences left are the runtime's. `compare(a, b)`
says how far two runs of one scenario are apart:

- start order: the jobs in the order their gangs first started; the share of job pairs both
  runs order alike (1.0 = the same order; Kendall's tau distance is one minus it) and the first
  place where they differ;
- victims: which jobs were evicted, and how often, in each run (a multiset), and the
  difference between the two;
- start times: per job started in both, |start in a − start in b| in scenario seconds (mean,
  p95, max);
- the seeds' table rows side by side, with the absolute difference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from caldera.config import Scenario
from caldera.metrics_util import percentile
from caldera.replay.compress import compress
from caldera.replay.manifests import k8s_names
from caldera.replay.measure import from_simulation
from caldera.report.summary import summarize
from caldera.sim import Simulator

__all__ = ["Fidelity", "Prediction", "compare", "predict"]


@dataclass
class Prediction:
    """The simulator's run of the compressed scenario, measured as a replay is."""

    policy: str
    result: dict[str, Any]
    series: list[tuple[float, float]]
    start_order: list[str]
    victims: list[str]
    wall_seconds: float = 0.0


def predict(scenario: Scenario, policy: str, factor: float, label: str | None = None) -> Prediction:
    import time

    began = time.perf_counter()
    variant = compress(scenario.with_policy(policy), factor)
    simulator = Simulator(variant).run()
    result = simulator.result()
    specs = [s.spec for s in variant.submissions if s.invalid is None]
    names = k8s_names(specs)
    by_name = {names[s.id]: s for s in specs}
    capacity = sum(n.gpus for n in variant.nodes) * 1000
    slo = scenario.with_policy(policy).config.slo
    timeline = from_simulation(
        result, by_name, capacity, slo, variant.warmup, simulator.now, rename=names
    )
    measured = timeline.result(label or f"sim: {policy}", factor)
    series = measured.pop("series")
    order: list[str] = []
    victims: list[str] = []
    for event in result["events"]:
        name = names.get(event.get("job") or "")
        if name is None:
            continue
        if event["kind"] == "start" and name not in order:
            order.append(name)
        elif event["kind"] == "evict" and event.get("reason") != "cancel":
            victims.append(name)
    return Prediction(
        policy, measured, series, order, victims, wall_seconds=time.perf_counter() - began
    )


@dataclass
class Fidelity:
    """How far run `b` is from run `a` (both in scenario seconds)."""

    a: str
    b: str
    order_agreement: float | None  # share of concordant pairs of jobs started in both
    first_difference: int | None  # index in a's start order where b first differs
    same_order: bool
    victims_a: dict[str, int]
    victims_b: dict[str, int]
    victims_only_a: dict[str, int]
    victims_only_b: dict[str, int]
    start_delta: dict[str, float | None]
    rows: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def same_victims(self) -> bool:
        return not self.victims_only_a and not self.victims_only_b

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "same_start_order": self.same_order,
            "start_order_agreement": self.order_agreement,
            "first_difference": self.first_difference,
            "same_victims": self.same_victims,
            "victims": {"a": self.victims_a, "b": self.victims_b},
            "victims_only_in_a": self.victims_only_a,
            "victims_only_in_b": self.victims_only_b,
            "start_delta_seconds": self.start_delta,
            "rows": {key: {"a": a, "b": b} for key, (a, b) in self.rows.items()},
        }


def _agreement(a: Sequence[str], b: Sequence[str]) -> float | None:
    both = [job for job in a if job in set(b)]
    if len(both) < 2:
        return None
    where = {job: i for i, job in enumerate(b)}
    pairs = list(combinations(both, 2))  # in a's order
    concordant = sum(1 for x, y in pairs if where[x] < where[y])
    return round(concordant / len(pairs), 4)


def compare(
    a_label: str,
    a_result: dict[str, Any],
    a_order: Sequence[str],
    a_victims: Sequence[str],
    b_label: str,
    b_result: dict[str, Any],
    b_order: Sequence[str],
    b_victims: Sequence[str],
) -> Fidelity:
    first = next(
        (i for i, (x, y) in enumerate(zip(a_order, b_order, strict=False)) if x != y),
        None if len(a_order) == len(b_order) else min(len(a_order), len(b_order)),
    )
    va, vb = Counter(a_victims), Counter(b_victims)
    starts_a = {j["name"]: j["start"] for j in a_result["jobs"] if j["start"] is not None}
    starts_b = {j["name"]: j["start"] for j in b_result["jobs"] if j["start"] is not None}
    deltas = sorted(abs(starts_a[n] - starts_b[n]) for n in starts_a.keys() & starts_b.keys())
    summary_a, summary_b = summarize(a_result), summarize(b_result)
    return Fidelity(
        a=a_label,
        b=b_label,
        order_agreement=_agreement(a_order, b_order),
        first_difference=first,
        same_order=list(a_order) == list(b_order),
        victims_a=dict(sorted(va.items())),
        victims_b=dict(sorted(vb.items())),
        victims_only_a=dict(sorted((va - vb).items())),
        victims_only_b=dict(sorted((vb - va).items())),
        start_delta={
            "jobs": float(len(deltas)),
            "mean": round(sum(deltas) / len(deltas), 1) if deltas else None,
            "p95": round(percentile(deltas, 0.95), 1) if deltas else None,
            "max": round(deltas[-1], 1) if deltas else None,
        },
        rows={key: (summary_a[key], summary_b[key]) for key in summary_a},
    )
