"""`caldera k8s`: the Kubernetes/Volcano runtime from the command line.

    caldera k8s render FILE [--crds] [--rbac] [--image IMAGE]   manifests as YAML (install, GitOps)
    caldera k8s run --config FILE [--kubeconfig PATH] [--dry-run] [--once]   the controller
    caldera k8s submit|get|list|cancel|wait …                   TrainingJobs, as a user (k8s_jobs)
    caldera k8s dev-cluster start|kubeconfig|stop [--dir DIR]   a real control plane on 127.0.0.1

Every failure is one line on stderr and a non-zero exit: 2 for a bad file or command line,
1 when the cluster cannot be used (unreachable, Volcano missing, RBAC).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from caldera.cli.errors import EXIT_BAD_INPUT, EXIT_FAILURE, fail
from caldera.cli.k8s_jobs import register as register_job_commands

if TYPE_CHECKING:
    from caldera.k8s.cluster.cache import InformerCache
    from caldera.k8s.cluster.client import KubeClusterAPI
    from caldera.k8s.config import KubeConfig
    from caldera.k8s.ha.leader import LeaderElector
    from caldera.k8s.settings import KubeSettings

__all__ = ["k8s_app"]

k8s_app = typer.Typer(
    name="k8s",
    help="Kubernetes with Volcano: render manifests, run the controller, submit TrainingJobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register_job_commands(k8s_app)


@k8s_app.command()
def render(
    file: Annotated[
        Path, typer.Argument(help="A service config (queues, policy) or a scenario file.")
    ],
    image: Annotated[
        str | None, typer.Option(help="Image for jobs that name none (scenario jobs).")
    ] = None,
    rbac: Annotated[
        bool,
        typer.Option(
            "--rbac",
            help="Also print the controller's ServiceAccount and RBAC, the users' roles and the "
            "admission policy.",
        ),
    ] = False,
    crds: Annotated[
        bool, typer.Option("--crds", help="Also print the TrainingJob CustomResourceDefinition.")
    ] = False,
) -> None:
    """Print PriorityClasses, Volcano Queues and (for a scenario) the pods of the jobs the
    first cycle starts, as one YAML stream on stdout."""
    from caldera.k8s.config import KubeConfigError, load_render_input
    from caldera.k8s.effects.plan import plan_manifests
    from caldera.k8s.effects.render import RenderError, to_yaml
    from caldera.sim import parse_scenario

    try:
        config, scenario = load_render_input(file, parse_scenario)
        plan = plan_manifests(config, scenario, image, rbac, crds)
    except (KubeConfigError, RenderError) as error:
        fail(str(error), EXIT_BAD_INPUT)
    what = "a scenario: jobs placed by one cycle on an empty cluster" if scenario else "a config"
    header = f"# caldera k8s render {file.name} ({what})\n"
    notes = "".join(f"# {note}\n" for note in plan.notes)
    sys.stdout.write(header + to_yaml(plan.objects) + notes)


@k8s_app.command()
def run(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="kubeconfig file (default: in-cluster account, then ~/.kube/config)."),
    ] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context.")] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="caldera config: queues, policy, kubernetes: (DESIGN §8)."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Read the cluster, decide once, print what would change."),
    ] = False,
    once: Annotated[bool, typer.Option("--once", help="One step, then exit.")] = False,
    sync: Annotated[
        bool, typer.Option(help="Create PriorityClasses and make Volcano Queues match the config.")
    ] = True,
    metrics_bind: Annotated[
        str,
        typer.Option(
            "--metrics-bind",
            metavar="HOST:PORT",
            help="Serve Prometheus /metrics there (e.g. :8080); off when empty.",
        ),
    ] = "",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Run the controller: admit TrainingJobs, run the cycle, create and evict pods."""
    from caldera.k8s.cluster.api import ClusterError
    from caldera.k8s.cluster.client import KubeClusterAPI
    from caldera.k8s.config import KubeConfigError, load_kube_config

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from caldera.k8s.reporting.metrics import parse_bind

    try:
        loaded = load_kube_config(config)
        if metrics_bind:
            parse_bind(metrics_bind)
    except (KubeConfigError, ValueError) as error:
        fail(str(error), EXIT_BAD_INPUT)
    settings = loaded.settings
    if not settings.namespaces:
        fail(
            "no namespaces to serve: list them under kubernetes.namespaces in --config "
            "(caldera reads TrainingJobs only there)",
            EXIT_BAD_INPUT,
        )
    try:
        api = KubeClusterAPI.from_kubeconfig(
            str(kubeconfig) if kubeconfig else None, context, settings.request_timeout
        )
    except ClusterError as error:
        fail(str(error), EXIT_FAILURE)
    try:
        _run(api, loaded, settings, dry_run, once, sync, metrics_bind)
    finally:
        api.close()


