"""The real Volcano in the dev cluster: vc-scheduler, vc-controller-manager, optionally
vc-webhook-manager, and Volcano's own CRDs.

Where they come from, first match wins:

    CALDERA_VOLCANO_SCHEDULER     the vc-scheduler binary (volcano.sh/volcano/cmd/scheduler)
    CALDERA_VOLCANO_CONTROLLERS   the vc-controller-manager binary (…/cmd/controller-manager);
                                  default: `vc-controller-manager` or `controller-manager`
                                  beside the scheduler
    CALDERA_VOLCANO_WEBHOOK       the vc-webhook-manager binary (…/cmd/webhook-manager);
                                  default: `vc-webhook-manager` or `webhook-manager` beside the
                                  scheduler, if there (only the webhook tests need it)
    CALDERA_VOLCANO_CRDS          the folders of Volcano's CRD manifests, separated by ':' —
                                  config/crd/volcano/bases and config/crd/jobflow/bases of the
                                  same checkout (vc-controller-manager waits for the jobflow
                                  CRDs before it starts any controller)

and, when CALDERA_VOLCANO_SCHEDULER is unset, the cache `make cluster-bins` fills
(`scripts/volcano-bins.sh`: volcano v1.14.1 built from the Go module proxy, with apis v1.14.0;
`bin/vc-*`, `crd/volcano`, `crd/jobflow`). Nothing of Volcano is in this repository. Without
either the dev cluster is what it always was (kube-scheduler and caldera's stand-in CRDs).

vc-scheduler runs beside kube-scheduler: a pod goes to the one its `schedulerName` names
(`volcano` or `default-scheduler`), so one cluster serves Volcano's jobs and caldera's
controller in either mode. vc-controller-manager runs the Volcano Job (`batch.volcano.sh`),
PodGroup and Queue controllers: a Volcano Job's pods are created, and re-created after an
eviction, by Volcano itself, and a Queue is Open only once its controller says so (the
proportion plugin allocates nothing in a queue that is not Open). vc-webhook-manager (Volcano's
admission: Queue, PodGroup, Pod, Job) runs when a DevCluster asks for it (`volcano_webhook`): it
serves TLS on 127.0.0.1 with a certificate from the cluster's own CA, and the dev cluster
registers its webhook configurations (`webhook_configurations`: Volcano's binary only patches
the CA into configurations an installer created). Without it, what the webhooks would default
is spelled out by whoever submits.

The scheduler's configuration is seed 001's, as written there (`SEED_001`): one tier with
priority, gang, conformance, drf, predicates, proportion and nodeorder, and the actions
enqueue, allocate, preempt, reclaim, backfill. `VOLCANO_CI` is Volcano's own CI configuration
(installer/helm/chart/volcano/config/volcano-scheduler-ci.conf of v1.15), the one
BASELINES.md's `volcano` baseline describes; `VOLCANO_CONFS` names both.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from caldera.devcluster.bins import repo_script
from caldera.devcluster.errors import DevClusterError

__all__ = [
    "SEED_001",
    "VOLCANO_CI",
    "VOLCANO_CONFS",
    "VOLCANO_FOR_CALDERA",
    "WEBHOOK_ADMISSIONS",
    "VolcanoBins",
    "find_volcano",
    "volcano_crds",
    "webhook_args",
    "webhook_configurations",
]

SCHEDULER_ENV = "CALDERA_VOLCANO_SCHEDULER"
CONTROLLERS_ENV = "CALDERA_VOLCANO_CONTROLLERS"
WEBHOOK_ENV = "CALDERA_VOLCANO_WEBHOOK"
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

VOLCANO_FOR_CALDERA: dict[str, Any] = {
    "actions": "enqueue, allocate, backfill",
    "tiers": [
        {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
        {"plugins": [{"name": "predicates"}, {"name": "nodeorder"}]},
    ],
}
"""Volcano behind caldera (docs/kubernetes.md, "Volcano scheduler configuration"): gang binding
and the node checks, no preempt or reclaim of its own."""

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
    webhook: Path | None = None  # vc-webhook-manager, where there is one

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
        extra = (self.webhook,) if self.webhook is not None else ()
        return (self.scheduler, self.controllers, *extra)


def _beside(scheduler: Path, names: tuple[str, ...]) -> Path:
    candidates = [scheduler.with_name(n) for n in names]
    return next((p for p in candidates if p.is_file()), candidates[0])


def _cached(env: Mapping[str, str], build: bool) -> VolcanoBins | None:
    """The Volcano `scripts/volcano-bins.sh` keeps in its cache (built first when `build`),
    None when it is not there (or this is not a caldera checkout)."""
    script = repo_script("volcano-bins.sh")
    if script is None:
        return None
    args = [str(script)] if build else [str(script), "--path"]
    done = subprocess.run(
        args, capture_output=True, text=True, check=False, env={**os.environ, **env}
    )
    if done.returncode != 0:
        if build:
            last = (done.stderr.strip().splitlines() or ["failed"])[-1]
            raise DevClusterError(f"the real Volcano did not build: {last}")
        return None
    folder = Path(done.stdout.strip().splitlines()[-1])
    bins = VolcanoBins(
        scheduler=folder / "bin" / "vc-scheduler",
        controllers=folder / "bin" / "vc-controller-manager",
        crds=(folder / "crd" / "volcano", folder / "crd" / "jobflow"),
        webhook=folder / "bin" / "vc-webhook-manager",
    )
    missing = [str(p) for p in bins.executables() if not p.is_file()]
    missing += [str(f) for f in bins.crds if not any(f.glob("*.yaml"))]
    if missing:
        raise DevClusterError(f"the Volcano cache {folder} lacks {missing[0]}")
    return bins


def find_volcano(
    environ: Mapping[str, str] | None = None, build: bool = False
) -> VolcanoBins | None:
    """The Volcano named by the environment (CALDERA_VOLCANO_SCHEDULER and friends), else the
    one `make cluster-bins` cached (built first when `build`), else None. Raises
    DevClusterError when a named path is not there."""
    env = os.environ if environ is None else environ
    scheduler_text = env.get(SCHEDULER_ENV, "").strip()
    if not scheduler_text:
        return _cached(env, build)
    scheduler = Path(scheduler_text)
    if not scheduler.is_file():
        raise DevClusterError(f"{SCHEDULER_ENV}={scheduler}: no such file")
    controllers_text = env.get(CONTROLLERS_ENV, "").strip()
    if controllers_text:
        controllers = Path(controllers_text)
    else:
        controllers = _beside(scheduler, ("vc-controller-manager", "controller-manager"))
    if not controllers.is_file():
        raise DevClusterError(f"{CONTROLLERS_ENV}={controllers}: no such file")
    webhook_text = env.get(WEBHOOK_ENV, "").strip()
    webhook: Path | None
    if webhook_text:
        webhook = Path(webhook_text)
        if not webhook.is_file():
            raise DevClusterError(f"{WEBHOOK_ENV}={webhook}: no such file")
    else:
        webhook = _beside(scheduler, ("vc-webhook-manager", "webhook-manager"))
        webhook = webhook if webhook.is_file() else None
    crds_text = env.get(CRDS_ENV, "").strip()
    if not crds_text:
        raise DevClusterError(
            f"{CRDS_ENV} is not set (Volcano's config/crd/volcano/bases:config/crd/jobflow/bases)"
        )
    crds = tuple(Path(part) for part in crds_text.split(os.pathsep) if part.strip())
    for folder in crds:
        if not any(folder.glob("*.yaml")):
            raise DevClusterError(f"{CRDS_ENV}: {folder}: no CRD manifests there")
    return VolcanoBins(
        scheduler.resolve(),
        controllers.resolve(),
        crds,
        webhook.resolve() if webhook is not None else None,
    )


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


def controllers_args(kubeconfig: str, extra: Sequence[str] = ()) -> list[str]:
    """vc-controller-manager's command line: Volcano's default controllers (job, podgroup,
    queue, gc, …), no leader election, listeners on 127.0.0.1 (off by default anyway), then
    `extra` (a tuning such as `--kube-api-qps=1000`: the last of a flag given twice wins)."""
    return [
        f"--kubeconfig={kubeconfig}",
        "--scheduler-name=volcano",
        "--leader-elect=false",
        "--listen-address=127.0.0.1:0",
        "--healthz-address=127.0.0.1:0",
        "--logtostderr=true",
        "--v=2",
        *extra,
    ]


# What vc-webhook-manager serves here: its own default admissions (cmd/webhook-manager) plus
# /podgroups/validate, which Volcano's installers turn on (installer/helm/chart/volcano/
# values.yaml) and which refuses a PodGroup whose queue is missing or not Open; not the
# HyperNode, CronJob and JobFlow ones (caldera writes none of those kinds). Each entry: the
# path, whether it mutates, the webhook's name and its rule (group, version, resource,
# operations) as the admission's Go code in pkg/webhooks/admission declares it.
WEBHOOK_ADMISSIONS: tuple[tuple[str, bool, str, str, str, str, tuple[str, ...]], ...] = (
    ("/queues/mutate", True, "mutatequeue.volcano.sh",
     "scheduling.volcano.sh", "v1beta1", "queues", ("CREATE",)),
    ("/queues/validate", False, "validatequeue.volcano.sh",
     "scheduling.volcano.sh", "v1beta1", "queues", ("CREATE", "UPDATE", "DELETE")),
    ("/podgroups/mutate", True, "mutatepodgroup.volcano.sh",
     "scheduling.volcano.sh", "v1beta1", "podgroups", ("CREATE",)),
    ("/podgroups/validate", False, "validatepodgroup.volcano.sh",
     "scheduling.volcano.sh", "v1beta1", "podgroups", ("CREATE",)),
    ("/pods/mutate", True, "mutatepod.volcano.sh", "", "v1", "pods", ("CREATE",)),
    ("/pods/validate", False, "validatepod.volcano.sh", "", "v1", "pods", ("CREATE",)),
    ("/jobs/mutate", True, "mutatejob.volcano.sh",
     "batch.volcano.sh", "v1alpha1", "jobs", ("CREATE",)),
    ("/jobs/validate", False, "validatejob.volcano.sh",
     "batch.volcano.sh", "v1alpha1", "jobs", ("CREATE", "UPDATE")),
)  # fmt: skip


def webhook_configurations(url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """One Mutating/ValidatingWebhookConfiguration per admission of `WEBHOOK_ADMISSIONS`,
    pointing at `url` (https://127.0.0.1:PORT) with the dev cluster's CA (base64 PEM), named as
    vc-webhook-manager looks them up (`volcano-admission-service` + the path, '/' → '-'):
    it waits for each before it serves, and keeps their CA bundle in step with its own."""
    configurations = []
    for path, mutating, name, group, version, resource, operations in WEBHOOK_ADMISSIONS:
        webhook: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": url + path, "caBundle": ca_bundle},
            "failurePolicy": "Fail",  # as installed: nothing passes while Volcano's down
            "matchPolicy": "Equivalent",
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system"],
                    }
                ]
            },
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "resources": [resource],
                    "operations": list(operations),
                    "scope": "*",
                }
            ],
            "sideEffects": "NoneOnDryRun",
            "timeoutSeconds": 10,
        }
        if mutating:
            webhook["reinvocationPolicy"] = "Never"
        kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
        configurations.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {
                    "name": "volcano-admission-service" + path.replace("/", "-"),
                    "labels": {"caldera.io/dev-cluster": "true"},
                },
                "webhooks": [webhook],
            }
        )
    return configurations


def webhook_args(kubeconfig: str, port: int, pki: Path) -> list[str]:
    """vc-webhook-manager's command line: TLS on 127.0.0.1:`port` with the certificate the dev
    cluster issued (`webhook.crt`, signed by its CA), the admissions of `WEBHOOK_ADMISSIONS`,
    no health listener, a short graceful shutdown (the dev cluster stops in seconds)."""
    return [
        f"--kubeconfig={kubeconfig}",
        "--listen-address=127.0.0.1",
        f"--port={port}",
        f"--tls-cert-file={pki / 'webhook.crt'}",
        f"--tls-private-key-file={pki / 'webhook.key'}",
        f"--ca-cert-file={pki / 'ca.crt'}",
        f"--webhook-url=https://127.0.0.1:{port}",
        "--enabled-admission=" + ",".join(a[0] for a in WEBHOOK_ADMISSIONS),
        "--scheduler-name=volcano",
        "--enable-healthz=false",
        "--healthz-address=127.0.0.1:0",
        "--graceful-shutdown-time=2s",
        "--logtostderr=true",
        "--v=2",
    ]


def conf_text(conf: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(conf), sort_keys=False)
