"""The chart's RBAC is least privilege: every rule it grants the controller was used.

This module runs after the end-to-end modules of tests/k8s_real (pytest runs files in name
order): by then the controller — running as the chart's ServiceAccount, with only the chart's
RBAC (caldera_support) — has submitted, started, preempted, reclaimed, written status,
conditions and Events, held and handed over its Lease, and kept Volcano Queues and PodGroups.
The API server's audit log holds every request it made. A (group, resource, verb) the chart
grants that no request used is a rule wider than needed, and fails here; a request the chart
did not allow shows as a 403 in the same log and fails here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import yaml
from caldera_support import CHART, CONTROLLER_USER, Cluster, helm
from real_support import wait_for

# Granted but needed only where no e2e module can reach it, with the reason: keep it short.
NOT_EXERCISED: dict[tuple[str, str, str], str] = {}


def _rules(rendered: str) -> Iterator[tuple[str, str, str]]:
    """(group, resource, verb) of every rule of the controller's roles in a rendered chart."""
    for doc in yaml.safe_load_all(rendered):
        if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        if not doc["metadata"]["name"].startswith("caldera-controller-"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        yield group, resource, verb


def _used(events: list[dict[str, Any]]) -> tuple[set[tuple[str, str, str]], list[str]]:
    used: set[tuple[str, str, str]] = set()
    forbidden: list[str] = []
    for event in events:
        ref = event.get("objectRef") or {}
        resource = ref.get("resource")
        if not resource:
            continue  # discovery and other non-resource URLs
        if ref.get("subresource"):
            resource = f"{resource}/{ref['subresource']}"
        key = (ref.get("apiGroup", ""), resource, event["verb"])
        # A 403 of RBAC (the authorizer's decision), not of admission (a ResourceQuota full).
        decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
        if decision == "forbid":
            forbidden.append(f"{key} {event.get('requestURI')}")
        else:
            used.add(key)
    return used, forbidden


def test_every_rule_the_chart_grants_the_controller_was_used_and_none_was_missing(
    caldera: Cluster, request: pytest.FixtureRequest
) -> None:
    ran = {item.module.__name__ for item in request.session.items}
    e2e = {"test_real_controller", "test_real_leader", "test_real_failures"}
    if not e2e <= ran:
        if os.environ.get("CI") == "true":
            pytest.fail(f"needs the end-to-end modules in the same run: {sorted(e2e - ran)}")
        pytest.skip("needs the end-to-end modules of tests/k8s_real in the same run")
    log = caldera.dev.audit_log()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert all(e["user"]["username"] == CONTROLLER_USER for e in events)
    used, forbidden = _used(events)
    assert not forbidden, "the controller was refused: " + "; ".join(forbidden[:10])
    values = caldera.folder / "values.yaml"
    rendered = helm(caldera, "template", "caldera", str(CHART), "-n", "caldera-system",
                    "--values", str(values))  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    granted = set(_rules(rendered.stdout))
    # `watch` arrives as a `watch` verb; `list` with a watch parameter is audited as `watch`.
    unused = sorted(granted - used - set(NOT_EXERCISED))
    assert not unused, f"granted but never used by the controller: {unused}"
    report = caldera.folder / "rbac-used.json"
    report.write_text(json.dumps(sorted(used), indent=1))


def _custom(caldera: Cluster) -> Any:
    import kubernetes

    return kubernetes.client.CustomObjectsApi(caldera.client())


def _jobs(caldera: Cluster) -> set[str]:
    from caldera.trainingjob_api import GROUP, PLURAL, VERSION

    found = _custom(caldera).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    return {f"{j['metadata']['namespace']}/{j['metadata']['name']}" for j in found["items"]}


def _crd(caldera: Cluster) -> dict[str, Any]:
    from caldera.trainingjob_api import GROUP, PLURAL

    done = caldera.kubectl("admin", "get", "crd", f"{PLURAL}.{GROUP}", "-o", "json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_helm_upgrade_with_a_crd_schema_change_keeps_every_training_job(
    caldera: Cluster, tmp_path: Any
) -> None:
    import shutil

    from caldera_support import training_job

    for name in ("keep-a", "keep-b"):
        done = caldera.apply("alice", "team-a", training_job(name, gpus=1))
        assert done.returncode == 0, done.stderr
    before = _jobs(caldera)
    assert {"team-a/keep-a", "team-a/keep-b"} <= before
    # The next chart version: its CRD's spec gains a field (what a release that extends the
    # TrainingJob ships).
    chart = tmp_path / "caldera"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = meta["version"] + "-next"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    crd_file = chart / "templates" / "crd.yaml"
    text = crd_file.read_text()
    head, body, tail = text.partition("---\n")[0], text.partition("---\n")[2], ""
    body, _, tail = body.rpartition("{{- end }}")
    crd = yaml.safe_load(body)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["team_note"] = {"type": "string", "maxLength": 200}
    crd_file.write_text(head + "---\n" + yaml.safe_dump(crd) + "{{- end }}" + tail)
    values = caldera.folder / "values.yaml"
    done = helm(caldera, "upgrade", "caldera", str(chart), "-n", "caldera-system",
                "--values", str(values))  # fmt: skip
    assert done.returncode == 0, done.stderr
    stored = _crd(caldera)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "team_note" in stored["properties"]["spec"]["properties"]

    def listed() -> set[str] | None:  # a new schema re-initialises the storage: 429 a moment
        try:
            return _jobs(caldera)
        except kubernetes.client.ApiException as error:
            if error.status == 429:
                return None
            raise

    assert wait_for("the TrainingJobs listed after the upgrade", listed) == before
    noted = training_job("noted", gpus=1, team_note="from the next chart")
    done = wait_for(
        "the new field accepted",
        lambda: (d := caldera.apply("alice", "team-a", noted)).returncode == 0 and d,
    )
    assert done
    assert caldera.job("team-a", "noted")["spec"]["team_note"] == "from the next chart"


def test_helm_uninstall_keeps_the_crd_and_the_training_jobs(caldera: Cluster) -> None:
    caldera.stop_controller()
    before = _jobs(caldera)
    assert before
    done = helm(caldera, "uninstall", "caldera", "-n", "caldera-system")
    assert done.returncode == 0, done.stderr
    assert _crd(caldera)["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert _jobs(caldera) == before
    gone = caldera.kubectl("admin", "get", "clusterrole", "caldera-controller-read")
    assert gone.returncode != 0  # the release's other objects went
