"""A template reaches only what its submitter may (issue 34, item 3), on the fakes: the
Secrets, ConfigMaps and PVCs a template reads are admitted only where caldera's admission
policy checked them against the submitter's own rights; elsewhere the job is Rejected with
the reference named. The real control plane: tests/k8s_real/test_real_hostile.py."""

from __future__ import annotations

import copy
from typing import Any

from k8s_support import SETTINGS, World

from caldera.k8s.access.admission import (
    POLICY_NAME,
    REFERENCES_MESSAGE,
    admission_policy,
    policy_problem,
)
from caldera.k8s.cluster.api import to_rfc3339
from caldera.k8s.reading.trainingjob import template_references

T0 = 1_800_000_000.0


def _referencing(kind: str) -> dict[str, Any]:
    """A template that reads one object of the namespace in the way `kind` names."""
    pod: dict[str, Any] = {"containers": [{"name": "main"}]}
    main = pod["containers"][0]
    if kind == "secret volume":
        pod["volumes"] = [{"name": "t", "secret": {"secretName": "deployer-token"}}]
    elif kind == "projected configmap":
        pod["volumes"] = [{"name": "p", "projected": {"sources": [{"configMap": {"name": "s"}}]}}]
    elif kind == "claim":
        pod["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    elif kind == "csi secret":
        pod["volumes"] = [
            {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "creds"}}}
        ]
    elif kind == "env secret":
        main["env"] = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "k"}}}]
    elif kind == "envFrom configmap":
        main["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    return {"spec": pod}


def test_every_kind_of_reference_is_found() -> None:
    found = {
        kind: template_references(_referencing(kind))
        for kind in (
            "secret volume",
            "projected configmap",
            "claim",
            "csi secret",
            "env secret",
            "envFrom configmap",
        )
    }
    assert found == {
        "secret volume": ["secret deployer-token"],
        "projected configmap": ["configmap s"],
        "claim": ["persistentvolumeclaim data"],
        "csi secret": ["secret creds"],
        "env secret": ["secret tok"],
        "envFrom configmap": ["configmap settings"],
    }
    assert template_references({"spec": {"volumes": [{"name": "e", "emptyDir": {}}]}}) == []


def _installed(at: float) -> tuple[dict[str, Any], dict[str, Any]]:
    policy, binding = copy.deepcopy(admission_policy(SETTINGS))
    for obj in (policy, binding):
        obj["metadata"]["creationTimestamp"] = to_rfc3339(at)
    return policy, binding


def test_the_policy_vouches_only_as_rendered_and_before_the_job() -> None:
    policy, binding = _installed(T0)
    assert policy_problem(policy, binding, T0 + 60) is None
    # As the API server stores them: its defaults added.
    stored, stored_binding = copy.deepcopy(policy), copy.deepcopy(binding)
    match = stored["spec"]["matchConstraints"]
    match.update(matchPolicy="Equivalent", namespaceSelector={}, objectSelector={})
    match["resourceRules"][0]["scope"] = "*"
    stored_binding["spec"]["matchResources"] = {
        "matchPolicy": "Equivalent",
        "namespaceSelector": {},
        "objectSelector": {},
    }
    assert policy_problem(stored, stored_binding, T0 + 60) is None
    missing = policy_problem(policy, None, T0 + 60)
    assert missing is not None and "not installed" in missing
    assert "installed after" in (policy_problem(policy, binding, T0 + 1) or "")
    weakened = copy.deepcopy(policy)
    weakened["spec"]["validations"] = [
        v for v in weakened["spec"]["validations"] if v.get("message") != REFERENCES_MESSAGE
    ]
    assert "not the one caldera renders" in (policy_problem(weakened, binding, T0 + 60) or "")
    warn_only = copy.deepcopy(binding)
    warn_only["spec"]["validationActions"] = ["Warn"]
    assert policy_problem(policy, warn_only, T0 + 60) is not None
    narrowed = copy.deepcopy(binding)
    narrowed["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"x": "y"}}}
    assert policy_problem(policy, narrowed, T0 + 60) is not None


def _submit(world: World, name: str, kind: str) -> None:
    world.submit(name, gpus=8, template=_referencing(kind))
    world.step()
    world.step(1)


def test_without_the_policy_a_reference_is_rejected_naming_it() -> None:
    """Before: the controller created pods mounting any Secret of the namespace for a
    submitter who may not read it."""
    world = World().hypernode("a", "n", count=1).start()
    _submit(world, "secretvol", "secret volume")
    status = world.status("secretvol")
    assert status["state"] == "Rejected", status
    reason = status["reason"]
    assert "secret deployer-token" in reason and "admission policy" in reason, reason
    assert "\n" not in reason
    assert "Rejected" in world.events("secretvol")
    assert not world.cluster.pods
    world.submit("plain", gpus=8, template={"spec": {"volumes": [{"name": "e", "emptyDir": {}}]}})
    world.step()
    world.step(1)
    assert world.state("plain") == "Running"


def test_with_the_policy_in_force_a_reference_runs() -> None:
    world = World().hypernode("a", "n", count=1)
    world.cluster.admission_policies[POLICY_NAME] = _installed(T0 - 3600)
    world.start()
    _submit(world, "claim", "claim")
    assert world.state("claim") == "Running", world.status("claim")


def test_a_job_created_before_the_policy_was_bound_is_rejected() -> None:
    world = World().hypernode("a", "n", count=1)
    world.cluster.admission_policies[POLICY_NAME] = _installed(T0 + 3600)
    world.start()
    _submit(world, "early", "env secret")
    assert "installed after the job was created" in world.status("early")["reason"]
