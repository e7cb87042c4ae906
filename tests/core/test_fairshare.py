"""Decayed usage (core/fairshare.py): the integral a runtime keeps, and the order it gives."""

from __future__ import annotations

import json
import math
import re

import pytest

from caldera.core.fairshare import SAVE_EVERY, DecayedRecord, DecayedUsage, lending_key
from caldera.core.usage import QueueUsage
from caldera.model import Queue, Resources

HOUR = 3600.0


def test_usage_integrates_what_was_held_and_halves_each_half_life() -> None:
    usage = DecayedUsage(half_life=HOUR)
    usage.advance(0.0, {"a": 8000, "b": 0})
    usage.advance(HOUR, {"a": 0})
    # ∫0^h 8000 · 2^(-s/h) ds = 8000 · h / ln 2 · (1 - 1/2)
    assert usage.view()["a"] == pytest.approx(8000 * HOUR / math.log(2) / 2)
    assert usage.view().get("b", 0.0) == 0.0
    before = usage.view()["a"]
    usage.advance(2 * HOUR, {})
    assert usage.view()["a"] == pytest.approx(before / 2)


def test_the_same_instant_twice_adds_nothing_and_keeps_the_latest_holdings() -> None:
    usage = DecayedUsage(half_life=HOUR)
    usage.advance(0.0, {"a": 1000})
    usage.advance(0.0, {"a": 2000})  # a second cycle at the same instant started more
    usage.advance(HOUR, {})
    assert usage.view()["a"] == pytest.approx(2000 * HOUR / math.log(2) / 2)


def _usage(name: str, deserved: int, held: int) -> QueueUsage:
    return QueueUsage(Queue(name), Resources(deserved), Resources(held))


def test_lending_key_off_is_the_share_and_on_orders_beyond_share_by_decayed_usage() -> None:
    low, high = _usage("a", 4000, 4000), _usage("b", 3000, 4000)
    assert lending_key(low, {}) == (low.share, low.share) == (1.0, 1.0)
    decayed = {"a": 8.0, "b": 3.0}  # a used 2 per deserved GPU lately, b 1
    assert lending_key(high, decayed) < lending_key(low, decayed)
    below = _usage("c", 4000, 1000)  # below its share: its share, before anyone beyond
    assert lending_key(below, {"c": 1e9}) == (0.25, 0.25) < lending_key(high, decayed)


def test_a_restored_usage_carries_on_as_if_it_had_never_stopped() -> None:
    kept = DecayedUsage(half_life=HOUR)
    kept.advance(0.0, {"a": 8000})
    kept.advance(HOUR, {"a": 8000, "b": 2000})
    record = kept.record()
    assert record is not None
    parsed = DecayedRecord.from_json(json.loads(json.dumps(record.to_json())))
    again = DecayedUsage.restored(HOUR, parsed)
    for usage in (kept, again):
        usage.advance(3 * HOUR, {})
    assert again.view() == pytest.approx(kept.view())
    assert again.view()["b"] == pytest.approx(2000 * HOUR / math.log(2) * (1 - 0.25))


def test_a_record_is_due_at_once_then_every_save_every_seconds() -> None:
    usage = DecayedUsage(half_life=HOUR)
    assert not usage.due(0.0) and usage.record() is None  # never advanced: nothing to keep
    usage.advance(0.0, {"a": 1000})
    assert usage.due(0.0)
    usage.saved_at = 0.0
    assert not usage.due(SAVE_EVERY - 1)
    assert usage.due(SAVE_EVERY)
    assert usage.due(-1.0)  # a clock that went back: keep it again


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ([], "not an object"),
        ({"at": "soon", "used": {}, "held": {}}, "'at' is not a finite number"),
        ({"at": float("nan"), "used": {}, "held": {}}, "'at' is not a finite number"),
        ({"at": 0, "used": [], "held": {}}, "'used' is not an object"),
        ({"at": 0, "used": {"a": -1}, "held": {}}, "used['a'] is not a non-negative number"),
        ({"at": 0, "used": {"a": True}, "held": {}}, "used['a'] is not a non-negative number"),
        ({"at": 0, "used": {}, "held": {"a": 1.5}}, "held['a'] is not a non-negative number"),
    ],
)
def test_a_bad_record_is_one_line_value_error(data: object, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)) as raised:
        DecayedRecord.from_json(data)
    assert "\n" not in str(raised.value)
