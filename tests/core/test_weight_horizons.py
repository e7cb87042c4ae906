"""`weight.defends_against` with horizons (kept by the job index across cycles) answers
exactly as without them: a "not yet" is kept only up to a time at which the weight was
checked below the holder's priority, and the weight of one view never falls as time passes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.core import PolicyConfig
from caldera.core.views import JobView
from caldera.core.weight import Horizons, defends_against, effective_weight
from caldera.model import JobSpec, JobState, JobType

HOLDER = JobView(JobSpec("p", "p", "q", JobType.LARGE, 0.0, gpu=8000), JobState.PENDING)


@st.composite
def _victims(draw: st.DrawFn) -> JobView:
    kind = draw(st.sampled_from([JobType.NORMAL, JobType.DEBUG, JobType.LARGE]))
    queue = draw(st.sampled_from(["q", "q", "other"]))
    expected = draw(st.one_of(st.none(), st.floats(60, 7 * 86400)))
    spec = JobSpec("v", "v", queue, kind, 0.0, expected_duration=expected)
    return JobView(
        spec,
        JobState.RUNNING,
        running_since=draw(st.floats(0, 86400)),
        work_base=draw(st.floats(0, 5 * 86400)),
        reported_progress=draw(st.one_of(st.none(), st.floats(0, 1))),
    )


@settings(max_examples=200, deadline=None)
@given(
    _victims(),
    st.lists(st.floats(0, 20 * 86400), min_size=1, max_size=40),
    st.sampled_from([PolicyConfig(), PolicyConfig(alpha=400.0, beta=900.0, ceiling=900)]),
)
def test_horizons_change_no_answer(
    victim: JobView, times: list[float], config: PolicyConfig
) -> None:
    horizons: Horizons = {}
    for now in sorted(times):
        plain = effective_weight(victim, config, now) >= HOLDER.spec.priority
        plain = plain and victim.spec.queue == HOLDER.spec.queue
        assert defends_against(victim, HOLDER, config, now, horizons) == plain
        assert defends_against(victim, HOLDER, config, now) == plain


def test_a_horizon_is_kept_and_only_for_the_views_it_was_worked_out_for() -> None:
    config = PolicyConfig()
    spec = JobSpec("v", "v", "q", JobType.NORMAL, 0.0, expected_duration=10 * 86400.0)
    young = JobView(spec, JobState.RUNNING, running_since=0.0)
    horizons: Horizons = {}
    assert not defends_against(young, HOLDER, config, 0.0, horizons)
    (until,) = (entry[3] for entry in horizons.values())
    assert until == 3600.0  # checked an hour ahead
    # Within it, the answer is kept (the weight is not worked out); past it, worked out.
    assert not defends_against(young, HOLDER, config, 1800.0, horizons)
    assert horizons[("v", "p")][3] == 3600.0
    # Another view of the same job (it was checkpointed, say) is weighed afresh.
    old = JobView(spec, JobState.RUNNING, running_since=0.0, work_base=9.9 * 86400)
    assert defends_against(old, HOLDER, config, 1800.0, horizons)
