"""The controller's writes sent several at a time (`writers`, what `caldera k8s run` uses):
the order that matters is kept — every status of a flush before any object it explains, one
job's Service, PodGroup and pods in that order — and an API server that goes away mid-flush
loses nothing and repeats nothing (issue 10, item 4: a burst of starts moved at one round
trip at a time)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from k8s_support import NAMESPACE, SETTINGS, World

from caldera.k8s import ClusterUnavailable
from caldera.k8s.cluster.cache import slim_job
from caldera.k8s.effects import flush
from caldera.k8s.effects.actuator import Create

WRITERS = 8


def test_a_burst_of_starts_goes_out_at_once_statuses_first_each_jobs_objects_in_order() -> None:
    world = World().hypernode("a", "n", count=5).start(writers=WRITERS)
    singles = [f"one{i}" for i in range(12)]
    for name in singles:
        world.submit(name, gpus=1)
    world.submit("gang", tasks=2, gpus=8)
    mark = len(world.cluster.actions)
    world.step()
    actions = world.cluster.actions[mark:]
    statuses = [i for i, (_, kind, _) in enumerate(actions) if kind == "trainingjob/status"]
    creates = [
        i for i, (verb, kind, _) in enumerate(actions) if verb == "create" and kind != "event"
    ]
    # Admitted and started in one step: one status write each, all before the first object.
    assert Counter(actions[i][2] for i in statuses) == {
        f"{NAMESPACE}/{name}": 1 for name in [*singles, "gang"]
    }
    assert max(statuses) < min(creates)

    def made(job: str) -> list[str]:
        """What was created for `job` (its Service, PodGroup, pods), in order."""
        return [
            kind
            for verb, kind, key in actions
            if verb == "create"
            and kind != "event"
            and (key == f"{NAMESPACE}/{job}" or key.startswith(f"{NAMESPACE}/{job}-"))
        ]

    assert made("gang") == ["service", "podgroup", "pod", "pod"]
    assert all(made(name) == ["podgroup", "pod"] for name in singles)
    assert {world.state(name) for name in [*singles, "gang"]} == {"Running"}
    # no Event for a first start: its conditions say it (issue 40: it was two, then one)
    assert all(world.events(name) == [] for name in singles)


class CutAfter:
    """The fake, whose API server goes away after `creates` pod creates."""

    def __init__(self, cluster: Any, creates: int) -> None:
        self.cluster = cluster
        self.left = creates

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)

    def create_pod(self, namespace: str, body: Any) -> Any:
        if self.left <= 0:
            raise ClusterUnavailable("cannot reach the Kubernetes API at fake://: connection reset")
        self.left -= 1
        return self.cluster.create_pod(namespace, body)


def test_a_server_gone_mid_flush_keeps_what_was_not_sent_in_order_and_repeats_nothing() -> None:
    world = World().hypernode("a", "n", count=2).start(writers=WRITERS)
    real = world.rt.actuator.api
    world.rt.actuator.api = CutAfter(real, creates=3)
    jobs = [f"job{i}" for i in range(8)]
    for name in jobs:
        world.submit(name, gpus=2)
    try:
        world.step()
    except ClusterUnavailable:
        pass
    else:
        raise AssertionError("the flush went through a server that was gone")
    left = [i for i in world.rt.actuator.pending if isinstance(i, Create)]
    assert len([i for i in left if i.body["kind"] == "Pod"]) == len(jobs) - 3
    for name in jobs:  # each job's own still in order: its PodGroup (if not sent) first
        kinds = [i.body["kind"] for i in left if i.job.name == name]
        assert kinds in ([], ["Pod"], ["PodGroup", "Pod"]), (name, kinds)

    world.rt.actuator.api = real
    world.step(1)
    pods = [key for verb, kind, key in world.cluster.actions if (verb, kind) == ("create", "pod")]
    assert len(pods) == len(set(pods)) == len(jobs)  # every pod once
    assert {world.state(name) for name in jobs} == {"Running"}
    # A pod never created is a task that never began: its job starts again, spending no retry.
    assert all(world.status(name)["retries"] == 0 for name in jobs)
    assert sorted(key.split("/")[1].split("-")[0] for key in set(pods)) == sorted(jobs)


def test_training_jobs_are_kept_without_what_only_their_writers_read() -> None:
    applied = "kubectl.kubernetes.io/last-applied-configuration"
    job = {
        "metadata": {
            "name": "j",
            "managedFields": [{"manager": "kubectl"}] * 20,
            "annotations": {applied: "{...}", "team": "a"},
        },
        "spec": {"type": "normal"},
        "status": {"state": "Running"},
    }
    slim = slim_job(job)
    assert slim["metadata"] == {"name": "j", "annotations": {"team": "a"}}
    assert slim["spec"] is job["spec"] and slim["status"] is job["status"]
    assert "managedFields" in job["metadata"]  # the original is left as it was


def test_a_single_pod_start_behind_kube_scheduler_writes_status_pod_then_running() -> None:
    """Issue 40: the controller's writes per started single-pod job, as the API server counts
    them. Behind kube-scheduler (which reads no PodGroup) a start is its status (admitted and
    started at once) and its pod; once the pod runs, one status write for the
    Running condition. It was six: a PodGroup nobody read and an Admitted Event besides;
    then four, with the Started Event its conditions already said."""
    settings = replace(SETTINGS, scheduler_name="default-scheduler")
    world = World(settings=settings).hypernode("a", "n", count=2).start()
    for i in range(4):
        world.submit(f"one{i}", gpus=1)
    mark, said = len(world.cluster.actions), len(world.cluster.events)
    world.rt.step()  # admitted and started in one step
    started = Counter((verb, kind) for verb, kind, _ in world.cluster.actions[mark:])
    assert started == {("patch", "trainingjob/status"): 4, ("create", "pod"): 4}
    assert world.cluster.events[said:] == []  # the conditions say it: no Event
    world.cluster.settle()  # the fake binds and runs the pods
    mark, said = len(world.cluster.actions), len(world.cluster.events)
    world.step()
    running = Counter((verb, kind) for verb, kind, _ in world.cluster.actions[mark:])
    assert running == {("patch", "trainingjob/status"): 4}
    assert world.cluster.events[said:] == []
    assert {world.condition(f"one{i}", "Running") for i in range(4)} == {("True", "Running")}
    assert world.cluster.pod_groups == {}


def test_behind_volcano_a_start_keeps_its_pod_group() -> None:
    world = World().hypernode("a", "n", count=2).start()  # scheduler_name: volcano
    world.submit("one", gpus=1)
    world.step()
    assert (NAMESPACE, "one-1") in world.cluster.pod_groups


def test_a_job_marked_changed_with_the_same_status_is_not_written_again() -> None:
    """A pod seen bound marks its job changed for the next snapshot, not for its status:
    the status it would write is the one already written, and it is not sent (issue 40: on a
    real cluster, where the bind and the pod running are seen in two steps, a third status
    patch per start)."""
    world = World().hypernode("a", "n", count=2).start()
    for i in range(3):
        world.submit(f"one{i}", gpus=1)
    world.step()
    world.step()  # Running
    mark = len(world.cluster.actions)
    for job in world.rt.jobs.values():
        world.rt.kernel.mark(job)
    world.rt.cycle_needed = True
    world.step()
    assert [a for a in world.cluster.actions[mark:] if a[1] == "trainingjob/status"] == []
    world.cluster.advance(1)
    job = world.rt.jobs[f"{NAMESPACE}/one0"]
    job.reason = "changed"
    world.rt.kernel.mark(job)
    world.step()
    written = [a for a in world.cluster.actions[mark:] if a[1] == "trainingjob/status"]
    assert written == [("patch", "trainingjob/status", f"{NAMESPACE}/one0")]


def _burst_with_newcomers(world: World, burst: list[str], newcomers: list[str]) -> None:
    """`burst`'s one-GPU jobs submitted now; `newcomers` applied by users at the first pod
    the controller creates, while the burst is written."""
    for name in burst:
        world.submit(name, gpus=1)
    create_pod = world.cluster.create_pod

    def create_and_submit(namespace: str, body: Any) -> Any:
        first = f"{NAMESPACE}/{newcomers[0]}"
        if not any(key == first for _, _, key in world.cluster.actions):
            for name in newcomers:
                world.submit(name, gpus=1)
        return create_pod(namespace, body)

    world.cluster.create_pod = create_and_submit  # type: ignore[method-assign]


def _step_a_burst(
    monkeypatch: pytest.MonkeyPatch, burst: list[str], newcomers: list[str], backlog: int = 4
) -> tuple[World, list[tuple[str, str, str]]]:
    """One step over `burst` with `newcomers` applied during its flush, in rounds of 4 jobs
    and `backlog` of the step's own first statuses per admission: the world and the
    step's writes."""
    monkeypatch.setattr(flush, "ROUND", 4)
    monkeypatch.setattr(flush, "BACKLOG_AT_ONCE", backlog)
    world = World().hypernode("a", "n", count=2).start()
    _burst_with_newcomers(world, burst, newcomers)
    mark = len(world.cluster.actions)
    world.rt.step()
    return world, world.cluster.actions[mark:]


