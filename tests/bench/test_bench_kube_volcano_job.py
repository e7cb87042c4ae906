"""The side-by-side bench's `volcano-job` mode (issue 40): the same jobs sent as Volcano Jobs, so
that Volcano's own job controller creates the PodGroups and pods. What is sent for a job of a
given size (every field Volcano's admission webhook would default written out: the bench's
cluster runs no webhook), the mode's properties, that the bench's watch finds the pods the job
controller makes of it, and that the CLI takes the mode. No cluster: tests/k8s_real/
test_real_side_by_side.py runs the mode on the real Volcano."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from caldera.bench.kube import workload as workload_module
from caldera.bench.kube.cluster import IMAGE, QUEUE
from caldera.bench.kube.counts import ratios
from caldera.bench.kube.watch import BENCH_JOB, NAMESPACE, PodWatch
from caldera.bench.kube.workload import HIGH, SideMode, submit, volcano_job
from caldera.cli.main import app
from caldera.k8s.cluster.client import KubeClusterAPI


class Recorder:
    """Stands in for the official client's CoreV1Api and CustomObjectsApi: records creates."""

    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> None:
        assert namespace == NAMESPACE
        self.created.append(("pods", body))

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: dict[str, Any]
    ) -> None:
        assert namespace == NAMESPACE and body["apiVersion"] == f"{group}/{version}"
        self.created.append((plural, body))


def sent(monkeypatch: pytest.MonkeyPatch, mode: SideMode, sizes: list[int], **kw: Any) -> Any:
    recorder = Recorder()
    client = types.SimpleNamespace(
        CoreV1Api=lambda api: recorder, CustomObjectsApi=lambda api: recorder
    )
    monkeypatch.setattr(workload_module, "k8s", types.SimpleNamespace(client=client))
    when: dict[str, float] = {}
    submit(object(), mode, sizes, 1, 2, when, **kw)
    assert set(when) == {f"{kw.get('prefix', 'job')}-{i:05d}" for i in range(len(sizes))}
    return recorder.created


def test_a_volcano_job_asks_for_the_whole_job_in_the_bench_queue_with_webhook_defaults() -> None:
    job = volcano_job("job-00007", 12, 2)
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    assert job["metadata"] == {"name": "job-00007"}
    spec = job["spec"]
    # what vc-webhook-manager's /jobs/mutate would add where a Job says none (v1.14):
    # queue, scheduler, maxRetry (job and task), minAvailable (job and task), task name
    assert spec["queue"] == QUEUE and spec["schedulerName"] == "volcano"
    assert spec["minAvailable"] == 12 and spec["maxRetry"] > 0
    assert "priorityClassName" not in spec and "policies" not in spec
    (task,) = spec["tasks"]
    assert task["name"] == "worker" and task["replicas"] == task["minAvailable"] == 12
    assert task["maxRetry"] > 0
    template = task["template"]
    assert template["metadata"]["labels"] == {BENCH_JOB: "job-00007"}
    (container,) = template["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["spec"]["restartPolicy"] == "Never"


def test_volcano_job_mode_sends_one_job_each_whose_pods_are_the_volcano_modes_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes = [1, 9, 1]
    jobs = sent(monkeypatch, SideMode.VOLCANO_JOB, sizes, priority=HIGH)
    assert sorted(kind for kind, _ in jobs) == ["jobs"] * 3  # no PodGroup, no pod of its own
    by_name = {body["metadata"]["name"]: body for _, body in jobs}
    assert {n: b["spec"]["tasks"][0]["replicas"] for n, b in by_name.items()} == {
        "job-00000": 1,
        "job-00001": 9,
        "job-00002": 1,
    }
    gang = by_name["job-00001"]["spec"]
    assert gang["minAvailable"] == 9 and gang["priorityClassName"] == HIGH
    template = gang["tasks"][0]["template"]["spec"]
    # the same pod as the volcano mode's (PodGroups and pods), priority class included
    plain = sent(monkeypatch, SideMode.VOLCANO, sizes, priority=HIGH)
    pods = [body for kind, body in plain if kind == "pods"]
    assert sorted(kind for kind, _ in plain).count("podgroups") == 3 and len(pods) == 11
    assert all(p["spec"] == template for p in pods)
    assert template["priorityClassName"] == HIGH and template["terminationGracePeriodSeconds"] == 1


def test_volcano_job_is_volcano_alone_behind_no_controller() -> None:
    mode = SideMode("volcano-job")
    assert mode is SideMode.VOLCANO_JOB
    assert mode.needs_volcano and mode.volcano_alone and not mode.controller
    assert mode.scheduler_name == "volcano"
    assert SideMode.VOLCANO.volcano_alone and not SideMode.CALDERA_VOLCANO.volcano_alone
    assert SideMode.CALDERA_VOLCANO.needs_volcano and not SideMode.CALDERA.needs_volcano


class Answers:
    """A list with one pod, then one watch with the events given; stops the watch after it."""

    def __init__(self, listed: list[Any], events: list[tuple[str, Any]]) -> None:
        self.listed, self.events = listed, events
        self.watch: PodWatch | None = None

    def list_objects(self, kind: str, namespace: str, label: str = "") -> tuple[list[Any], str]:
        return self.listed, "1"

    def watch_objects(
        self, kind: str, namespace: str, label: str, fields: str, version: str, timeout: int
    ) -> Iterator[tuple[str, Any]]:
        yield from self.events
        assert self.watch is not None
        self.watch.stop.set()


def test_the_watch_counts_the_pods_volcanos_job_controller_creates() -> None:
    labels = volcano_job("job-00003", 2, 1)["spec"]["tasks"][0]["template"]["metadata"]["labels"]
    # as vc-controller-manager creates them: JOB-TASK-RANK, the template's labels and its own
    made = {**labels, "volcano.sh/job-name": "job-00003", "volcano.sh/task-spec": "worker"}

    def pod(rank: int, node: str = "") -> dict[str, Any]:
        meta = {"name": f"job-00003-worker-{rank}", "labels": made}
        return {"metadata": meta, "spec": {"nodeName": node} if node else {}}

    answers = Answers([pod(0)], [("MODIFIED", pod(0, "n1")), ("ADDED", pod(1, "n2"))])
    watch = PodWatch(cast(KubeClusterAPI, answers))
    answers.watch = watch
    watch.run()
    assert watch.job_of == {"job-00003-worker-0": "job-00003", "job-00003-worker-1": "job-00003"}
    assert set(watch.bound) == {"job-00003-worker-0", "job-00003-worker-1"}


def test_caldera_with_volcano_is_also_compared_with_volcano_jobs() -> None:
    got = ratios({"volcano-job": 20.0, "caldera-volcano": 25.0, "volcano": 50.0})
    assert got == {"caldera-volcano/volcano": 0.5, "caldera-volcano/volcano-job": 1.25}


def test_the_cli_takes_volcano_job_among_the_modes() -> None:
    # a bad --gangs is refused after --modes was read: the mode itself was taken
    result = CliRunner().invoke(app, ["bench", "k8s", "--modes", "volcano-job", "--gangs", "-1"])
    assert result.exit_code == 2 and "--gangs must be 0 or more" in result.output, result.output
    result = CliRunner().invoke(app, ["bench", "k8s", "--modes", "volcano-jobs"])
    assert result.exit_code == 2 and "volcano, volcano-job, caldera" in result.output, result.output
    assert "Traceback" not in result.output
