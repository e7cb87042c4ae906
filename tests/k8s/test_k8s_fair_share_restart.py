"""Fair share over time survives a controller restart (issue 39, DESIGN §2): each queue's
decayed usage is kept under the key `fair_share` of the state ConfigMap
(caldera/k8s/ha/fairshare_store.py) and a new controller — a restart or a standby taking over —
carries on from it. On the fake cluster (tests/k8s/k8s_support.py)."""

from __future__ import annotations

import json
import logging
import math

import pytest
from k8s_support import World

from caldera.core.fairshare import SAVE_EVERY, DecayedRecord
from caldera.k8s import names
from caldera.k8s.ha.fairshare_store import KEY, read_decayed_usage, write_decayed_usage

HOUR = 3600.0
STATE = ("caldera-system", names.STATE_CONFIG_MAP)


def integral(gpu_milli: float, seconds: float) -> float:
    """∫0^seconds gpu_milli · 2^(-s/HOUR) ds: what holding `gpu_milli` for `seconds` adds."""
    return gpu_milli * HOUR / math.log(2) * (1 - 0.5 ** (seconds / HOUR))


def fair_world() -> World:
    return World(policy={"fair_share": {"half_life": HOUR}}).hypernode("a", "n", count=1).start()


def decayed(world: World) -> dict[str, float]:
    usage = world.rt.kernel.decayed_usage
    assert usage is not None
    return dict(usage.view())


def test_a_restarted_controller_carries_on_from_the_decayed_usage_it_kept() -> None:
    world = fair_world()
    assert world.rt.settings.state_namespace == STATE[0]
    world.submit("small0")  # 8 GPUs of queue team, for good
    world.step()
    world.step(HOUR)  # the timer's cycle an hour later keeps the usage
    kept = read_decayed_usage(world.cluster, STATE[0])
    assert kept is not None
    assert kept.used["team"] == pytest.approx(integral(8000, HOUR), rel=1e-3)
    assert kept.held == {"team": 8000}
    # The state ConfigMap keeps the waiting modes beside it, untouched.
    assert set(world.cluster.config_maps[STATE]["data"]) == {"throttles", KEY}

    world.cluster.advance(HOUR)  # an hour without a controller; the pods keep running
    world.restart()
    assert world.state("small0") == "Running"
    assert decayed(world)["team"] == pytest.approx(integral(8000, 2 * HOUR), rel=1e-3)


def test_it_is_kept_at_most_once_a_minute() -> None:
    world = fair_world()
    world.submit("small0")
    world.step()
    first = read_decayed_usage(world.cluster, STATE[0])
    assert first is not None
    world.step(SAVE_EVERY / 2)
    assert read_decayed_usage(world.cluster, STATE[0]) == first
    world.step(SAVE_EVERY / 2)
    later = read_decayed_usage(world.cluster, STATE[0])
    assert later is not None and later.at == first.at + SAVE_EVERY


@pytest.mark.parametrize(
    "text",
    ["{not json", json.dumps({"at": 0, "used": {"team": -5}, "held": {}}), "[" * 100_000],
    ids=["not-json", "negative", "deeply-nested"],
)
def test_an_unreadable_record_is_one_log_line_and_fair_share_starts_from_zero(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    world = World(policy={"fair_share": {"half_life": HOUR}}).hypernode("a", "n", count=1)
    world.cluster.create_config_map(
        STATE[0],
        {"metadata": {"name": STATE[1]}, "data": {"throttles": "{}", KEY: text}},
    )
    with caplog.at_level(logging.WARNING, logger="caldera.k8s"):
        world.start()
    lines = [r.getMessage() for r in caplog.records if KEY in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and "starts from zero" in lines[0]
    assert decayed(world) == {}


def test_without_fair_share_nothing_is_kept_or_read() -> None:
    world = World().hypernode("a", "n", count=1)
    write_decayed_usage(world.cluster, STATE[0], DecayedRecord(0.0, {"team": 1e9}, {}))
    world.start()
    world.submit("small0")
    world.step()
    world.step(HOUR)
    assert world.rt.kernel.decayed_usage is None
    kept = read_decayed_usage(world.cluster, STATE[0])
    assert kept == DecayedRecord(0.0, {"team": 1e9}, {})  # left as it was
