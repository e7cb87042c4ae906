"""What the hostile-tenant tests share: whether the controller is alive, a job's Events, and
the issue's deeply nested TrainingJob as JSON text."""

from __future__ import annotations

import json

import kubernetes
from caldera_support import Cluster, training_job

from caldera.trainingjob_api import KIND

__all__ = ["alive", "event_messages", "nested_json"]


def alive(cluster: Cluster) -> None:
    assert cluster.proc is not None and cluster.proc.poll() is None, (
        f"the controller died:\n{cluster.log_tail(60)}"
    )


def event_messages(cluster: Cluster, namespace: str, name: str, reason: str) -> list[str]:
    """The messages of the TrainingJob's Events with `reason`."""
    core = kubernetes.client.CoreV1Api(cluster.client())
    found = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={KIND}"
    ).items
    return [e.message for e in found if e.reason == reason]


def nested_json(name: str, levels: int) -> str:
    """A TrainingJob whose template nests `levels` deep inside an emptyDir (a volume type Pod
    Security's restricted allows, so the admission policy lets it through to the controller),
    as JSON text written by hand: PyYAML and json.dumps recurse."""
    job = training_job(name)
    job["spec"]["tasks"][0]["template"]["spec"]["volumes"] = []
    deep = '[{"name": "v", "emptyDir": ' + '{"y": ' * levels + "1" + "}" * levels + "}]"
    return json.dumps(job).replace('"volumes": []', f'"volumes": {deep}')
