"""The TrainingJob resource: its CRD, how a manifest reads as a job (the one request → spec
path of the Kubernetes runtime), the status and its conditions, and submission from the SDK
and the CLI (against the local API stub; the real API server: tests/k8s_real)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver_stub import StubAPIServer
from k8s_support import SETTINGS
from typer.testing import CliRunner

from caldera.cli.main import app
from caldera.errors import RecordError
from caldera.k8s import read_training_job
from caldera.k8s.access.admission import POLICY_NAME, admission_policy
from caldera.k8s.crd import CONDITION_TYPES, training_job, training_job_crd
from caldera.k8s.jobs import KubeJob
from caldera.k8s.reporting.status import duration_text, restore, status_body
from caldera.model import JobState, JobType, Queue
from caldera.runtime.wire import ByName
from caldera.trainingjob_api import GROUP, PLURAL, VERSION

QUEUES = {"team": Queue("team")}
JOBS = f"{GROUP}/{VERSION}"


def read(manifest: dict[str, Any], namespace: str = "team") -> Any:
    obj = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    return read_training_job(obj, SETTINGS, QUEUES, 100.0)


def test_the_crd_has_a_status_subresource_printer_columns_and_an_immutable_spec() -> None:
    crd = training_job_crd()
    version = crd["spec"]["versions"][0]
    assert crd["metadata"]["name"] == "trainingjobs.caldera.io"
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Queue", "Type", "State", "GPUs", "Wait", "Age"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    rules = [r["rule"] for r in schema["spec"]["x-kubernetes-validations"]]
    assert "self == oldSelf" in rules
    assert schema["spec"]["properties"]["type"]["enum"] == [t.value for t in JobType]
    conditions = schema["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(CONDITION_TYPES) >= {"Admitted", "Running", "Preempted", "Finished"}


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({"tasks": 4, "gpus": 8, "type": "large-job"}, (4, 8000, "large-job", "team")),
        ({"gpus": 0.5}, (1, 500, "normal", "team")),
        ({"tasks": 2, "gpus": 0}, (2, 0, "normal", "team")),
        ({"queue": "team", "gpus": 2, "min_available": 1, "tasks": 3}, (3, 2000, "normal", "team")),
    ],
    ids=["whole GPUs in the limits", "a share in the gpus field", "no GPU", "elastic"],
)
def test_a_manifest_the_sdk_writes_reads_back_as_the_job_it_asked_for(
    fields: dict[str, Any], want: tuple[int, int, str, str]
) -> None:
    spec = read(training_job("job", ["python", "train.py"], image="i", **fields)).spec
    assert (spec.tasks, spec.gpu, spec.type.value, spec.queue) == want
    assert spec.min_available == fields.get("min_available", fields.get("tasks", 1))
    assert spec.submit == 100.0


def test_checkpoint_topology_and_requests_reach_the_spec() -> None:
    manifest = training_job(
        "job",
        ["x"],
        tasks=2,
        gpus=8,
        cpu="16",
        memory="64Gi",
        checkpoint_interval=600,
        checkpoint_cost=30,
        topology={"mode": "hard", "highest_tier": 1},
        max_retries=2,
        expected_duration=3600,
    )
    spec = read(manifest).spec
    assert (spec.cpu, spec.memory) == (16_000, 64 * 1024)
    assert (spec.checkpoint.interval, spec.checkpoint.cost) == (600, 30)
    assert spec.topology is not None and spec.topology.mode.value == "hard"
    assert (spec.max_retries, spec.expected_duration) == (2, 3600)


def test_gpus_given_twice_and_differently_are_refused_in_one_line() -> None:
    manifest = training_job("job", ["x"], gpus=8)
    manifest["spec"]["tasks"][0]["gpus"] = 4
    with pytest.raises(RecordError, match=r"disagrees with the containers. nvidia\.com/gpu"):
        read(manifest)


def test_an_unserved_namespace_is_refused_whatever_the_job() -> None:
    with pytest.raises(RecordError, match="serves no jobs in namespace kube-system"):
        read(training_job("job", ["x"]), namespace="kube-system")


def test_the_status_carries_what_a_restarted_controller_needs_and_no_tasks() -> None:
    spec = read(training_job("job", ["x"], tasks=2, gpus=8)).spec
    job = KubeJob(spec=spec, state=JobState.RUNNING, namespace="team", name="job", uid="u")
    job.attempts, job.first_start, job.evictions = 2, 160.0, 1
    job.condition("Running", True, "Running", "2 pod(s) running", 170.0)
    body = status_body(job, ByName(()))
    assert (body["state"], body["gpus"], body["wait"], body["attempts"]) == (
        "Running",
        "16",
        "1m0s",
        2,
    )
    assert body["conditions"][0]["type"] == "Running"
    assert "placement" not in str(body["controller"])  # per-task state lives on the pods
    again = KubeJob(spec=spec, state=JobState.RUNNING, namespace="team", name="job", uid="u")
    restore(again, body, ByName(()))
    assert (again.attempts, again.first_start, again.evictions) == (2, 160.0, 1)
    assert again.conditions["Running"].since == job.conditions["Running"].since


@pytest.mark.parametrize(
    ("seconds", "want"),
    [(0, "0s"), (59.9, "59s"), (192, "3m12s"), (7500, "2h5m"), (270000, "3d3h")],
)
def test_durations_read_like_kubectl(seconds: float, want: str) -> None:
    assert duration_text(seconds) == want


def test_the_admission_policy_names_every_served_namespace_and_the_critical_ones() -> None:
    policy, binding = admission_policy(SETTINGS)
    assert (policy["kind"], binding["spec"]["policyName"]) == (
        "ValidatingAdmissionPolicy",
        POLICY_NAME,
    )
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == [PLURAL]
    expressions = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert '["other", "serving", "team"]' in expressions
    assert 'request.namespace in ["serving"]' in expressions
    assert "check('critical').allowed()" in expressions
    assert binding["spec"]["validationActions"] == ["Deny"]


# -- the SDK and the CLI, against the API stub ------------------------------------------------


@pytest.fixture
def stub() -> Iterator[StubAPIServer]:
    server = StubAPIServer().start()
    yield server
    server.stop()


def kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": url}}],
                "users": [{"name": "bob", "user": {"token": "bob-token"}}],
                "contexts": [
                    {
                        "name": "stub",
                        "context": {"cluster": "stub", "user": "bob", "namespace": "team"},
                    }
                ],
                "current-context": "stub",
            }
        )
    )
    return str(path)


def test_the_sdk_submits_waits_and_cancels_as_the_user(stub: StubAPIServer, tmp_path: Path) -> None:
    from caldera.sdk.kube import KubeClient

    with KubeClient(kubeconfig(tmp_path, stub.url)) as kube:
        created = kube.submit("bert", ["torchrun", "train.py"], image="i", tasks=2, gpus=8)
        post = stub.calls("POST", f"/{PLURAL}")[-1]
        assert post.path == f"/apis/{JOBS}/namespaces/team/{PLURAL}"  # the context's
        assert post.headers["authorization"] == "Bearer bob-token"
        assert created["spec"]["tasks"][0]["replicas"] == 2
        stub.update(JOBS, PLURAL, "bert", "team", {"status": {"state": "Running"}})
        stub.update(
            JOBS,
            PLURAL,
            "bert",
            "team",
            {"status": {"conditions": [{"type": "Running", "status": "True"}]}},
        )
        assert kube.wait("bert", condition="Running", timeout=5)["status"]["state"] == "Running"
        assert [j["metadata"]["name"] for j in kube.jobs(state="Running")] == ["bert"]
        kube.cancel("bert")
    assert stub.get(JOBS, PLURAL, "bert", "team") is None


def test_the_cli_submits_and_reports_errors_in_one_line(
    stub: StubAPIServer, tmp_path: Path
) -> None:
    config = kubeconfig(tmp_path, stub.url)
    runner = CliRunner()
    done = runner.invoke(
        app,
        ["k8s", "submit", "job", "--image", "i", "--gpus", "8", "--kubeconfig", config,
         "--", "python", "train.py"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert done.stdout == "team/job\n"
    body = stub.calls("POST", f"/{PLURAL}")[-1].body
    assert body["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"] == [
        "python",
        "train.py",
    ]
    stub.fail(
        "POST",
        f"/apis/{JOBS}/namespaces/team/{PLURAL}",
        403,
        "user bob may not submit type critical in team",
    )
    done = runner.invoke(
        app, ["k8s", "submit", "chat", "--type", "critical", "--kubeconfig", config, "--", "x"]
    )
    assert done.exit_code == 1
    assert done.stderr.strip().endswith("user bob may not submit type critical in team")
    assert done.stderr.count("\n") == 1
    missing = runner.invoke(app, ["k8s", "status", "nope", "--kubeconfig", config])
    assert missing.exit_code == 1 and "not found" in missing.stderr
