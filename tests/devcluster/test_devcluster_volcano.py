"""The dev cluster's optional real Volcano (caldera.devcluster.volcano) and the scenario's
nodes as KWOK nodes: what is read from the environment, what is refused in one line, what
vc-scheduler is told. None of this needs Volcano or a control plane."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from caldera.cli.main import app
from caldera.devcluster import DevClusterError, ScenarioNodes
from caldera.devcluster.volcano import (
    SEED_001,
    WEBHOOK_ADMISSIONS,
    conf_text,
    find_volcano,
    scheduler_args,
    volcano_crds,
    webhook_args,
    webhook_configurations,
)
from caldera.sim import parse_scenario

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
}


def _exe(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _crds(folder: Path, names: list[str]) -> Path:
    folder.mkdir()
    for name in names:
        doc = {**CRD, "metadata": {"name": name}}
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return folder


def test_without_the_variable_nor_the_cache_there_is_no_volcano(tmp_path: Path) -> None:
    empty = {"CALDERA_VOLCANO_BINS": str(tmp_path)}  # the cache make cluster-bins fills
    assert find_volcano(empty) is None
    assert find_volcano({**empty, "CALDERA_VOLCANO_SCHEDULER": "  "}) is None


def _cache(root: Path, drop: str = "") -> Path:
    """A Volcano cache as scripts/volcano-bins.sh leaves it (its key folder, `.complete`)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "volcano-bins.sh"
    text = script.read_text()
    version = text.split('VOLCANO_VERSION="${VOLCANO_VERSION:-')[1].split("}")[0]
    apis = text.split('VOLCANO_APIS_VERSION="${VOLCANO_APIS_VERSION:-')[1].split("}")[0]
    folder = root / f"volcano-{version}_apis-{apis}"
    (folder / "bin").mkdir(parents=True)
    for name in ("vc-scheduler", "vc-controller-manager", "vc-webhook-manager"):
        if name != drop:
            _exe(folder / "bin" / name)
    (folder / "crd").mkdir()
    _crds(folder / "crd" / "volcano", ["queues.scheduling.volcano.sh"])
    _crds(folder / "crd" / "jobflow", ["jobflows.flow.volcano.sh"])
    (folder / ".complete").touch()
    return folder


def test_the_cache_is_found_when_the_variables_are_unset(tmp_path: Path) -> None:
    folder = _cache(tmp_path)
    found = find_volcano({"CALDERA_VOLCANO_BINS": str(tmp_path)})
    assert found is not None
    assert found.scheduler == folder / "bin" / "vc-scheduler"
    assert found.controllers == folder / "bin" / "vc-controller-manager"
    assert found.webhook == folder / "bin" / "vc-webhook-manager"
    assert [d["metadata"]["name"] for d in found.manifests()] == [
        "queues.scheduling.volcano.sh",
        "jobflows.flow.volcano.sh",
    ]


def test_the_variables_override_the_cache(tmp_path: Path) -> None:
    _cache(tmp_path / "cache")
    mine = tmp_path / "mine"
    mine.mkdir()
    scheduler = _exe(mine / "vc-scheduler")
    _exe(mine / "vc-controller-manager")
    crds = _crds(mine / "crds", ["queues.scheduling.volcano.sh"])
    found = find_volcano(
        {
            "CALDERA_VOLCANO_BINS": str(tmp_path / "cache"),
            "CALDERA_VOLCANO_SCHEDULER": str(scheduler),
            "CALDERA_VOLCANO_CRDS": str(crds),
        }
    )
    assert found is not None and found.scheduler == scheduler.resolve()
    assert found.webhook is None  # none beside the scheduler: only the webhook tests need one


def test_a_cache_with_a_binary_gone_is_one_line(tmp_path: Path) -> None:
    _cache(tmp_path, drop="vc-webhook-manager")
    with pytest.raises(DevClusterError, match=r"lacks .*vc-webhook-manager$") as caught:
        find_volcano({"CALDERA_VOLCANO_BINS": str(tmp_path)})
    assert "\n" not in str(caught.value)


