"""QueueUsage's integer shortcut says what the Resources arithmetic says."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from caldera.core.usage import QueueUsage
from caldera.model import Queue, Resources

amounts = st.integers(0, 64_000)
resources = st.builds(Resources, amounts, amounts, amounts)


@given(resources, resources, resources, resources, resources)
def test_within_deserved_is_not_over_deserved_of_what_it_would_hold(
    deserved: Resources,
    allocated: Resources,
    releasing: Resources,
    promised: Resources,
    extra: Resources,
) -> None:
    usage = QueueUsage(
        queue=Queue(name="q", deserved=deserved),
        deserved=deserved,
        allocated=allocated,
        releasing=releasing,
        promised=promised,
    )
    assert usage.within_deserved(extra) == (not usage.over_deserved(usage.holds(extra)))