def test_a_burst_is_written_in_rounds_and_newcomers_are_admitted_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 40: a step that starts thousands of jobs wrote every status before any pod, for
    minutes, and a TrainingJob applied meanwhile waited for all of it to be admitted. In
    rounds of `ROUND` jobs, each job's status still goes before its objects; the first pods
    go before the last statuses; a TrainingJob that came during the flush is admitted
    (its status written) in the same step."""
    singles = [f"one{i}" for i in range(12)]
    world, actions = _step_a_burst(monkeypatch, singles, ["late"])
    status_at = {key: i for i, (_, kind, key) in enumerate(actions) if kind == "trainingjob/status"}
    pod_at = {
        key.rsplit("-", 2)[0]: i
        for i, (verb, kind, key) in enumerate(actions)
        if verb == "create" and kind == "pod"
    }
    assert set(pod_at) == {f"{NAMESPACE}/{name}" for name in singles}
    assert all(status_at[job] < at for job, at in pod_at.items())  # status first, each job
    assert min(pod_at.values()) < max(status_at[f"{NAMESPACE}/{n}"] for n in singles)
    # its status went between the rounds, before the second round's pods (it went after
    # every pod), and after the backlog's next first statuses, a round's worth (4 here):
    # they came before it (a burst of newcomers pushed them back)
    fifth_pod = sorted(pod_at.values())[4]
    late = status_at[f"{NAMESPACE}/late"]
    assert late < fifth_pod
    second_round = sorted(status_at[f"{NAMESPACE}/{n}"] for n in singles)[4:8]
    assert max(second_round) < late
    # before the second round's pods: 4 + (4 + late) + 4 statuses, not 4 + 4
    assert sum(1 for at in status_at.values() if at < fifth_pod) == 13
    assert world.state("late") == "Pending"  # admitted during the step, its start to come
    assert world.events("late") == []  # its Admitted Event waits for its start
    world.step()
    world.step()  # its start's status follows its pod, at the next step
    assert world.state("late") == "Running"
    assert world.events("late") == []  # a first start: its conditions say it all


def test_newcomers_in_numbers_do_not_push_the_step_s_own_admissions_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 40: during a burst, each admission between rounds wrote the newcomers and then
    the backlog's first statuses only up to a round's worth in all, so a step's own
    admissions waited behind every later wave (a 10 s admission tail). The backlog's go
    first, as many as the newcomers."""
    singles = [f"one{i:02d}" for i in range(12)]
    late = [f"late{i}" for i in range(6)]
    world, actions = _step_a_burst(monkeypatch, singles, late)
    order = [key.rsplit("/", 1)[1] for _, kind, key in actions if kind == "trainingjob/status"]
    first_late = min(order.index(name) for name in late)
    # a round (4), then as many of the backlog as the 6 newcomers, then the newcomers
    assert sorted(order[:first_late]) == singles[:10]
    assert sorted(order[first_late : first_late + 6]) == late
    assert all(world.state(name) == "Pending" for name in late)