def test_the_webhook_configurations_name_what_vc_webhook_manager_looks_up() -> None:
    """vc-webhook-manager only patches its CA into configurations named
    `volcano-admission-service-<path>`; it waits for each of the admissions it serves."""
    configurations = webhook_configurations("https://127.0.0.1:9443", "Q0E=")
    by_name = {c["metadata"]["name"]: c for c in configurations}
    assert set(by_name) == {
        "volcano-admission-service" + path.replace("/", "-") for path, *_ in WEBHOOK_ADMISSIONS
    }
    queue = by_name["volcano-admission-service-queues-validate"]
    assert queue["kind"] == "ValidatingWebhookConfiguration"
    (hook,) = queue["webhooks"]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/queues/validate",
        "caBundle": "Q0E=",
    }
    assert hook["rules"][0]["resources"] == ["queues"] and hook["failurePolicy"] == "Fail"
    assert by_name["volcano-admission-service-queues-mutate"]["kind"] == (
        "MutatingWebhookConfiguration"
    )
    assert "volcano-admission-service-podgroups-validate" in by_name
    args = webhook_args("/k/admin.kubeconfig", 9443, Path("/pki"))
    assert "--listen-address=127.0.0.1" in args and "--port=9443" in args
    enabled = next(a for a in args if a.startswith("--enabled-admission="))
    assert enabled.split("=", 1)[1].split(",") == [path for path, *_ in WEBHOOK_ADMISSIONS]
    assert all("=127.0.0.1" in a for a in args if "address=" in a)


def test_the_controllers_are_found_beside_the_scheduler(tmp_path: Path) -> None:
    scheduler = _exe(tmp_path / "vc-scheduler")
    controllers = _exe(tmp_path / "vc-controller-manager")
    crds = _crds(tmp_path / "crds", ["queues.scheduling.volcano.sh"])
    found = find_volcano(
        {"CALDERA_VOLCANO_SCHEDULER": str(scheduler), "CALDERA_VOLCANO_CRDS": str(crds)}
    )
    assert found is not None
    assert (found.scheduler, found.controllers) == (scheduler.resolve(), controllers.resolve())
    assert [d["metadata"]["name"] for d in found.manifests()] == ["queues.scheduling.volcano.sh"]


@pytest.mark.parametrize(
    ("present", "message"),
    [
        ((), "CALDERA_VOLCANO_SCHEDULER=.*: no such file"),
        (("scheduler",), "CALDERA_VOLCANO_CONTROLLERS=.*vc-controller-manager: no such file"),
        (("scheduler", "controllers"), "CALDERA_VOLCANO_CRDS is not set"),
        (("scheduler", "controllers", "empty-crds"), "no CRD manifests there"),
    ],
)
def test_a_missing_piece_is_one_line(
    tmp_path: Path, present: tuple[str, ...], message: str
) -> None:
    env = {"CALDERA_VOLCANO_SCHEDULER": str(tmp_path / "vc-scheduler")}
    if "scheduler" in present:
        _exe(tmp_path / "vc-scheduler")
    if "controllers" in present:
        _exe(tmp_path / "vc-controller-manager")
    if "empty-crds" in present:
        (tmp_path / "crds").mkdir()
        env["CALDERA_VOLCANO_CRDS"] = str(tmp_path / "crds")
    with pytest.raises(DevClusterError, match=message) as caught:
        find_volcano(env)
    assert "\n" not in str(caught.value)


def test_volcanos_crds_must_hold_queue_and_podgroup(tmp_path: Path) -> None:
    _exe(tmp_path / "vc-scheduler")
    _exe(tmp_path / "vc-controller-manager")
    env = {
        "CALDERA_VOLCANO_SCHEDULER": str(tmp_path / "vc-scheduler"),
        "CALDERA_VOLCANO_CRDS": str(_crds(tmp_path / "crds", ["queues.scheduling.volcano.sh"])),
    }
    bins = find_volcano(env)
    assert bins is not None
    with pytest.raises(DevClusterError, match=r"lacks the CRD podgroups\.scheduling\.volcano\.sh"):
        volcano_crds(bins)


