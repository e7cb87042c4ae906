"""The one watch both Kubernetes benchmarks time their binds with (caldera.bench.kube.watch):
what it records of pods and TrainingJobs from a list and the watch events after it, and how it
carries on after a 410 Gone. A stand-in for the API answers list and watch; no cluster."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from caldera.bench.kube.watch import BENCH_JOB, NAMESPACE, PodWatch
from caldera.k8s.cluster.client import Expired, KubeClusterAPI
from caldera.trainingjob_api import JOB


def pod(name: str, labels: dict[str, str], node: str = "", **meta: Any) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name, "labels": labels, **meta}, "spec": spec}


@dataclass
class Answers:
    """A list, then one watch per entry of `watches` (an exception raised in place of a
    watch's events); the watch stops itself once the last one has been read."""

    listed: list[dict[str, Any]]
    watches: list[list[tuple[str, dict[str, Any]]] | Exception]
    watch: PodWatch | None = None
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def list_objects(self, kind: str, namespace: str, label: str = "") -> tuple[list[Any], str]:
        self.calls.append(("list", kind, label))
        return self.listed, "1"

    def watch_objects(
        self, kind: str, namespace: str, label: str, fields: str, version: str, timeout: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        assert namespace == NAMESPACE
        self.calls.append(("watch", kind, version))
        events = self.watches.pop(0)
        if isinstance(events, Exception):
            raise events
        yield from events
        if not self.watches:
            assert self.watch is not None
            self.watch.stop.set()


def run(answers: Answers, **kwargs: Any) -> PodWatch:
    watch = PodWatch(cast(KubeClusterAPI, answers), **kwargs)
    answers.watch = watch
    watch.run()
    return watch


def test_pods_of_caldera_and_of_the_bench_seen_bound_and_gone() -> None:
    caldera_pod = pod("a-0", {JOB: "a"})
    answers = Answers(
        listed=[caldera_pod, pod("stray", {}, node="n1")],
        watches=[
            [
                ("MODIFIED", {**pod("a-0", {JOB: "a"}, node="n1"), "metadata": {
                    "name": "a-0", "labels": {JOB: "a"}, "resourceVersion": "7"}}),
                ("ADDED", pod("job-00001-0", {BENCH_JOB: "job-00001"}, node="n2")),
                ("BOOKMARK", {"metadata": {"resourceVersion": "9"}}),
                ("DELETED", pod("job-00001-0", {BENCH_JOB: "job-00001"}, node="n2")),
            ]
        ],
    )  # fmt: skip
    watch = run(answers, label="caldera.io/managed=true")
    assert watch.job_of == {"a-0": "a", "job-00001-0": "job-00001"}  # the stray is no job's
    assert set(watch.seen) == {"a-0", "job-00001-0"}
    assert set(watch.bound) == set(watch.bound_wall) == {"a-0", "job-00001-0"}
    assert watch.seen["a-0"] <= watch.bound["a-0"]  # seen unbound in the list, bound later
    assert watch.gone == {"job-00001-0"}
    assert answers.calls == [
        ("list", "pods", "caldera.io/managed=true"),
        ("watch", "pods", "1"),
    ]


def test_training_jobs_admitted_and_their_start_decided() -> None:
    started = {"state": "Running", "controller": {"start_time": "2026-01-02T03:04:05Z"}}
    answers = Answers(
        listed=[{"metadata": {"name": "queued"}, "status": {"state": "Queued"}}],
        watches=[[("MODIFIED", {"metadata": {"name": "run"}, "status": started})]],
    )
    watch = run(answers, kind="trainingjobs")
    assert set(watch.admitted) == {"queued", "run"}
    assert watch.decided == {"run": 1767323045.0}
    assert not watch.job_of and not watch.bound


def test_a_gone_watch_lists_again() -> None:
    answers = Answers(
        listed=[pod("a-0", {JOB: "a"}, node="n1")],
        watches=[Expired("410 Gone"), []],
    )
    watch = run(answers)
    assert [c[0] for c in answers.calls] == ["list", "watch", "list", "watch"]
    assert set(watch.bound) == {"a-0"}
