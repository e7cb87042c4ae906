"""What a runtime reads is said, then applied (issue 35): the pod watcher and the TrainingJob
intake yield typed observations and change nothing themselves; the fractional-GPU rule is one
rule that the model, the request path and the TrainingJob reader all ask."""

from __future__ import annotations

import dataclasses

import pytest
from k8s_support import NAMESPACE, SETTINGS, World, training_job

from caldera.errors import RecordError
from caldera.k8s import read_training_job
from caldera.k8s import runtime as k8s_runtime
from caldera.k8s.observe.intakeapply import apply_intake
from caldera.k8s.observe.intakefacts import (
    IntakeObservation,
    JobAdmitted,
    JobGone,
    JobRefused,
    JobTakenBack,
    SettledThere,
)
from caldera.k8s.observe.podfacts import TaskEnded, TasksEnded
from caldera.k8s.runtime import KubeRuntime
from caldera.model import GPU_MILLI, JobSpec, JobType, Queue
from caldera.model.jobs import breaks_fractional_gpu_rule
from caldera.runtime.requests import resolve_tasks

# (milli-GPUs per task, tasks): whether the request breaks the rule
CASES = [
    (500, 1, False),
    (500, 2, True),
    (250, 4, True),
    (999, 3, True),
    (1000, 2, False),
    (2000, 4, False),
    (0, 3, False),
]


@pytest.mark.parametrize(("gpu", "tasks", "breaks"), CASES)
def test_the_fractional_gpu_rule_is_asked_the_same_everywhere(
    gpu: int, tasks: int, breaks: bool
) -> None:
    """Before, the rule was written out in each of the three places below."""
    assert breaks_fractional_gpu_rule(gpu, tasks) is breaks
    # The model: a JobSpec that breaks it cannot be made.
    if breaks:
        with pytest.raises(ValueError, match="fractional GPUs are allowed only for single-task"):
            JobSpec(
                id="j", name="j", queue="q", type=JobType.NORMAL, submit=0.0, tasks=tasks, gpu=gpu
            )
    else:
        JobSpec(id="j", name="j", queue="q", type=JobType.NORMAL, submit=0.0, tasks=tasks, gpu=gpu)
    # The request path of scenarios and REST submissions: one problem, in its words.
    _, problems = resolve_tasks(tasks, gpu / 1000)
    fractional = [p for p in problems if p.startswith("fractional gpus need tasks: 1")]
    assert bool(fractional) is breaks, problems
    # The TrainingJob reader: one line, in its words.
    obj = {
        "metadata": {"name": "j", "namespace": NAMESPACE, "uid": "u"},
        "spec": training_job(tasks=tasks, gpus=gpu / 1000),
    }
    queues = {"team": Queue("team")}
    if breaks:
        with pytest.raises(RecordError, match="fractional gpus are allowed only for a single"):
            read_training_job(obj, SETTINGS, queues, 0.0)
    else:
        assert read_training_job(obj, SETTINGS, queues, 0.0).spec.gpu == gpu


def test_the_pod_watcher_says_what_it_saw_and_changes_nothing() -> None:
    """A running task's pod vanishes (its node lost): the watcher says so — the task ended
    unseen, then the job's tasks ended — and the job is untouched until the runtime applies
    it. Before, the watcher marked the task done and settled the job itself."""
    world = World().hypernode("a", "n", count=1).start()
    world.submit("job", tasks=1, gpus=8)
    world.step(1)
    world.run_until("job", "Running")
    world.step(120)  # past the moment a just-created pod may still be unseen
    runtime = world.rt
    job = runtime.jobs[f"{NAMESPACE}/job"]
    task = job.tasks[0]
    del world.cluster.pods[(NAMESPACE, task.pod)]
    pods = [p for ns in runtime.settings.namespaces for p in runtime.reads.pods(ns)]
    seen = list(runtime.pods.observe(pods, world.cluster.clock()))
    assert seen == [
        TaskEnded(job, task, (NAMESPACE, task.pod), None, False),
        TasksEnded(job, ()),
    ]
    for observation in seen:
        assert dataclasses.is_dataclass(observation)
        with pytest.raises(dataclasses.FrozenInstanceError):
            observation.job = job  # type: ignore[misc]
    assert not task.done and job.state.value == "Running"  # nothing applied yet
    attempts = job.attempts
    world.step()  # the runtime reads and applies it: the gang is requeued and started again
    assert task.done and task.exit_code is None
    assert job.attempts == attempts + 1
    assert world.events("job")[-2:] == ["Requeued", "Started"]