def test_crds_come_from_several_folders_and_none_twice(tmp_path: Path) -> None:
    """Volcano keeps its CRDs in two folders (volcano/bases, jobflow/bases; without the
    jobflow ones vc-controller-manager starts no controller); an older copy of one CRD given
    as well (volcano/v1beta1) is a one-line error, not a 409 from the API server."""
    _exe(tmp_path / "vc-scheduler")
    _exe(tmp_path / "vc-controller-manager")
    bases = _crds(tmp_path / "bases", ["queues.scheduling.volcano.sh"])
    flow = _crds(tmp_path / "flow", ["jobflows.flow.volcano.sh"])
    env = {
        "CALDERA_VOLCANO_SCHEDULER": str(tmp_path / "vc-scheduler"),
        "CALDERA_VOLCANO_CRDS": f"{bases}:{flow}",
    }
    bins = find_volcano(env)
    assert bins is not None
    assert [d["metadata"]["name"] for d in bins.manifests()] == [
        "queues.scheduling.volcano.sh",
        "jobflows.flow.volcano.sh",
    ]
    old = _crds(tmp_path / "v1beta1", ["queues.scheduling.volcano.sh"])
    bins = find_volcano({**env, "CALDERA_VOLCANO_CRDS": f"{bases}:{old}"})
    assert bins is not None
    with pytest.raises(DevClusterError, match=r"queues\.scheduling\.volcano\.sh is given twice"):
        bins.manifests()


def test_vc_scheduler_runs_seed_001_as_written(tmp_path: Path) -> None:
    conf = yaml.safe_load(conf_text(SEED_001))
    assert [a.strip() for a in conf["actions"].split(",")] == [
        "enqueue", "allocate", "preempt", "reclaim", "backfill",
    ]  # fmt: skip
    (tier,) = conf["tiers"]
    assert [p["name"] for p in tier["plugins"]] == [
        "priority", "gang", "conformance", "drf", "predicates", "proportion", "nodeorder",
    ]  # fmt: skip
    args = scheduler_args("/k/admin.kubeconfig", tmp_path / "conf", 0.5)
    assert "--schedule-period=0.500s" in args and "--scheduler-name=volcano" in args
    assert "--leader-elect=false" in args
    # every listener it has stays on the loopback interface
    listeners = [a for a in args if "address=" in a]
    assert listeners and all("=127.0.0.1:" in a for a in listeners)


def test_scenario_nodes_keep_the_scenarios_order_by_name() -> None:
    scenario = parse_scenario(
        {
            "cluster": {
                "nodes": [
                    {"prefix": "Zeta_", "count": 2, "gpus": 8, "gpu_model": "H100"},
                    {"prefix": "alpha", "count": 11, "gpus": 4, "gpu_model": "A100"},
                ]
            },
            "queues": [{"name": "q"}],
            "jobs": [],
        }
    )
    nodes = ScenarioNodes(scenario.nodes)
    names = nodes.names()
    assert nodes.count == 13 and names == sorted(names) and len(set(names)) == 13
    assert all(n == n.lower() and "_" not in n for n in names)
    manifests = nodes.manifests()
    first = manifests[0]
    assert first["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert first["metadata"]["labels"]["nvidia.com/gpu.product"] == "H100"
    assert manifests[-1]["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cluster": {"nodes": [{"prefix": "g", "count": 1, "gpus": 8}]},
                "queues": [{"name": "q"}],
                "jobs": [
                    {"name": "a", "queue": "q", "type": "normal", "submit": 0, "duration": 60}
                ],
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runtime", "moon"], "unknown runtime 'moon'"),
        (["--runtime", "k8s", "--modes", "volcano"], "mode volcano needs the real Volcano"),
        (["--runtime", "k8s", "--modes", "nope"], "unknown mode 'nope'"),
        (["--runtime", "k8s", "--compress", "0.5"], "at least 1"),
    ],
)
def test_compare_on_k8s_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.delenv("CALDERA_VOLCANO_SCHEDULER", raising=False)
    monkeypatch.setenv("CALDERA_VOLCANO_BINS", str(tmp_path / "no-volcano-cache"))
    result = CliRunner().invoke(app, ["compare", str(_scenario_file(tmp_path)), *args])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
