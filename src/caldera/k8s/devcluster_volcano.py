"""The real Volcano in the dev cluster, when someone built it: vc-scheduler, vc-controller-manager
and Volcano's own CRDs, all from paths given in the environment.

    CALDERA_VOLCANO_SCHEDULER     the vc-scheduler binary (volcano.sh/volcano/cmd/scheduler)
    CALDERA_VOLCANO_CONTROLLERS   the vc-controller-manager binary (…/cmd/controller-manager);
                                  default: `vc-controller-manager` or `controller-manager`
                                  beside the scheduler
    CALDERA_VOLCANO_CRDS          the folders of Volcano's CRD manifests, separated by ':' —
                                  config/crd/volcano/bases and config/crd/jobflow/bases of the
                                  same checkout (vc-controller-manager waits for the jobflow
                                  CRDs before it starts any controller)

Nothing of Volcano is in this repository or built by it: the Go module proxy this project
builds from does not serve `volcano.sh/volcano`, so CI cannot run it. docs/evaluation.md says
how to build it by hand from a fetched checkout. Without the variables the dev cluster is what
it always was (kube-scheduler and caldera's stand-in CRDs).

vc-scheduler runs beside kube-scheduler: a pod goes to the one its `schedulerName` names
(`volcano` or `default-scheduler`), so one cluster serves Volcano's jobs and caldera's
controller in either mode. vc-controller-manager runs the Volcano Job (`batch.volcano.sh`),
PodGroup and Queue controllers: a Volcano Job's pods are created, and re-created after an
eviction, by Volcano itself, and a Queue is Open only once its controller says so (the
proportion plugin allocates nothing in a queue that is not Open). The admission webhooks
(vc-webhook-manager) do not run: what they would default is spelled out by whoever submits.

The scheduler's configuration is seed 001's, as written there (`SEED_001`): one tier with
priority, gang, conformance, drf, predicates, proportion and nodeorder, and the actions
enqueue, allocate, preempt, reclaim, backfill. `VOLCANO_CI` is Volcano's own CI configuration
(installer/helm/chart/volcano/config/volcano-scheduler-ci.conf of v1.15), the one
BASELINES.md's `volcano` baseline describes; `VOLCANO_CONFS` names both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from caldera.k8s.devcluster_errors import DevClusterError

__all__ = [
    "SEED_001",
    "VOLCANO_CI",
    "VOLCANO_CONFS",
    "VolcanoBins",
    "find_volcano",
    "volcano_crds",
]

SCHEDULER_ENV = "CALDERA_VOLCANO_SCHEDULER"
CONTROLLERS_ENV = "CALDERA_VOLCANO_CONTROLLERS"
CRDS_ENV = "CALDERA_VOLCANO_CRDS"

SEED_001: dict[str, Any] = {
    "actions": "enqueue, allocate, preempt, reclaim, backfill",
    "tiers": [
        {
            "plugins": [
                {"name": "priority"},
                # seed 001 passes these two arguments; Volcano v1.15 reads neither (no plugin
                # looks them up), so they change nothing — kept to run the seed as written.
                {"name": "gang", "arguments": {"gang.job.pipelined": True}},
                {"name": "conformance"},
                {"name": "drf", "arguments": {"drf.preemption": True}},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
            ]
        }
    ],
}
"""Seed 001's `volcano-scheduler.conf`: its actions and its single tier of plugins."""

VOLCANO_CI: dict[str, Any] = {
    "actions": "enqueue, allocate, backfill, reclaim, preempt",
    "tiers": [
        {
            "plugins": [
                {"name": "priority"},
                {"name": "gang", "enablePreemptable": False},
                {"name": "conformance"},
            ]
        },
        {
            "plugins": [
                {"name": "drf", "enablePreemptable": False},
                {"name": "predicates"},
                {"name": "proportion"},
                {"name": "nodeorder"},
                {"name": "binpack"},
            ]
        },
    ],
}
"""Volcano's CI configuration, less the plugins that need what the dev cluster lacks (sla,
overcommit, network-topology-aware, DRA): two tiers, gang and drf not judging preemption."""

VOLCANO_CONFS: Mapping[str, dict[str, Any]] = {"seed-001": SEED_001, "ci": VOLCANO_CI}