def test_the_intake_says_what_the_training_jobs_show_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: the TrainingJob intake reached into the runtime about forty times (jobs,
    kernel, actuator, room). It now says what it found — a job admitted, one refused, one
    gone, one taken back after a restart with its pods — and the runtime applies each."""
    world = World().hypernode("a", "n", count=1).start()
    world.submit("old", gpus=8)
    world.step(1)
    world.run_until("old", "Running")
    runtime = world.rt
    old = runtime.jobs[f"{NAMESPACE}/old"]
    world.cluster.delete_job(NAMESPACE, "old")
    world.submit("new", gpus=1)
    world.submit("bad", gpus=1, queue="nowhere")
    now = world.cluster.clock()
    objects = [o for ns in runtime.settings.namespaces for o in runtime.reads.jobs(ns)]
    pods = [p for ns in runtime.settings.namespaces for p in runtime.reads.pods(ns)]
    seen = list(runtime.intake.reconcile(objects, pods, now))
    kinds = [type(s) for s in seen]
    assert kinds.count(JobAdmitted) == 1 and kinds.count(JobRefused) == 1
    assert JobGone(old) in seen and isinstance(seen[-1], SettledThere)
    admitted = next(s for s in seen if isinstance(s, JobAdmitted))
    assert admitted.job.name == "new" and admitted.held is None
    refused = next(s for s in seen if isinstance(s, JobRefused))
    assert refused.obj["metadata"]["name"] == "bad" and "nowhere" in refused.reason
    # nothing applied yet: the runtime knows what it knew
    assert set(runtime.jobs) == {f"{NAMESPACE}/old"} and old.tasks
    assert runtime.actuator.dirty == {} and runtime.actuator.rejections == []
    for observation in seen:
        apply_intake(runtime, observation, now)
    assert set(runtime.jobs) == {f"{NAMESPACE}/new"} and not old.tasks
    assert [r[1] for r in runtime.actuator.rejections] == ["bad"]

    # A restarted controller: the intake rebuilds the running job from its status and pod;
    # the job is the runtime's, and its pod's room counted, only once that is applied.
    world.step()
    world.run_until("new", "Running")
    collected: list[IntakeObservation] = []
    monkeypatch.setattr(k8s_runtime, "apply_intake", lambda rt, s, now: collected.append(s))
    fresh = KubeRuntime(
        world.cluster,
        world.config.queues,
        world.config.policy,
        world.settings,
        clock=world.cluster.clock,
    )
    fresh.observe(world.cluster.clock())
    back = [s for s in collected if isinstance(s, JobTakenBack)]
    assert [s.job.name for s in back] == ["new"] and back[0].job.state.value == "Running"
    task = back[0].job.tasks[0]
    assert fresh.jobs == {} and not task.counted and back[0].job.lost_tasks == 0
    monkeypatch.undo()
    for key in list(fresh.orphans):  # the pod watcher held the unclaimed pod's room meanwhile
        fresh.release_orphan(key)
    apply_intake(fresh, back[0], world.cluster.clock())
    assert set(fresh.jobs) == {f"{NAMESPACE}/new"} and task.counted
    assert fresh.room.free_milli(0) == 7 * GPU_MILLI
