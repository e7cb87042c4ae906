"""deploy/helm/caldera: `helm lint`, the generated parts current, and `helm template` for four
value sets giving what caldera's own Python gives for the same caldera.yaml — the admission
policy, the controller's RBAC rules, the CRD — plus the restricted Deployment, the metrics
Service and the optional monitoring objects. (Checked against a real API server, installed,
upgraded and uninstalled in tests/k8s_real/test_real_helm.py and test_real_zz_chart_lifecycle.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from caldera.k8s.access import admission
from caldera.k8s.config import parse_kube_config
from caldera.k8s.crd import training_job_crd

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "caldera"

BINDINGS = {
    "team-a": {"queues": ["team-a"]},
    "serving": {"queues": ["serving", "batch"], "critical": True, "service_accounts": ["infer"]},
}
QUEUES = [{"name": "team-a", "weight": 1}, {"name": "serving", "weight": 1}, {"name": "batch"}]

# name → values: what an operator would set
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "production": {
        "image": {"repository": "registry.corp/caldera", "digest": "sha256:" + "ab" * 32},
        "imagePullSecrets": [{"name": "corp-registry"}],
        "config": {"queues": QUEUES, "kubernetes": {"namespaces": BINDINGS}},
        "rbac": {
            "bindings": {
                "team-a": {"submit": [{"kind": "Group", "name": "ml-team"}]},
                "serving": {
                    "submit": [{"kind": "Group", "name": "oncall"}],
                    "critical": [{"kind": "User", "name": "lead@example.com"}],
                },
            }
        },
    },
    "namespaces": {
        # Behind kube-scheduler: no PodGroup is written, so none may be.
        "config": {
            "queues": QUEUES,
            "kubernetes": {"namespaces": BINDINGS, "scheduler_name": "default-scheduler"},
        },
        "namespaces": {"create": True, "podSecurity": "baseline"},
        "controller": {"replicas": 1},
    },
    "monitoring": {
        "config": {"queues": QUEUES, "kubernetes": {"namespaces": BINDINGS}},
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
            "prometheusRule": {"enabled": True},
            "grafanaDashboard": {"enabled": True},
        },
        "rbac": {"userRoles": False},
    },
}


@pytest.fixture(scope="module")
def helm() -> str:
    script = ROOT / "scripts" / "helm-bin.sh"
    found = subprocess.run([str(script), "--path"], capture_output=True, text=True, check=False)
    if found.returncode == 0:
        return found.stdout.strip()
    if os.environ.get("CI") != "true":
        pytest.skip("Helm not built (make cluster-bins builds it)")
    built = subprocess.run([str(script)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return built.stdout.strip()


def template(helm: str, values: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = subprocess.run(
        [helm, "template", "caldera", str(CHART), "-n", "caldera-system", "--values", str(path)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _json_spacing(value: Any) -> Any:
    """Helm's toJson writes no space after `,` and `:`; Python's json.dumps does: the CEL
    literals compared without it."""
    if isinstance(value, str):
        return value.replace('", "', '","').replace('], "', '],"').replace('": ', '":')
    if isinstance(value, list):
        return [_json_spacing(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_spacing(v) for k, v in value.items()}
    return value


def test_the_generated_parts_of_the_chart_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chart-files.py"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_helm_lint_passes_for_every_value_set(helm: str, tmp_path: Path) -> None:
    for name, values in VALUE_SETS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        done = subprocess.run(
            [helm, "lint", "--strict", str(CHART), "--values", str(path)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_the_chart_renders_what_caldera_renders_for_the_same_config(
    helm: str, tmp_path: Path, name: str
) -> None:
    values = VALUE_SETS[name]
    objects = template(helm, values, tmp_path)
    # The controller reads the ConfigMap's caldera.yaml: valid, state in the release namespace.
    (config_map,) = [
        c for c in kinds(objects, "ConfigMap") if c["metadata"]["name"].endswith("-config")
    ]
    raw = yaml.safe_load(config_map["data"]["caldera.yaml"])
    assert raw["kubernetes"]["state_namespace"] == "caldera-system"
    loaded = parse_kube_config(raw)
    settings = loaded.settings
    # The admission policies: the Python policies for the same bindings and ServiceAccount.
    account = values.get("serviceAccount", {}).get("name", "caldera-controller")
    policy, binding = admission.admission_policy(settings)
    reports, reports_binding = admission.report_policy(settings, account)
    want = [policy, reports, binding, reports_binding]
    got = kinds(objects, "ValidatingAdmissionPolicy") + kinds(
        objects, "ValidatingAdmissionPolicyBinding"
    )
    assert _json_spacing(got) == _json_spacing(want)
    # The controller's rules, and one RoleBinding per served namespace.
    roles = {
        o["metadata"]["name"]: o for o in kinds(objects, "ClusterRole") + kinds(objects, "Role")
    }
    assert roles["caldera-controller-read"]["rules"] == list(admission.CONTROLLER_READ_RULES)
    jobs = roles["caldera-controller-jobs"]["rules"]
    assert jobs == list(admission.controller_write_rules(settings))
    writes_pod_groups = any("podgroups" in r["resources"] and "create" in r["verbs"] for r in jobs)
    assert writes_pod_groups == (settings.scheduler_name != "default-scheduler")
    assert roles["caldera-controller-state"]["rules"] == list(admission.CONTROLLER_STATE_RULES)
    assert roles["caldera-controller-state"]["metadata"]["namespace"] == "caldera-system"
    bound = {b["metadata"]["namespace"] for b in kinds(objects, "RoleBinding")
             if b["roleRef"]["name"] == "caldera-controller-jobs"}  # fmt: skip
    assert bound == set(settings.namespaces)
    users = {"caldera-submitter", "caldera-critical", "caldera-protect"}
    assert (users <= set(roles)) == values.get("rbac", {}).get("userRoles", True)
    # The CRD: caldera's own, kept on uninstall.
    (crd,) = kinds(objects, "CustomResourceDefinition")
    assert crd["spec"] == training_job_crd()["spec"]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The Deployment: restricted, leader-elected replicas, the image as asked.
    (deployment,) = kinds(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    replicas = values.get("controller", {}).get("replicas", 2)
    assert deployment["spec"]["replicas"] == replicas
    assert bool(kinds(objects, "PodDisruptionBudget")) == (replicas > 1)
    image = values.get("image", {})
    if image.get("digest"):
        assert container["image"] == f"{image['repository']}@{image['digest']}"
        assert pod["imagePullSecrets"] == values["imagePullSecrets"]
    else:
        assert container["image"] == "caldera:0.1.0"
    assert "--metrics-bind=:8080" in container["args"]
    (service,) = kinds(objects, "Service")
    assert service["spec"]["ports"][0]["port"] == 8080
    # People's rights: a RoleBinding per namespace and grant.
    people = {
        (b["metadata"]["namespace"], b["roleRef"]["name"]): b["subjects"]
        for b in kinds(objects, "RoleBinding")
        if b["roleRef"]["name"] in users
    }
    want_people = {
        (ns, f"caldera-{'submitter' if what == 'submit' else what}"): [
            {**s, "apiGroup": "rbac.authorization.k8s.io"} for s in subjects
        ]
        for ns, grants in values.get("rbac", {}).get("bindings", {}).items()
        for what, subjects in grants.items()
    }
    assert people == want_people
    # Served namespaces, labelled for Pod Security Admission, only when asked.
    created = kinds(objects, "Namespace")
    if values.get("namespaces", {}).get("create"):
        assert {n["metadata"]["name"] for n in created} == set(settings.namespaces)
        for namespace in created:
            level = namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
            assert level == values["namespaces"]["podSecurity"]
    else:
        assert created == []
    # Monitoring: the rules and dashboard of deploy/, as they are.
    metrics = values.get("metrics", {})
    rules = kinds(objects, "PrometheusRule")
    if metrics.get("prometheusRule", {}).get("enabled"):
        alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
        assert rules[0]["spec"] == alerts
        (dashboard,) = [
            c for c in kinds(objects, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
        ]
        board = json.loads((ROOT / "deploy" / "grafana" / "caldera.json").read_text())
        assert json.loads(dashboard["data"]["caldera.json"]) == board
        (monitor,) = kinds(objects, "ServiceMonitor")
        assert monitor["metadata"]["labels"]["release"] == "kps"
        # The rules read job="caldera": the Service's name label becomes the job.
        assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
        assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "caldera"
    else:
        assert rules == [] and kinds(objects, "ServiceMonitor") == []