def test_an_admission_writes_more_of_the_step_s_backlog_than_a_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 40: with a round's worth of the backlog per admission, the last of 446 jobs
    read at a step's start during a burst waited 7 s for its first status. An admission
    during the flush writes `BACKLOG_AT_ONCE` of them, more than a round, before the
    newcomer: here the first round's 4, then 8 of the backlog, then the newcomer (not 4 and 4)."""
    singles = [f"one{i:02d}" for i in range(16)]
    _, actions = _step_a_burst(monkeypatch, singles, ["late"], backlog=8)
    pods = [i for i, (verb, kind, _) in enumerate(actions) if (verb, kind) == ("create", "pod")]
    statuses = [
        key.rsplit("/", 1)[1] for _, kind, key in actions[: pods[4]] if kind == "trainingjob/status"
    ]
    # the first round's 4, then 8 of the backlog (4 with a round's worth), then the newcomer
    assert statuses.index("late") == 12
    assert sorted(statuses[:12]) == singles[:12]


class SlowPods:
    """The API for the writers: each pod create waits `seconds` (a busy API server) outside
    the fake's lock; the first one applies the TrainingJob `late` first, as a user would
    during a burst."""

    def __init__(self, world: World, seconds: float) -> None:
        self.world = world
        self.api: Any = world.rt.actuator.api  # the fake behind its lock (`Serialized`)
        self.seconds = seconds
        self.sent = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def create_pod(self, namespace: str, body: Any) -> Any:
        with self.api.lock:
            if not self.sent:
                self.sent = True
                self.world.submit("late", gpus=1)
        time.sleep(self.seconds)
        return self.api.create_pod(namespace, body)


