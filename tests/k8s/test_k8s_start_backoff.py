"""A start that keeps timing out for the same reason backs off (issue 34, item 5), on the
fakes: the second give-up in a row holds the job a minute, the third two, and its
status.reason and a Held Event say why and when it tries again; a job that runs starts
afresh. The real control plane: tests/k8s_real/test_real_hostile.py."""

from __future__ import annotations

import pytest
from k8s_support import World

from caldera.k8s.observe.pods import BACKOFF_MAX, ordinal, start_backoff

MISSING = 'persistentvolumeclaim "data" not found'


def test_the_backoff_grows_and_is_capped() -> None:
    assert [start_backoff(n) for n in (1, 2, 3, 4)] == [0.0, 60.0, 120.0, 240.0]
    assert start_backoff(10_000) == BACKOFF_MAX
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 102, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "102nd", "111th",
    ]  # fmt: skip


def _until(world: World, name: str, done: object, limit: float = 3600.0) -> float:
    waited = 0.0
    while not done():  # type: ignore[operator]
        assert waited < limit, f"{name}: {world.status(name)}"
        world.step(10)
        waited += 10
    return waited


def test_a_start_that_keeps_timing_out_backs_off_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the job was started again at once after every StartTimeout, forever, and its
    status said nothing of it."""
    world = World().hypernode("a", "n", count=1).start()
    cluster = world.cluster
    unbound = {"on": True}
    bind = cluster._bind

    def never() -> None:  # a pod whose claim is missing: the scheduler binds none
        if not unbound["on"]:
            bind()
            return
        for pod in cluster.pods.values():
            if not pod["spec"].get("nodeName"):
                pod.setdefault("status", {})["conditions"] = [
                    {"type": "PodScheduled", "status": "False", "message": MISSING}
                ]

    monkeypatch.setattr(cluster, "_bind", never)
    world.submit("job")
    world.step()
    timeouts = lambda: [m for r, m in cluster.events_of("team", "job") if r == "StartTimeout"]  # noqa: E731
    _until(world, "job", lambda: len(timeouts()) == 1)
    assert "next try" not in timeouts()[0]  # the first time: tried again at once
    _until(world, "job", lambda: world.state("job") == "Held")
    reason = world.status("job")["reason"]
    assert reason.startswith("StartTimeout 2nd time: ") and MISSING in reason, reason
    assert "next try in " in reason, reason  # a minute after the give-up, less its stop
    assert "StartTimeout 2nd time: next try in 1m0s" in timeouts()[1]
    held = _until(world, "job", lambda: world.state("job") != "Held")
    assert 30 <= held <= 70, held
    _until(world, "job", lambda: world.state("job") == "Held")
    reason = world.status("job")["reason"]
    assert reason.startswith("StartTimeout 3rd time: ") and "next try in 1m" in reason, reason
    assert "StartTimeout 3rd time: next try in 2m0s" in timeouts()[2]
    # The claim appears: the next try runs, and a later give-up starts the count again.
    unbound["on"] = False
    _until(
        world,
        "job",
        lambda: world.state("job") == "Running" and bool(world.rt.jobs["team/job"].running_since),
    )
    assert "team/job" not in world.rt.pods.given_up
