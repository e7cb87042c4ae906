"""One request path (issue 35 item 2): a REST submission, a scenario's job and a TrainingJob
each resolve into one typed record (`caldera.runtime.requests.RequestRecord`), whose wire
form is what the service stores and whose `spec` is the one conversion to a `JobSpec`.

The same ask written for each front end (each with its own key names, which are contracts)
must be the same job; the wire form must round-trip, read the rows stored before it (it
extends the stored keys, never renames them), and carry a time-sharing queue's share."""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType

import pytest

from caldera.k8s import read_training_job
from caldera.k8s.settings import KubeSettings, NamespaceBinding
from caldera.model import (
    Checkpointing,
    JobType,
    Queue,
    TopologyMode,
    TopologySpec,
    time_share,
)
from caldera.runtime.requests import RequestRecord
from caldera.service.api.schemas import JobRequest
from caldera.sim.scenario import JobModel, job_spec_from_model, request_record
from caldera.trainingjob_api import training_job

# The keys the service stored for a request before the record existed (`normalised()`).
STORED_BEFORE = (
    "name", "queue", "type", "tasks", "gpu", "cpu", "memory", "min_available", "command",
    "env", "workdir", "labels", "topology", "expected_duration", "checkpoint", "max_retries",
    "gpu_model", "gpu_profile",
)  # fmt: skip


def _rest() -> RequestRecord:
    return JobRequest.model_validate(
        {
            "name": "train",
            "queue": "team",
            "type": "large-job",
            "tasks": 2,
            "gpus": 2,
            "min_available": 1,
            "cpu": "4",
            "memory": "16Gi",
            "command": ["train"],
            "checkpoint": {"interval": 600, "cost": 30},
            "expected_duration": 3600,
            "max_retries": 2,
            "topology": {"mode": "hard", "highest_tier": 2},
        }
    ).record()


def _scenario() -> JobModel:
    return JobModel.model_validate(
        {
            "name": "train",
            "queue": "team",
            "type": "large-job",
            "submit": 100,
            "duration": 7200,
            "tasks": 2,
            "gpus_per_task": 2,
            "min_available": 1,
            "cpu_per_task": "4",
            "memory_per_task": "16Gi",
            "checkpoint_interval": 600,
            "checkpoint_cost": 30,
            "expected_duration": 3600,
            "max_retries": 2,
            "topology": {"mode": "hard", "highest_tier": 2},
        }
    )


def test_one_ask_is_one_job_whichever_front_end_it_comes_through() -> None:
    rest = _rest().spec("j", 100.0, "team")
    assert (rest.tasks, rest.gpu, rest.cpu, rest.memory, rest.min_available) == (
        2, 2000, 4000, 16384, 1,
    )  # fmt: skip
    assert rest.checkpoint == Checkpointing(600, 30, True)
    assert rest.topology == TopologySpec(TopologyMode.HARD, 2)

    submission = job_spec_from_model(_scenario(), "train", 100.0)
    assert submission.invalid is None
    assert replace(submission.spec, id="j", user="team", duration=None) == rest
    assert submission.spec.duration == 7200

    manifest = training_job(
        "train",
        ["train"],
        queue="team",
        type="large-job",
        tasks=2,
        gpus=2,
        min_available=1,
        cpu="4",
        memory="16Gi",
        checkpoint_interval=600,
        checkpoint_cost=30,
        topology={"mode": "hard", "highest_tier": 2},
        expected_duration=3600,
        max_retries=2,
    )
    manifest["metadata"]["namespace"] = "team"
    settings = KubeSettings(namespaces=MappingProxyType({"team": NamespaceBinding(("team",))}))
    kube = read_training_job(manifest, settings, {"team": Queue("team")}, 100.0).spec
    assert kube.user == "team" and kube.namespace == "team"  # a TrainingJob's user
    assert replace(kube, id="j", namespace="default") == rest


def test_a_scenario_job_keeps_its_problems_beside_its_record() -> None:
    model = _scenario().model_copy(update={"gpus_per_task": 0.5})
    record, problems = request_record(model, "train")
    assert problems == ["fractional gpus_per_task need tasks: 1 (a GPU share is for one task)"]
    assert record.gpu == 1000  # the harmless fallback: the job is submitted and rejected


def test_the_wire_form_is_json_and_reads_back_as_the_same_record() -> None:
    record = RequestRecord(
        name="train",
        queue="team",
        type=JobType.DEBUG,
        tasks=1,
        gpu=1000,
        cpu=500,
        memory=1024,
        min_available=1,
        labels={"protected": "true"},
        namespace="research",
        priority_class_name="system-cluster-critical",
        checkpoint=Checkpointing(60.0, 2.5, False),
        expected_duration=90.0,
        topology=TopologySpec(TopologyMode.SOFT, 1),
        gpu_models=("A100", "H100"),
        max_retries=3,
        gpu_profile=None,
        duration=80.0,
        command=("python", "train.py"),
        env={"SEED": "1"},
        workdir="/home/alice",
        trust_progress=True,
    )
    wire = json.loads(json.dumps(record.to_wire()))
    assert set(STORED_BEFORE) <= set(wire)  # extended, never renamed
    back = RequestRecord.from_wire(wire)
    assert back == record
    assert back.spec("j", 5.0, "alice") == record.spec("j", 5.0, "alice")


def test_a_request_stored_before_the_record_still_reads() -> None:
    """A row of an older server: no cpu, memory, workdir, topology, time share, trust."""
    old = {
        "name": "job",
        "queue": "team-a",
        "type": "normal",
        "tasks": 1,
        "gpu": 8000,
        "min_available": 1,
        "command": ["true"],
        "env": {},
        "labels": {},
        "checkpoint": {"interval": None, "cost": 0.0, "on_sigterm": True},
        "max_retries": 0,
    }
    record = RequestRecord.from_wire(old)
    spec = record.spec("j-1", 10.0, "ops")
    assert (spec.gpu, spec.cpu, spec.memory, spec.time_shared, spec.topology) == (
        8000, 0, 0, 0, None,
    )  # fmt: skip
    assert not record.trust_progress and record.workdir is None
    assert {k: record.to_wire()[k] for k in old} == old


def test_the_rest_api_stores_its_record_s_wire_form() -> None:
    body = JobRequest.model_validate({"queue": "team", "gpus": 0.5, "command": ["/bin/x"]})
    stored = body.normalised()
    assert stored == body.record().to_wire()
    assert stored["name"] == "x" and stored["gpu"] == 500
    assert set(STORED_BEFORE) <= set(stored)


def test_a_time_sharing_queue_s_share_is_kept_in_the_record() -> None:
    """A restart rebuilds the job from the stored record: the share must be in it."""
    queue = Queue("dev", time_sharing=4)
    record = RequestRecord(name="nb", queue="dev", command=("jupyter",))
    spec = time_share(record.spec("j", 1.0, "alice"), queue)
    shared = record.shared_as(spec)
    assert (shared.gpu, shared.time_shared) == (250, 4)
    assert RequestRecord.from_wire(shared.to_wire()).spec("j", 1.0, "alice") == spec
    assert record.shared_as(record.spec("j", 1.0, "alice")) is record


def test_the_record_is_frozen_all_the_way_down() -> None:
    record = RequestRecord(name="a", queue="q", labels={"k": "v"}, env={"A": "1"})
    with pytest.raises(TypeError):
        record.labels["k"] = "w"  # type: ignore[index]
    with pytest.raises(TypeError):
        record.env["A"] = "2"  # type: ignore[index]
    with pytest.raises(AttributeError):
        record.gpu = 2000  # type: ignore[misc]
