"""Pod Security `restricted` by default (issue 34, item 3), on the fakes: the pods caldera
creates carry restricted's defaults where the template left them unset, a template that
contradicts the level is Rejected at intake, `baseline` stays selectable, and render labels
the served namespaces with the chosen level. The real control plane (Pod Security Admission
enforcing on a labelled namespace): tests/k8s_real/test_real_hostile.py."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from k8s_support import SETTINGS, World

from caldera.errors import RecordError
from caldera.k8s import read_training_job
from caldera.k8s.access.admission import admission_policy, controller_rbac
from caldera.k8s.reading.podtemplate import restricted_defaults, restricted_problem
from caldera.k8s.settings import PodSecurity
from caldera.model import Queue
from caldera.trainingjob_api import API_VERSION, KIND

QUEUES = {"team": Queue("team")}
BASELINE = replace(SETTINGS, pod_security=PodSecurity.BASELINE)


def _job(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "job", "namespace": "team", "uid": "u1"},
        "spec": {
            "tasks": [{"name": "w", "replicas": 1, "gpus": 8, "template": {"spec": pod_spec}}]
        },
    }


def _main(**security: Any) -> dict[str, Any]:
    return {"name": "main", "image": "i", "securityContext": security}


# Each contradicts restricted and is fine at baseline.
CONTRADICTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "nfs volume": (
        {"containers": [_main()], "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]},
        "may not use a nfs volume",
    ),
    "runAsNonRoot false": (
        {"containers": [_main()], "securityContext": {"runAsNonRoot": False}},
        "runAsNonRoot: false",
    ),
    "drop without ALL": (
        {"containers": [_main(capabilities={"drop": ["NET_RAW"]})]},
        "capabilities.drop must include ALL",
    ),
}


@pytest.mark.parametrize("case", sorted(CONTRADICTIONS))
def test_what_contradicts_restricted_is_refused_and_baseline_still_takes_it(case: str) -> None:
    pod_spec, why = CONTRADICTIONS[case]
    with pytest.raises(RecordError, match=why):
        read_training_job(_job(copy.deepcopy(pod_spec)), SETTINGS, QUEUES, 0.0)
    read_training_job(_job(copy.deepcopy(pod_spec)), BASELINE, QUEUES, 0.0)


def test_either_level_refuses_root_and_added_capabilities_but_net_bind_service() -> None:
    for settings in (SETTINGS, BASELINE):
        root = _job({"containers": [_main(runAsUser=0)]})
        with pytest.raises(RecordError, match="root"):
            read_training_job(root, settings, QUEUES, 0.0)
        admin = _job({"containers": [_main(capabilities={"add": ["SYS_ADMIN"]})]})
        with pytest.raises(RecordError, match="capability other than NET_BIND_SERVICE"):
            read_training_job(admin, settings, QUEUES, 0.0)
        bind = _job({"containers": [_main(capabilities={"add": ["NET_BIND_SERVICE"]})]})
        read_training_job(bind, settings, QUEUES, 0.0)


def test_restricted_defaults_fill_only_what_is_unset() -> None:
    pod_spec: dict[str, Any] = {
        "securityContext": {"runAsUser": 1000, "seccompProfile": {"type": "Localhost"}},
        "containers": [_main(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})],
        "initContainers": [{"name": "init", "image": "i"}],
    }
    restricted_defaults(pod_spec)
    assert pod_spec["securityContext"] == {
        "runAsUser": 1000,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "Localhost"},
    }
    for container in (*pod_spec["containers"], *pod_spec["initContainers"]):
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert "ALL" in container["securityContext"]["capabilities"]["drop"]
    assert pod_spec["containers"][0]["securityContext"]["capabilities"]["add"] == [
        "NET_BIND_SERVICE"
    ]
    assert restricted_problem(pod_spec) is None


def test_the_pods_caldera_creates_meet_restricted_and_baseline_leaves_them_alone() -> None:
    """Before: a template without a securityContext made a pod that a namespace labelled
    `restricted` refused (no runAsNonRoot, no seccomp profile, capabilities kept)."""
    for settings, filled in ((SETTINGS, True), (BASELINE, False)):
        world = World(settings=settings).hypernode("a", "n", count=1).start()
        world.submit("plain", gpus=8)
        world.step()
        world.step(1)
        assert world.state("plain") == "Running"
        (pod,) = world.cluster.pods.values()
        spec = pod["spec"]
        context = spec.get("securityContext") or {}
        main = spec["containers"][0].get("securityContext") or {}
        if filled:
            assert context["runAsNonRoot"] is True
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            assert main["allowPrivilegeEscalation"] is False
            assert main["capabilities"]["drop"] == ["ALL"]
            assert restricted_problem(spec) is None
        else:
            assert "runAsNonRoot" not in context and "capabilities" not in main


def test_render_labels_the_served_namespaces_with_the_level() -> None:
    for settings in (SETTINGS, BASELINE):
        served = {
            o["metadata"]["name"]: o["metadata"]["labels"]
            for o in controller_rbac(settings)
            if o["kind"] == "Namespace" and o["metadata"]["name"] != settings.state_namespace
        }
        assert set(served) == set(settings.namespaces)
        level = settings.pod_security.value
        for labels in served.values():
            assert labels["pod-security.kubernetes.io/enforce"] == level
            assert labels["pod-security.kubernetes.io/warn"] == level
        (policy, _) = admission_policy(settings)
        variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
        assert variables["podSecurity"] == f'"{level}"'
