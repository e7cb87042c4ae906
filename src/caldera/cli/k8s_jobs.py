"""`caldera k8s submit|status|list|cancel|wait`: TrainingJobs on a cluster, as a user.

    caldera k8s submit NAME --image IMG [--queue Q] [--type T] [--tasks N] [--gpus G] -- CMD…
    caldera k8s status NAME [--json]        state, conditions and Events
    caldera k8s list [--state S] [--json]
    caldera k8s cancel NAME
    caldera k8s wait NAME [--for Running|Finished|…] [--timeout S]

They run with the user's own kubeconfig (`--kubeconfig`, `--context`, `-n`), so RBAC and
caldera's admission policy judge the user. Failures are one line, exit 1 (2 for bad input).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from caldera.cli.errors import EXIT_BAD_INPUT, fail

if TYPE_CHECKING:
    from caldera.sdk.kube import KubeClient

__all__ = ["register"]

_Kubeconfig = Annotated[str | None, typer.Option("--kubeconfig", help="kubeconfig file.")]
_Context = Annotated[str | None, typer.Option(help="kubeconfig context.")]
_Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]


def _client(kubeconfig: str | None, context: str | None, namespace: str | None) -> KubeClient:
    from caldera.errors import ApiError
    from caldera.sdk.kube import KubeClient

    try:
        return KubeClient(kubeconfig, context, namespace)
    except ApiError as error:
        fail(str(error))


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values or []:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            fail(f"{option} takes KEY=VALUE, not {value!r}", EXIT_BAD_INPUT)
        pairs[key] = rest
    return pairs


def register(app: typer.Typer) -> None:
    """Add the user's commands to `caldera k8s`."""
    from caldera.errors import ApiError

    @app.command()
    def submit(
        name: Annotated[str, typer.Argument(help="The TrainingJob's name (a DNS label).")],
        command: Annotated[list[str], typer.Argument(help="The command, after --.")],
        image: Annotated[str | None, typer.Option(help="Container image.")] = None,
        queue: Annotated[str | None, typer.Option(help="Queue (default: the namespace's).")] = None,
        type: Annotated[
            str, typer.Option("--type", help="critical | large-job | normal | debug.")
        ] = "normal",
        tasks: Annotated[int, typer.Option(min=1, help="Replicas in the gang.")] = 1,
        gpus: Annotated[float, typer.Option(min=0, help="GPUs per task (0.5: a share).")] = 1.0,
        min_available: Annotated[
            int | None, typer.Option(help="Gang size needed to run [default: tasks].")
        ] = None,
        env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE.")] = None,
        checkpoint_interval: Annotated[
            float | None, typer.Option(help="Seconds between the job's checkpoints.")
        ] = None,
        max_retries: Annotated[int | None, typer.Option(help="Reruns after a failure.")] = None,
        kubeconfig: _Kubeconfig = None,
        context: _Context = None,
        namespace: _Namespace = None,
    ) -> None:
        """Create a TrainingJob; prints NAMESPACE/NAME."""
        fields: dict[str, Any] = {
            "image": image,
            "queue": queue,
            "type": type,
            "tasks": tasks,
            "gpus": gpus,
            "min_available": min_available,
            "env": _pairs(env, "--env"),
            "checkpoint_interval": checkpoint_interval,
            "max_retries": max_retries,
        }
        with _client(kubeconfig, context, namespace) as kube:
            try:
                created = kube.submit(name, command, **fields)
            except ApiError as error:
                fail(str(error))
        metadata = created["metadata"]
        sys.stdout.write(f"{metadata['namespace']}/{metadata['name']}\n")

    @app.command()
    def status(
        name: Annotated[str, typer.Argument(help="The TrainingJob's name.")],
        json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        kubeconfig: _Kubeconfig = None,
        context: _Context = None,
        namespace: _Namespace = None,
    ) -> None:
        """A TrainingJob's state, conditions and the controller's Events."""
        with _client(kubeconfig, context, namespace) as kube:
            try:
                job = kube.get(name)
                events = kube.events(name)
            except ApiError as error:
                fail(str(error))
        state = job.get("status") or {}
        if json_output:
            sys.stdout.write(json.dumps({"job": job, "events": events}, indent=2) + "\n")
            return
        lines = [
            f"{job['metadata']['namespace']}/{name}: {state.get('state') or 'not admitted yet'}"
            + (f" ({state['reason']})" if state.get("reason") else ""),
        ]
        for condition in state.get("conditions") or []:
            lines.append(
                f"  {condition['type']}={condition['status']} {condition.get('reason', '')}: "
                f"{condition.get('message', '')}"
            )
        for event in events:
            lines.append(f"  event {event['reason']}: {event['message']}")
        sys.stdout.write("\n".join(lines) + "\n")

    @app.command("list")
    def list_jobs(
        state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
        json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        kubeconfig: _Kubeconfig = None,
        context: _Context = None,
        namespace: _Namespace = None,
    ) -> None:
        """The namespace's TrainingJobs, oldest first."""
        with _client(kubeconfig, context, namespace) as kube:
            try:
                jobs = kube.jobs(state=state)
            except ApiError as error:
                fail(str(error))
        if json_output:
            sys.stdout.write(json.dumps(jobs, indent=2) + "\n")
            return
        for job in jobs:
            st = job.get("status") or {}
            sys.stdout.write(
                f"{job['metadata']['name']}\t{job['spec'].get('type', 'normal')}\t"
                f"{st.get('queue', '')}\t{st.get('state', '')}\t{st.get('gpus', '')}\n"
            )

    @app.command()
    def cancel(
        name: Annotated[str, typer.Argument(help="The TrainingJob's name.")],
        kubeconfig: _Kubeconfig = None,
        context: _Context = None,
        namespace: _Namespace = None,
    ) -> None:
        """Delete a TrainingJob: its pods get their grace period."""
        with _client(kubeconfig, context, namespace) as kube:
            try:
                kube.cancel(name)
            except ApiError as error:
                fail(str(error))

    @app.command()
    def wait(
        name: Annotated[str, typer.Argument(help="The TrainingJob's name.")],
        condition: Annotated[
            str, typer.Option("--for", help="A condition: Running, Finished, Succeeded, …")
        ] = "Finished",
        timeout: Annotated[float, typer.Option(min=0, help="Seconds.")] = 600.0,
        kubeconfig: _Kubeconfig = None,
        context: _Context = None,
        namespace: _Namespace = None,
    ) -> None:
        """Wait until a condition of the job is True; exit 1 on timeout."""
        with _client(kubeconfig, context, namespace) as kube:
            try:
                job = kube.wait(name, condition=condition, timeout=timeout)
            except ApiError as error:
                fail(str(error))
        sys.stdout.write(f"{name}: {(job.get('status') or {}).get('state')}\n")
