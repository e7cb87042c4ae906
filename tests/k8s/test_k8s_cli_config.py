"""`caldera k8s render`, the configuration files `caldera k8s` reads, the controller loop,
and the package's public names."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_support import World
from typer.testing import CliRunner

import caldera.k8s
from caldera.cli.main import app
from caldera.core import UNIX_WEEK_OFFSET
from caldera.k8s import ClusterUnavailable, FakeCluster, KubeRuntime
from caldera.k8s.config import KubeConfigError, load_kube_config, load_render_input
from caldera.k8s.controller import Controller
from caldera.sim import parse_scenario

SCENARIO = {
    "cluster": {
        "nodes": [
            {
                "prefix": "h100",
                "count": 4,
                "gpus": 8,
                "gpu_model": "H100",
                "nodes_per_tier1": 4,
                "gpu_memory": "80Gi",
            },
        ]
    },
    "queues": [{"name": "prod", "weight": 80, "deserved": {"gpu": 24}, "reclaimable": False}],
    "jobs": [
        {
            "name": "big",
            "queue": "prod",
            "type": "large-job",
            "submit": 0,
            "duration": 3600,
            "tasks": 3,
            "gpus_per_task": 8,
            "topology": {"mode": "hard", "highest_tier": 1},
        },
        {
            "name": "nb",
            "queue": "prod",
            "type": "debug",
            "submit": 5,
            "duration": 60,
            "gpus_per_task": 0.5,
        },
        {
            "name": "wide",
            "queue": "prod",
            "type": "normal",
            "submit": 9,
            "duration": 60,
            "tasks": 2,
            "gpus_per_task": 8,
        },
        {"name": "nowhere", "queue": "missing", "type": "normal", "submit": 9, "duration": 60},
    ],
}


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def render(*args: str) -> Any:
    return CliRunner().invoke(app, ["k8s", "render", *args])


def test_render_a_scenario_prints_the_pods_the_first_cycle_starts(tmp_path: Path) -> None:
    result = render(str(write(tmp_path, "s.yaml", SCENARIO)), "--image", "img:1")
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds[:5] == ["PriorityClass"] * 4 + ["Queue"]
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert sorted(p["metadata"]["name"] for p in pods) == [
        "big-1-0",
        "big-1-1",
        "big-1-2",
        "nb-1-0",
    ]
    assert all(p["spec"]["containers"][0]["image"] == "img:1" for p in pods)
    share = next(p for p in pods if p["metadata"]["name"] == "nb-1-0")
    assert share["spec"]["containers"][0]["resources"]["requests"] == {
        "volcano.sh/gpu-memory": "40960"
    }
    assert "# default/nowhere: rejected (unknown queue 'missing')" in result.stdout
    assert "# not started in the first cycle on an empty cluster: default/wide" in result.stdout


def test_render_without_an_image_uses_a_placeholder_and_says_so(tmp_path: Path) -> None:
    result = render(str(write(tmp_path, "s.yaml", SCENARIO)))
    assert result.exit_code == 0
    assert "example.invalid/replace-me:latest" in result.stdout
    assert "# no image given" in result.stdout


def test_render_a_config_prints_classes_queues_and_with_rbac_the_controllers_role(
    tmp_path: Path,
) -> None:
    config = {
        "queues": [{"name": "team-a", "deserved": {"gpu": 8}}],
        "tokens": [{"token": "x" * 12, "user": "u"}],
        "kubernetes": {
            "state_namespace": "gpu-platform",
            "namespaces": {"team-a": {"queues": ["team-a"]}},
        },
    }
    result = render(str(write(tmp_path, "c.yaml", config)), "--crds", "--rbac")
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRole",
        "Role",
        "RoleBinding",
        "Namespace",  # the served one, labelled for Pod Security Admission
        "RoleBinding",
        *["ClusterRole"] * 3,
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",  # a pod's report path (admission.report_policy)
        "ValidatingAdmissionPolicyBinding",
        *["PriorityClass"] * 4,
        "Queue",
    ]
    assert docs[2]["metadata"]["namespace"] == "gpu-platform"
    job_bindings = [
        d
        for d in docs
        if d["kind"] == "RoleBinding" and d["metadata"]["name"] == ("caldera-controller-jobs")
    ]
    assert [d["metadata"]["namespace"] for d in job_bindings] == ["team-a"]
    served = docs[8]["metadata"]
    assert served["name"] == "team-a"
    assert served["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert docs[-1]["spec"]["deserved"] == {"nvidia.com/gpu": "8"}


@pytest.mark.parametrize(
    ("content", "want"),
    [
        ("queues: [", "not valid YAML"),
        (
            {"queues": [{"name": "q"}], "kubernetes": {"namespace": "x"}},
            "kubernetes.namespace: unknown key",
        ),
        (
            {
                "queues": [{"name": "q"}],
                "kubernetes": {"namespaces": {"kube-system": {"queues": ["q"]}}},
            },
            "kube-system is the cluster's own",
        ),
        (
            {"queues": [{"name": "q"}], "kubernetes": {"namespaces": {"t": {"queues": ["nope"]}}}},
            "kubernetes.namespaces.t.queues: unknown queue 'nope'",
        ),
        ({"queues": [{"name": "q", "weight": -1}]}, "queues.0.weight"),
        ({"cluster": {"nodes": []}, "jobs": []}, "cluster.nodes"),
    ],
    ids=[
        "bad yaml",
        "unknown kubernetes key",
        "kube-system is never served",
        "a binding to an unknown queue",
        "bad queue",
        "bad scenario",
    ],
)
def test_render_a_bad_file_fails_in_one_line(tmp_path: Path, content: Any, want: str) -> None:
    path = write(tmp_path, "bad.yaml", content)
    result = render(str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"caldera: error: {path}")
    assert want in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_config_without_queues_takes_the_clusters_and_runs_on_unix_time(tmp_path: Path) -> None:
    loaded = load_kube_config(write(tmp_path, "c.yaml", {"policy": {"grace_period": 30}}))
    assert loaded.queues == ()
    assert loaded.policy.grace_period == 30
    assert loaded.policy.week_offset == UNIX_WEEK_OFFSET
    with_queues = load_kube_config(write(tmp_path, "q.yaml", {"queues": [{"name": "a"}]}))
    assert with_queues.policy.week_offset == UNIX_WEEK_OFFSET
    assert load_kube_config(None).settings.state_namespace == "caldera-system"


def test_kubernetes_settings_are_read_from_the_config(tmp_path: Path) -> None:
    data = {
        "queues": [{"name": "a"}],
        "kubernetes": {
            "namespaces": {
                "jobs": {"queues": ["a"]},
                "serving": {"queues": ["a"], "critical": True, "service_accounts": ["infer"]},
            },
            "gpu_share": {"resource": "nvidia.com/gpumem-percentage", "unit": "percent"},
            "labels": {"hypernode": "example.com/leaf"},
            "bind_timeout": 60,
            "ready_timeout": 90,
        },
    }
    settings = load_kube_config(write(tmp_path, "c.yaml", data)).settings
    assert list(settings.namespaces) == ["jobs", "serving"]
    assert settings.gpu_share.unit == "percent"
    assert settings.labels.hypernode == "example.com/leaf"
    assert settings.labels.spine == "caldera.io/spine"
    serving, jobs = settings.binding("serving"), settings.binding("jobs")
    assert serving is not None and serving.critical and serving.service_accounts == ("infer",)
    assert jobs is not None and not jobs.critical and jobs.default_queue == "a"
    assert settings.binding("kube-system") is None and settings.binding("elsewhere") is None
    assert (settings.bind_timeout, settings.ready_timeout) == (60, 90)


def test_a_scenario_and_a_config_are_told_apart(tmp_path: Path) -> None:
    config, scenario = load_render_input(write(tmp_path, "s.yaml", SCENARIO), parse_scenario)
    assert scenario is not None and len(scenario.nodes) == 4
    assert [q.name for q in config.queues] == ["prod"]
    config, scenario = load_render_input(
        write(tmp_path, "c.yaml", {"queues": [{"name": "a"}]}), parse_scenario
    )
    assert scenario is None
    with pytest.raises(KubeConfigError, match=r"[Nn]o such file"):
        load_render_input(tmp_path / "missing.yaml", parse_scenario)


# -- the loop ----------------------------------------------------------------------------------


def test_the_controller_loop_admits_and_starts_then_stops_when_asked() -> None:
    world = World().hypernode("a", "n", count=1)
    world.start()
    world.submit("job")
    stop = threading.Event()
    controller = Controller(world.rt, resync=0.05, min_gap=0.0)
    runner = threading.Thread(target=controller.run, args=(stop,), kwargs={"watches": False})
    runner.start()
    try:
        for _ in range(200):
            if controller.steps >= 2:
                break
            stop.wait(0.01)
    finally:
        stop.set()
        runner.join(timeout=5)
    assert not runner.is_alive()
    assert world.state("job") == "Running"


class FlakyCluster(FakeCluster):
    """Unreachable for the first two lists of nodes, then fine."""

    failures: int = 2

    def list_nodes(self, label_selector: str = "") -> list[dict[str, Any]]:
        if self.failures:
            self.failures -= 1
            raise ClusterUnavailable("cannot reach the Kubernetes API at fake://: timed out")
        return super().list_nodes(label_selector)


def test_the_loop_outlives_an_unreachable_api_server(caplog: pytest.LogCaptureFixture) -> None:
    world = World()
    world.cluster = FlakyCluster()
    world.hypernode("a", "n", count=1)
    world.submit("job")
    runtime = KubeRuntime(
        world.cluster,
        world.config.queues,
        world.config.policy,
        world.settings,
        clock=world.cluster.clock,
    )
    world.runtime = runtime
    stop = threading.Event()
    controller = Controller(runtime, resync=0.05, min_gap=0.0)
    runner = threading.Thread(target=controller.run, args=(stop,), kwargs={"watches": False})
    runner.start()
    try:
        for _ in range(400):
            if controller.steps >= 1:
                break
            stop.wait(0.01)
    finally:
        stop.set()
        runner.join(timeout=10)
    assert controller.steps >= 1
    assert "cannot reach the Kubernetes API at fake://: timed out (retrying in 1 s)" in caplog.text
    assert world.state("job") == "Running"
    assert world.status("job")["state"] == "Running"
    assert world.pinned("job") == ["n-0"]


# -- public names ------------------------------------------------------------------------------


def test_the_public_api_is_pinned() -> None:
    assert sorted(caldera.k8s.__all__) == sorted(
        [
            "Blocked",
            "ClusterAPI",
            "ClusterConflict",
            "ClusterError",
            "ClusterUnavailable",
            "EvictionBlocked",
            "FakeClock",
            "FakeCluster",
            "Forbidden",
            "GpuShare",
            "Invalid",
            "KubeJob",
            "KubeRuntime",
            "KubeSettings",
            "KubeStats",
            "KubeTask",
            "NamespaceBinding",
            "NodeLabels",
            "NodeState",
            "Owner",
            "Purpose",
            "QuotaExceeded",
            "RenderError",
            "VolcanoMissing",
            "Workload",
            "foreign_usage",
            "job_service",
            "pod_group",
            "priority_classes",
            "queue_from_volcano",
            "read_nodes",
            "read_training_job",
            "refusal",
            "render_start",
            "task_pod",
            "to_yaml",
            "volcano_queue",
        ]
    )
    for name in caldera.k8s.__all__:
        assert getattr(caldera.k8s, name) is not None


class OneEventWatch(FakeCluster):
    """Each watch yields one event and ends, as a server closing watches early would."""

    watches: int = 0

    def watch(self, kind: str, namespace: str, label_selector: str, timeout_seconds: int) -> Any:
        self.watches += 1
        return iter(["MODIFIED"])


def test_watch_events_wake_the_loop_and_short_watches_do_not_spin() -> None:
    world = World()
    world.cluster = OneEventWatch()
    world.hypernode("a", "n", count=1).start()
    stop = threading.Event()
    controller = Controller(world.rt, resync=30.0, min_gap=0.0)
    runner = threading.Thread(target=controller.run, args=(stop,))
    runner.start()
    try:
        stop.wait(0.5)
    finally:
        stop.set()
        runner.join(timeout=5)
    assert not runner.is_alive()
    assert controller.steps >= 2  # the events woke it long before the 30 s resync
    assert isinstance(world.cluster, OneEventWatch)
    # nodes, and pods + TrainingJobs in each of the 3 served namespaces: seven watches,
    # restarted at most once a second
    assert world.cluster.watches <= 14
