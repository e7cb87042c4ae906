"""What `caldera k8s render` prints: the cluster-wide objects, and for a scenario the pods
the first cycle would start on an empty cluster of the scenario's shape.

Rendering a job needs a decided placement (every pod is pinned), so a scenario's jobs are
admitted and run through one cycle of the same decision core; the jobs it starts are
rendered exactly as `caldera k8s run` would create them (less the owner reference to a job
record, which exists only on a live cluster). Pure: no cluster is contacted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from caldera.config import Scenario
from caldera.core import JobView, Snapshot, admit, run
from caldera.k8s import names
from caldera.k8s.access.admission import (
    admission_policy,
    controller_rbac,
    report_policy,
    user_roles,
)
from caldera.k8s.cluster.api import Object
from caldera.k8s.config import KubeConfig
from caldera.k8s.crd import training_job_crd
from caldera.k8s.effects.render import (
    RenderError,
    Workload,
    priority_classes,
    render_start,
    volcano_queue,
)
from caldera.model import JobState
from caldera.policies import get_policy

__all__ = ["Plan", "plan_manifests"]

PLACEHOLDER_IMAGE = "example.invalid/replace-me:latest"


@dataclass(frozen=True)
class Plan:
    objects: list[Object]
    notes: list[str]  # printed as YAML comments after the documents


def plan_manifests(
    config: KubeConfig,
    scenario: Scenario | None = None,
    image: str | None = None,
    rbac: bool = False,
    crds: bool = False,
) -> Plan:
    settings = config.settings
    objects: list[Object] = []
    notes: list[str] = []
    if crds:
        objects.append(training_job_crd())
    if rbac:
        objects.extend(controller_rbac(settings))
        objects.extend(user_roles())
        objects.extend(admission_policy(settings))
        objects.extend(report_policy(settings))
    objects.extend(priority_classes())
    objects.extend(volcano_queue(queue, settings) for queue in config.queues)
    if scenario is None:
        return Plan(objects, notes)
    chosen = image or settings.image
    if not chosen:
        chosen = PLACEHOLDER_IMAGE
        notes.append(f"no image given (--image or kubernetes.image): pods use {chosen}")
    settings = replace(settings, image=chosen)
    queues = {queue.name: queue for queue in scenario.queues}
    views: list[JobView] = []
    for submission in scenario.submissions:
        spec = submission.spec
        spec = replace(spec, id=names.job_id(spec.namespace, spec.name))
        if submission.invalid:
            notes.append(f"{spec.id}: rejected ({submission.invalid})")
            continue
        admission = admit(
            spec, queues, {}, spec.submit, scenario.nodes, scenario.config.week_offset
        )
        if admission.state is JobState.REJECTED:
            notes.append(f"{spec.id}: rejected ({admission.reason})")
            continue
        views.append(JobView(spec, admission.state, hold_reason=admission.reason or None))
    now = max((view.spec.submit for view in views), default=0.0)
    decisions = run(
        Snapshot(now, scenario.nodes, queues, jobs=tuple(views), config=scenario.config),
        get_policy(scenario.config.name),
    )
    by_id = {view.id: view for view in views}
    for start in decisions.starts:
        spec = by_id[start.job].spec
        try:
            objects.extend(
                render_start(
                    spec,
                    Workload(),
                    start.placement,
                    scenario.nodes,
                    1,
                    scenario.config.grace_period,
                    settings,
                )
            )
        except RenderError as error:
            notes.append(f"{spec.id}: started by the cycle but not rendered: {error}")
    started = {start.job for start in decisions.starts}
    waiting = [view.id for view in views if view.id not in started]
    if waiting:
        shown = ", ".join(waiting[:20]) + (
            f", … ({len(waiting)} in all)" if len(waiting) > 20 else ""
        )
        notes.append(f"not started in the first cycle on an empty cluster: {shown}")
    return Plan(objects, notes)