@dataclass(frozen=True, slots=True)
class VolcanoBins:
    """Where Volcano's binaries and CRDs are (built outside this repository)."""

    scheduler: Path
    controllers: Path
    crds: tuple[Path, ...]

    def manifests(self) -> list[dict[str, Any]]:
        """Volcano's CRDs, every document of every YAML file in the folders, by file name. A
        CRD given twice (two versions of one manifest) is a one-line error."""
        found: dict[str, dict[str, Any]] = {}
        for folder in self.crds:
            for path in sorted(folder.glob("*.yaml")):
                for doc in yaml.safe_load_all(path.read_text()):
                    if not doc or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    name = str(doc.get("metadata", {}).get("name"))
                    if name in found:
                        raise DevClusterError(f"{CRDS_ENV}: the CRD {name} is given twice ({path})")
                    found[name] = doc
        return list(found.values())

    def executables(self) -> tuple[Path, ...]:
        return (self.scheduler, self.controllers)


def find_volcano(environ: Mapping[str, str] | None = None) -> VolcanoBins | None:
    """The Volcano named by the environment, None when CALDERA_VOLCANO_SCHEDULER is unset.
    Raises DevClusterError when a named path is not there."""
    env = os.environ if environ is None else environ
    scheduler_text = env.get(SCHEDULER_ENV, "").strip()
    if not scheduler_text:
        return None
    scheduler = Path(scheduler_text)
    if not scheduler.is_file():
        raise DevClusterError(f"{SCHEDULER_ENV}={scheduler}: no such file")
    controllers_text = env.get(CONTROLLERS_ENV, "").strip()
    if controllers_text:
        controllers = Path(controllers_text)
    else:
        beside = [scheduler.with_name(n) for n in ("vc-controller-manager", "controller-manager")]
        controllers = next((p for p in beside if p.is_file()), beside[0])
    if not controllers.is_file():
        raise DevClusterError(f"{CONTROLLERS_ENV}={controllers}: no such file")
    crds_text = env.get(CRDS_ENV, "").strip()
    if not crds_text:
        raise DevClusterError(
            f"{CRDS_ENV} is not set (Volcano's config/crd/volcano/bases:config/crd/jobflow/bases)"
        )
    crds = tuple(Path(part) for part in crds_text.split(os.pathsep) if part.strip())
    for folder in crds:
        if not any(folder.glob("*.yaml")):
            raise DevClusterError(f"{CRDS_ENV}: {folder}: no CRD manifests there")
    return VolcanoBins(scheduler.resolve(), controllers.resolve(), crds)


def volcano_crds(bins: VolcanoBins) -> list[dict[str, Any]]:
    """Volcano's CRDs to install, Queue and PodGroup among them (checked: the dev cluster's
    readiness and caldera's controller need both)."""
    docs = bins.manifests()
    names = {doc["metadata"]["name"] for doc in docs}
    for needed in ("queues.scheduling.volcano.sh", "podgroups.scheduling.volcano.sh"):
        if needed not in names:
            folders = os.pathsep.join(str(folder) for folder in bins.crds)
            raise DevClusterError(f"{folders} lacks the CRD {needed}")
    return docs


def scheduler_args(
    kubeconfig: str, conf_file: Path, period: float, log_level: int = 2
) -> list[str]:
    """vc-scheduler's command line: no leader election, no HTTP listeners (metrics, health
    and pprof are off by default; their addresses still point at 127.0.0.1)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--scheduler-conf={conf_file}",
        f"--schedule-period={max(period, 0.01):.3f}s",
        "--scheduler-name=volcano",
        "--leader-elect=false",
        "--listen-address=127.0.0.1:0",
        "--healthz-address=127.0.0.1:0",
        "--cache-dumper=false",
        "--logtostderr=true",
        f"--v={log_level}",
    ]


def controllers_args(kubeconfig: str) -> list[str]:
    """vc-controller-manager's command line: Volcano's default controllers (job, podgroup,
    queue, gc, …), no leader election, listeners on 127.0.0.1 (off by default anyway)."""
    return [
        f"--kubeconfig={kubeconfig}",
        "--scheduler-name=volcano",
        "--leader-elect=false",
        "--listen-address=127.0.0.1:0",
        "--healthz-address=127.0.0.1:0",
        "--logtostderr=true",
        "--v=2",
    ]


def conf_text(conf: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(conf), sort_keys=False)
