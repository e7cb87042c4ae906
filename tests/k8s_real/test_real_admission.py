"""Security by construction on the real API server (issue 9, deliverable 3): what users may
submit is decided by Kubernetes itself — the CRD's schema, the status subresource, RBAC and
caldera's ValidatingAdmissionPolicy, tested with two users' own tokens — and the controller
checks the same again where the policy is missing.

alice is in group team-a, which holds the RBAC verb `critical` on trainingjobs in `serving`;
bob is in group team-b, which may submit but holds no such verb. `elsewhere` is not served.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from caldera_support import Cluster, training_job, without_admission_policy
from real_support import wait_for

from caldera.k8s.reporting.status import submit_time
from caldera.trainingjob_api import PLURAL


def refused(done: Any, text: str) -> bool:
    return done.returncode != 0 and text in done.stderr


def test_the_api_server_admits_critical_only_for_users_holding_the_verb(clean: Cluster) -> None:
    alice = clean.apply("alice", "serving", training_job("chat", gpus=1, type="critical"))
    assert alice.returncode == 0, alice.stderr
    bob = clean.apply("bob", "serving", training_job("chat-bob", gpus=1, type="critical"))
    assert refused(bob, "user bob may not submit type critical in serving"), bob.stderr
    assert "ClusterRole caldera-critical" in bob.stderr
    elsewhere = clean.apply("alice", "team-a", training_job("chat", gpus=1, type="critical"))
    assert refused(elsewhere, "namespace team-a may not submit type critical"), elsewhere.stderr
    protect = clean.apply("alice", "team-a", training_job("keep", protected=True))
    assert refused(protect, "may not submit a protected job"), protect.stderr
    clean.wait("serving", "chat", "Running")
    pods = clean.running_pods("serving", "chat")
    assert [p.spec.priority_class_name for p in pods] == ["critical-job"]


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ({"hostNetwork": True}, "may not use the host network"),
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "hostPath"),
        (
            {"containers": [{"name": "main", "securityContext": {"privileged": True}}]},
            "privileged",
        ),
        ({"serviceAccountName": "controller"}, "service account"),
    ],
    ids=["host network", "hostPath", "privileged", "foreign service account"],
)
def test_a_template_asking_for_more_than_its_submitter_may_is_refused_twice(
    clean: Cluster, template: dict[str, Any], why: str
) -> None:
    """Issue 9, defect 8: refused by the API server at `kubectl apply`; and where the policy
    is missing, rejected by the controller with a condition and an Event — never a pod."""
    manifest = training_job("sneaky")
    manifest["spec"]["tasks"][0]["template"]["spec"].update(template)
    done = clean.apply("bob", "team-a", manifest)
    assert refused(done, why), done.stderr
    with without_admission_policy(clean):
        done = clean.apply("bob", "team-a", manifest)
        assert done.returncode == 0, done.stderr
        wait_for("sneaky rejected", lambda: clean.state("team-a", "sneaky") == "Rejected")
    condition = clean.condition("team-a", "sneaky", "Admitted")
    assert condition is not None and condition[:2] == ("False", "Rejected")
    assert why in condition[2]
    assert "Rejected" in clean.events("team-a", "sneaky")
    assert clean.pods("team-a", "sneaky") == []


def test_a_hand_written_status_changes_nothing(clean: Cluster) -> None:
    """Issue 9, defect 1: with ConfigMap records, a status written by the submitter skipped
    admission (a critical job from a namespace that may not submit one ran, and preempted).
    Now the API server drops a status sent with the object, the submitter may not write the
    status subresource, and the controller admits what it finds as any new job."""
    forged = {
        "state": "Running",
        "attempts": 1,
        "queue": "team-a",
        "controller": {"submit": 0, "attempts": 1, "tasks": 1, "queue": "team-a"},
    }
    with without_admission_policy(clean):
        done = clean.apply("bob", "team-a", training_job("jump", type="critical", status=forged))
        assert done.returncode == 0, done.stderr
        wait_for("jump rejected", lambda: clean.state("team-a", "jump") == "Rejected")
    condition = clean.condition("team-a", "jump", "Admitted")
    assert condition is not None and "may not submit critical jobs" in condition[2]
    assert clean.events("team-a", "jump") == ["Rejected"]
    assert clean.pods("team-a", "jump") == []

    done = clean.apply("bob", "team-a", training_job("plain", status=forged))
    assert done.returncode == 0, done.stderr
    clean.wait("team-a", "plain", "Running")
    patch = clean.kubectl(
        "bob", "-n", "team-a", "patch", PLURAL, "plain", "--subresource=status",
        "--type=merge", "-p", '{"status": {"state": "Succeeded"}}',
    )  # fmt: skip
    assert refused(patch, 'cannot patch resource "trainingjobs/status"'), patch.stderr
    status = clean.status("team-a", "plain")
    assert (status["state"], status["attempts"]) == ("Running", 1)
    assert submit_time(status)  # written by the controller, not the forger


def test_jobs_in_namespaces_caldera_does_not_serve_are_refused_or_never_read(
    clean: Cluster,
) -> None:
    done = clean.apply("bob", "elsewhere", training_job("stray"))
    assert refused(done, "caldera serves no jobs in namespace elsewhere"), done.stderr
    with without_admission_policy(clean):
        done = clean.apply("bob", "elsewhere", training_job("stray"))
        assert done.returncode == 0, done.stderr
        time.sleep(5)  # more than two of the controller's resyncs
    assert clean.status("elsewhere", "stray") == {}
    assert clean.pods("elsewhere", "stray") == []


def test_the_resource_reads_like_a_kubernetes_object(clean: Cluster) -> None:
    """Schema, immutable spec, printer columns, short name, conditions for kubectl wait."""
    bad = training_job("bad", minAvailable=3)
    done = clean.apply("bob", "team-a", bad)
    assert refused(done, "minAvailable exceeds the replicas of all tasks"), done.stderr
    typo = training_job("typo", type="urgent")
    done = clean.apply("bob", "team-a", typo)
    assert refused(done, "Unsupported value"), done.stderr
    done = clean.apply("bob", "team-a", training_job("shown", replicas=2))
    assert done.returncode == 0, done.stderr
    clean.wait("team-a", "shown", "Running")
    table = clean.kubectl("bob", "-n", "team-a", "get", "tj", "shown").stdout.split()
    assert table[:6] == ["NAME", "QUEUE", "TYPE", "STATE", "GPUS", "WAIT"]
    assert table[7:12] == ["shown", "team-a", "normal", "Running", "16"]
    edit = clean.kubectl(
        "admin", "-n", "team-a", "patch", "tj", "shown", "--type=merge",
        "-p", '{"spec": {"maxRetries": 3}}',
    )  # fmt: skip
    assert edit.returncode != 0 and "spec is immutable" in edit.stderr
