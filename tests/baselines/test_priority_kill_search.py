"""`priority-kill`'s shortcuts in PK3 give the answers of the plain search, over random small
scenarios (hypothesis): the node `_pick_node` picks, skipping nodes whose victims cannot score
better than the best so far (`_cannot_beat`), is the one trying every node picks; and the
"could the gang fit at all" count `_could_seat` makes in C is the count made node by node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.baselines import priority_kill as pk
from caldera.baselines.common import can_host
from caldera.core.snapshot import JobView
from caldera.sim import parse_scenario, simulate

Pick = tuple[int, list[pk.Pod]] | None


@st.composite
def crowded(draw: st.DrawFn) -> dict[str, Any]:
    """A pool filled with low-priority pods of mixed sizes, then higher-priority arrivals
    that must preempt: many nodes to choose victims on, and many claims in one cycle."""
    jobs: list[dict[str, Any]] = []
    for i in range(draw(st.integers(10, 40))):
        late = draw(st.booleans())
        tasks = draw(st.sampled_from([1, 1, 2, 4]))
        sizes = [1, 2, 4, 8] if tasks > 1 else [0.5, 1, 3, 8]
        jobs.append(
            {
                "name": f"j{i}",
                "queue": draw(st.sampled_from(["a", "b"])),
                "type": draw(st.sampled_from(["critical", "large-job"] if late else ["normal"])),
                "submit": draw(st.integers(600, 1200)) if late else draw(st.integers(0, 300)),
                "duration": draw(st.integers(600, 7200)),
                "tasks": tasks,
                "gpus_per_task": draw(st.sampled_from(sizes)),
                "checkpoint_interval": 600,
            }
        )
    return {
        "cluster": {"nodes": [{"prefix": "n", "count": draw(st.integers(3, 12)), "gpus": 8}]},
        "queues": [{"name": "a"}, {"name": "b"}],
        "jobs": jobs,
        "until": 4 * 3600,
    }


def _every_node(claims: pk._Claims, preemptor: JobView, scope: Sequence[int] | None) -> Pick:
    """pickOneNodeForPreemption with no shortcut: every node, lowest `_node_score` wins."""
    spec = preemptor.spec
    freeable = claims.could_free(spec.priority)
    best: tuple[Any, int, list[pk.Pod]] | None = None
    for node in sorted(freeable if scope is None else freeable.keys() & set(scope)):
        if not can_host(claims.future.room, node, spec):
            continue
        candidates = pk._candidates(claims, preemptor, node)
        victims = pk._victims_on_node(claims, preemptor, node, candidates) if candidates else []
        if victims:
            score = pk._node_score(node, victims)
            if best is None or score < best[0]:
                best = (score, node, victims)
    return None if best is None else (best[1], best[2])


def _seats_afresh(claims: pk._Claims, job: JobView, pods: int) -> int:
    room = claims.future.room
    freeable = claims.could_free(job.spec.priority)
    per_pod = max(job.spec.gpu, 1)
    return sum((room.free_milli(n) + freeable.get(n, 0)) // per_pod for n in range(len(room.nodes)))


def test_the_shortcuts_answer_as_the_plain_search() -> None:
    picks: list[Pick] = []
    pick_node = pk._pick_node
    could_seat = pk._could_seat

    def checked_pick(claims: pk._Claims, preemptor: JobView, scope: Sequence[int] | None) -> Pick:
        want = _every_node(claims, preemptor, scope)
        got = pick_node(claims, preemptor, scope)
        assert got == want
        picks.append(got)
        return got

    def checked_seat(claims: pk._Claims, job: JobView, pods: int) -> bool:
        got = could_seat(claims, job, pods)
        if pk.domain_nodes(claims.future.room, job.spec) is None and pods > 0:
            assert got == (_seats_afresh(claims, job, pods) >= pods)
        return got

    @settings(max_examples=40, deadline=None)
    @given(crowded())
    def run(data: dict[str, Any]) -> None:
        simulate(parse_scenario(data), "priority-kill")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pk, "_pick_node", checked_pick)
        patch.setattr(pk, "_could_seat", checked_seat)
        run()
    assert any(pick is not None for pick in picks)  # some victims were chosen