def _run(
    api: KubeClusterAPI,
    loaded: KubeConfig,
    settings: KubeSettings,
    dry_run: bool,
    once: bool,
    sync: bool,
    metrics_bind: str = "",
) -> None:
    from caldera.errors import NotFound
    from caldera.k8s.cluster.api import ClusterError
    from caldera.k8s.cluster.cache import InformerCache
    from caldera.k8s.controller import Controller, DryRunCluster, sync_cluster_objects
    from caldera.k8s.effects.actuator import WRITERS
    from caldera.k8s.effects.render import queue_from_volcano
    from caldera.k8s.ha.leader import LeaderElector
    from caldera.k8s.reporting.metrics import ControllerMetrics
    from caldera.k8s.runtime import KubeRuntime

    log = logging.getLogger("caldera.k8s")
    election = settings.leader_election
    elector, campaign = None, None
    if election.enabled and not dry_run:
        elector = LeaderElector(
            api,
            settings.state_namespace,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
        )
    stop, lost = threading.Event(), threading.Event()
    metrics: ControllerMetrics | None = None
    try:
        api.check(list(settings.namespaces))
        queues = loaded.queues or tuple(queue_from_volcano(q, settings) for q in api.list_queues())
        if not queues:
            fail("no queues: give --config with queues, or create Volcano Queues first")
        # One step lists what it reads; a running controller keeps an informer cache.
        reads = None if dry_run or once else InformerCache(api, settings)
        if once and elector is not None and not elector.try_acquire_or_renew():
            fail(
                f"another controller holds the lease {settings.state_namespace}/{elector.name}: "
                "--once would act beside it"
            )
        if metrics_bind and not (dry_run or once):
            # Served before the campaign: a standby answers the probes too (caldera_leader 0).
            metrics = ControllerMetrics(reads=reads)
            metrics.leading.set_function(
                lambda: 1.0 if elector is None or elector.still_leading() else 0.0
            )
            try:
                metrics.serve(metrics_bind)
            except OSError as error:
                fail(f"--metrics-bind {metrics_bind}: {error.strerror or error}", EXIT_FAILURE)
            log.info("metrics on %s/metrics", metrics_bind)
        if elector is not None and not once:
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda *_: stop.set())
            campaign = _lead(elector, reads, stop, lost, log)
            if campaign is None:
                return
        cluster = DryRunCluster(api) if dry_run else api
        if sync and loaded.queues:
            sync_cluster_objects(cluster, loaded.queues, settings)
        # A running controller sends its writes `WRITERS` at a time (one per job: a job's
        # own stay in order); a single step keeps them in order for `would …` lines.
        writers = 1 if dry_run or once else WRITERS
        runtime = KubeRuntime(
            cluster, queues, loaded.policy, settings, reads=reads, writers=writers
        )
        if metrics is not None:
            metrics.attach(runtime)
        if dry_run or once:
            runtime.step()
    except (ClusterError, NotFound) as error:
        fail(str(error), EXIT_FAILURE)
    finally:
        if once and elector is not None and elector.leading.is_set():
            elector.release()
    if dry_run:
        assert isinstance(cluster, DryRunCluster)
        for line in cluster.planned:
            sys.stdout.write(f"would {line}\n")
        if not cluster.planned:
            sys.stdout.write("nothing to do\n")
        return
    if once:
        return
    if elector is None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
    log.info(
        "controller running: %d queue(s), namespaces %s",
        len(queues),
        ", ".join(settings.namespaces),
    )
    leading = elector.still_leading if elector is not None else None
    Controller(runtime, resync=settings.resync).run(stop, leading=leading)
    if campaign is not None:
        campaign.join(timeout=5.0)  # a clean stop gives the Lease up: no standby waits it out
    if lost.is_set():
        fail(
            "lost the leader lease: exiting, so that a new process starts as a standby",
            EXIT_FAILURE,
        )