def slow(world: World) -> SlowPods:
    api = world.rt.actuator.api
    assert isinstance(api, SlowPods)
    return api


def _flush_with_a_late_submission(world: World) -> list[tuple[str, str, str]]:
    for i in range(8):
        world.submit(f"one{i}", gpus=1)
    world.rt.actuator.api = SlowPods(world, seconds=0.3)
    mark = len(world.cluster.actions)
    world.rt.step()
    return world.cluster.actions[mark:]


def test_a_trainingjob_sent_during_a_flush_is_admitted_while_its_writes_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 40, intake on its own path: while a flush waits on its writers (a busy API
    server), the TrainingJobs that came meanwhile are admitted every `ADMIT_EVERY` seconds
    and their status written on writers of their own, not behind the starts; their own
    start is the next step's cycle's. Before, a flush of one round admitted nobody, and a
    longer one only between its rounds of `ROUND` jobs (12–37 s at scale)."""
    monkeypatch.setattr(flush, "ADMIT_EVERY", 0.05)
    world = World().hypernode("a", "n", count=2).start(writers=WRITERS)
    actions = _flush_with_a_late_submission(world)
    late = [
        i
        for i, (_, kind, key) in enumerate(actions)
        if (kind, key) == ("trainingjob/status", f"{NAMESPACE}/late")
    ]
    pods = [i for i, (verb, kind, _) in enumerate(actions) if (verb, kind) == ("create", "pod")]
    assert len(pods) == 8 and len(late) == 1 and late[0] < min(pods)
    assert world.state("late") == "Pending"  # admitted; not started by the flush
    assert not any(k.startswith(f"{NAMESPACE}/late-") for _, _, k in actions)
    world.rt.actuator.api = slow(world).api
    mark = len(world.cluster.actions)
    world.step()
    assert world.pods("late") and world.state("late") == "Pending"  # its pod first,
    world.step()
    assert world.state("late") == "Running"  # then one status that says it runs
    assert world.events("late") == []  # a first start: its conditions say it
    # Its start's writes (issue 40: a status that said Starting went before them): its
    # PodGroup and pod, then one status — three with its admission's, without Volcano.
    writes = [(verb, kind) for verb, kind, key in world.cluster.actions[mark:] if "/late" in key]
    assert writes == [("create", "podgroup"), ("create", "pod"), ("patch", "trainingjob/status")]


def test_a_replica_that_no_longer_leads_admits_nobody_during_its_flush(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flush, "ADMIT_EVERY", 0.05)
    world = World().hypernode("a", "n", count=2).start(writers=WRITERS)
    world.rt.actuator.leading = lambda: False  # its Lease lapsed mid-flush
    actions = _flush_with_a_late_submission(world)
    assert not any(
        key.startswith(f"{NAMESPACE}/late") for _, kind, key in actions if kind != "trainingjob"
    )
    assert not world.job("late").get("status")


def test_while_admissions_are_written_the_flush_starts_no_new_request() -> None:
    """The admission path's writes go first: the API server, the pipeline's bottleneck,
    answers them before the next of the burst's requests (admission p99 from 6–8 s to under
    4 s at 100 nodes × 800 pods, docs/benchmarks.md)."""
    world = World().hypernode("a", "n", count=1).start(writers=WRITERS)
    writer = world.rt.actuator
    sent: list[int] = []
    writer._intake_idle.clear()  # an admission pass is writing
    flush = threading.Thread(target=writer._after_intake, args=(sent.append, 1))
    flush.start()
    flush.join(0.2)
    assert flush.is_alive() and sent == []
    writer._intake_idle.set()  # the pass is done
    flush.join(5)
    assert sent == [1]


def test_an_admission_that_fails_during_a_flush_loses_none_of_the_flushs_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading the TrainingJobs during a flush can fail (a listing, the API server gone for
    a moment): the flush's own writes, some under way, go on; the newcomer waits for the
    next step."""
    monkeypatch.setattr(flush, "ADMIT_EVERY", 0.05)
    world = World().hypernode("a", "n", count=2).start(writers=WRITERS)

    def unreadable() -> list[Any]:
        raise ClusterUnavailable("cannot reach the Kubernetes API at fake://: connection reset")

    world.rt.actuator.between = unreadable
    actions = _flush_with_a_late_submission(world)
    assert sum(1 for verb, kind, _ in actions if (verb, kind) == ("create", "pod")) == 8
    assert world.rt.actuator.pending == [] and world.rt.actuator.dirty == {}
    assert not world.job("late").get("status")
    world.rt.actuator.api = slow(world).api
    world.rt.actuator.between = world.rt.admit_new
    world.step()
    assert world.state("late") == "Running"


def test_a_start_whose_pods_do_not_run_says_starting_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 40: a job that waited (its Pending status written) and starts has its pods
    created first; its status waits for them to run, and says Starting once
    `SAY_STARTING_AFTER_PENDING` seconds pass without (a slow image pull, a busy scheduler:
    longer than `SAY_STARTING_AFTER`, which a burst's binder queue outlasts)."""
    world = World().one_waits_for_another()
    monkeypatch.setattr(world.cluster, "_bind", lambda: None)  # no pod is bound: none runs
    world.cluster.finish(NAMESPACE, "first-1-0")
    world.step()
    assert world.pods("second") and world.status("second")["phase"] == "Pending"
    world.step(flush.SAY_STARTING_AFTER)
    assert world.status("second")["phase"] == "Pending"
    world.step(flush.SAY_STARTING_AFTER_PENDING - flush.SAY_STARTING_AFTER - 1)
    assert world.status("second")["phase"] == "Pending"
    world.step(1)
    assert (world.state("second"), world.status("second")["phase"]) == ("Running", "Starting")
