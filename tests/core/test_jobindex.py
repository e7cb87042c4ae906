"""The job index kept up to date job by job answers as one built afresh from the same views:
the pending groups, and the per-group count of jobs that may still put their queue in waiting
mode (throttle and the quiet check skip a group whose count is nil)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from caldera.core import JobIndex
from caldera.core.jobindex import GroupKey, may_throttle
from caldera.core.views import JobView
from caldera.model import JobSpec, JobState, JobType

_TYPES = (JobType.LARGE, JobType.NORMAL, JobType.DEBUG)
_STATES = (JobState.PENDING, JobState.HELD)


def _view(number: int, kind: int, queue: int, state: int, throttled: bool) -> JobView:
    name = f"j{number}"
    spec = JobSpec(name, name, f"q{queue}", _TYPES[kind], float(number % 5), gpu=8000)
    return JobView(spec, _STATES[state], throttled_once=throttled)


_change = st.tuples(
    st.integers(0, 7),  # which job
    st.integers(0, len(_TYPES) - 1),
    st.integers(0, 1),  # queue
    st.integers(0, len(_STATES) - 1),
    st.booleans(),  # throttled once
    st.booleans(),  # dropped instead
)


def _recount(index: JobIndex) -> dict[GroupKey, int]:
    counts = {key: sum(map(may_throttle, jobs)) for key, jobs in index.pending.items()}
    return {key: count for key, count in counts.items() if count}


@given(st.lists(_change, max_size=40))
def test_the_index_kept_up_to_date_is_the_index_built_afresh(
    changes: list[tuple[int, int, int, int, bool, bool]],
) -> None:
    index = JobIndex()
    views: dict[str, JobView] = {}
    for number, kind, queue, state, throttled, dropped in changes:
        name = f"j{number}"
        if dropped:
            index.drop(name)
            views.pop(name, None)
            continue
        if name in views:  # the same job, changed: its spec stays, its state and flag move
            view = replace(views[name], state=_STATES[state], throttled_once=throttled)
        else:
            view = _view(number, kind, queue, state, throttled)
        index.put(view)
        views[name] = view
        assert index.throttling == _recount(index)
    afresh = JobIndex(views.values())
    assert index.pending == afresh.pending
    assert index.throttling == afresh.throttling == _recount(afresh)


def test_a_large_job_stops_counting_once_it_has_throttled() -> None:
    large = _view(1, 0, 0, 0, False)
    index = JobIndex([large, _view(2, 1, 0, 0, False)])
    assert index.throttling == {("q0", large.spec.priority, large.spec.shape): 1}
    index.put(replace(large, throttled_once=True))
    assert index.throttling == {}