def _lead(
    elector: LeaderElector,
    reads: InformerCache | None,
    stop: threading.Event,
    lost: threading.Event,
    log: logging.Logger,
) -> threading.Thread | None:
    """List everything (the informers then watch), then campaign for the Lease in the
    background and wait, warm, until this replica leads; the campaign's thread, or None if
    stopped first. Losing the Lease later stops the controller (`lost`)."""

    def on_lost() -> None:
        lost.set()
        stop.set()

    campaign = threading.Thread(
        target=elector.run,
        args=(stop,),
        kwargs={"on_lost": on_lost},
        name="caldera-leader-election",
        daemon=True,
    )
    if reads is not None:
        # List everything before campaigning: parsing 10,000 TrainingJobs and pods takes
        # seconds of the interpreter, and a Lease taken meanwhile went unrenewed past its
        # deadline (the new leader stepped down at once). Warm first, then lead.
        reads.start(stop)
    campaign.start()
    if not elector.leading.wait(0.5):
        log.info(
            "standby: %s waits for the lease %s/%s",
            elector.identity,
            elector.namespace,
            elector.name,
        )
    while not elector.leading.wait(0.25):
        if stop.is_set():
            return None
    log.info("leading: %s holds the lease %s/%s", elector.identity, elector.namespace, elector.name)
    return campaign


dev_cluster_app = typer.Typer(
    name="dev-cluster",
    help="A real control plane on 127.0.0.1 (etcd, API server, controller-manager, "
    "kube-scheduler, KWOK GPU nodes) for trying the controller locally.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
k8s_app.add_typer(dev_cluster_app)

_DEV_DIR = Path.home() / ".cache" / "caldera" / "dev-cluster"
_DirOption = Annotated[Path, typer.Option("--dir", help="The cluster's folder.")]


@dev_cluster_app.command("start")
def dev_cluster_start(
    folder: _DirOption = _DEV_DIR,
    nodes: Annotated[int, typer.Option(min=1, max=1000, help="Fake GPU nodes.")] = 4,
    gpus: Annotated[int, typer.Option(min=1, max=64, help="GPUs per node.")] = 8,
    build: Annotated[
        bool, typer.Option(help="Build the binaries (scripts/cluster-bins.sh) if missing.")
    ] = True,
    volcano: Annotated[
        bool,
        typer.Option(
            "--volcano",
            help="Also run the real Volcano (scheduler, controllers, admission webhooks), "
            "configured as caldera needs it (scripts/volcano-bins.sh).",
        ),
    ] = False,
) -> None:
    """Start the cluster in the background and print how to reach it."""
    from caldera.devcluster import DevCluster, DevClusterError, NodeShape, find_bins
    from caldera.devcluster.volcano import VOLCANO_FOR_CALDERA, find_volcano

    try:
        bins = find_bins(build=build)
        found = find_volcano(build=build) if volcano else None
        if volcano and found is None:
            fail("Volcano is not built: run make cluster-bins (scripts/volcano-bins.sh)")
        folder.mkdir(parents=True, exist_ok=True)
        cluster = DevCluster(
            folder=folder,
            bins=bins,
            nodes=NodeShape(count=nodes, gpus=gpus),
            volcano=found,
            volcano_conf=VOLCANO_FOR_CALDERA,
            volcano_webhook=found is not None,
        )
        cluster.start()
    except DevClusterError as error:
        fail(str(error), EXIT_FAILURE)
    with_volcano = " and Volcano" if found is not None else ""
    sys.stdout.write(
        f"dev cluster up in {cluster.started_in} s: {nodes} KWOK node(s) x {gpus} GPUs"
        f"{with_volcano}, API server {cluster.server}\n"
        f"export KUBECONFIG={cluster.kubeconfig()}\n"
        f"export PATH={bins}:$PATH   # kubectl of the same version\n"
        f"users without rights: {', '.join(cluster.users)} "
        f"(caldera k8s dev-cluster kubeconfig --user NAME)\n"
    )


@dev_cluster_app.command("kubeconfig")
def dev_cluster_kubeconfig(
    folder: _DirOption = _DEV_DIR,
    user: Annotated[str, typer.Option(help="admin, or a user without rights.")] = "admin",
) -> None:
    """Print the path of a user's kubeconfig for the running cluster."""
    from caldera.devcluster import DevCluster, DevClusterError

    try:
        cluster = DevCluster.attach(folder)
    except DevClusterError as error:
        fail(str(error), EXIT_FAILURE)
    if user not in cluster.tokens:
        fail(f"no user {user!r}: one of {', '.join(sorted(cluster.tokens))}", EXIT_BAD_INPUT)
    sys.stdout.write(f"{cluster.kubeconfig(user)}\n")


@dev_cluster_app.command("stop")
def dev_cluster_stop(folder: _DirOption = _DEV_DIR) -> None:
    """Stop every process of the cluster and forget it (its folder is kept for the logs)."""
    from caldera.devcluster import DevCluster, DevClusterError

    try:
        cluster = DevCluster.attach(folder)
    except DevClusterError as error:
        fail(str(error), EXIT_FAILURE)
    cluster.stop()
    sys.stdout.write(f"dev cluster in {folder} stopped\n")
