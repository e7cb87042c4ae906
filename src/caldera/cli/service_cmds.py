"""`caldera serve` and the client commands: submit, status, list, logs, cancel, watch, queues.

The client commands talk to the server named by CALDERA_URL (default http://127.0.0.1:8265)
with the token in CALDERA_TOKEN. Every failure is one line on stderr and a non-zero exit:
1 for a refusal or a server problem, 2 for a bad command line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from caldera.cli.errors import EXIT_BAD_INPUT, EXIT_FAILURE, fail
from caldera.service.printable import printable

if TYPE_CHECKING:
    from caldera.sdk.client import Client

__all__ = ["register"]

_FINAL = ("Succeeded", "Failed", "Cancelled", "Rejected")


@contextmanager
def _client() -> Iterator[Client]:
    """A client whose errors become one-line failures."""
    from caldera.sdk.client import ApiError, Client

    client = Client()
    try:
        yield client
    except ApiError as error:
        fail(error.message, EXIT_FAILURE)
    finally:
        client.close()


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{what} must be KEY=VALUE, got {item!r}", EXIT_BAD_INPUT)
        result[key] = value
    return result


def _plain(value: object) -> Text:
    """Text shown as it is: never read as Rich markup, and with control characters (terminal
    escape sequences, newlines) shown as `\\xNN` escapes, so a job name cannot draw on an
    admin's terminal or forge a row."""
    return Text(printable(value))


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _short(text: str | None) -> str:
    return "-" if text is None else text.replace("T", " ").removesuffix("Z")


def _per_task(job: dict[str, Any]) -> str:
    """What each task holds: whole GPUs, a share, a time-shared GPU or a MIG slice."""
    if job.get("gpu_profile"):
        return f"one MIG {job['gpu_profile']} slice ({job['gpus_per_task']:g} GPU-equivalent)"
    ways = job.get("time_shared") or 0
    shared = f" (time-shared {ways} ways, no memory isolation)" if ways else ""
    return f"{job['gpus_per_task']:g} GPU{shared}"


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        config: Annotated[
            Path | None, typer.Option(help="Service config (YAML): queues, tokens, policy.")
        ] = None,
        data_dir: Annotated[
            Path | None,
            typer.Option(help="State, logs, checkpoints [default: ~/.local/share/caldera]."),
        ] = None,
        gpus: Annotated[
            int | None, typer.Option(help="Declare N virtual GPUs instead of detecting them.")
        ] = None,
        fake_gpus: Annotated[
            str | None,
            typer.Option(
                help="Pretend this host has GPUs of a shape (h100-sxm, pcie-4+4, a100-mig, "
                "h100-lost) or a JSON file naming one: a fake NVML, for demos and tests."
            ),
        ] = None,
        host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port to listen on.")] = 8265,
        database_url: Annotated[
            str | None,
            typer.Option(help="postgresql+psycopg://… [default: SQLite in the data dir]."),
        ] = None,
    ) -> None:
        """Run the scheduler service on this host's GPUs (REST API, /metrics)."""
        from caldera.service.config import ConfigError
        from caldera.service.server import ServiceError
        from caldera.service.server import serve as run_server

        try:
            run_server(config, data_dir, gpus, host, port, database_url, fake_gpus)
        except (ConfigError, ServiceError) as error:
            fail(str(error), EXIT_BAD_INPUT)

    @app.command(context_settings={"allow_interspersed_args": False})
    def submit(
        command: Annotated[list[str], typer.Argument(help="The command, after --.")],
        queue: Annotated[str, typer.Option(help="Your team's queue.")],
        type: Annotated[
            str, typer.Option("--type", help="critical | large-job | normal | debug.")
        ] = "normal",
        tasks: Annotated[int, typer.Option(help="Tasks (replicas) in the gang.")] = 1,
        gpus: Annotated[float, typer.Option(help="GPUs per task (0.5: half a GPU).")] = 1.0,
        gpu_profile: Annotated[
            str | None,
            typer.Option(
                help="One MIG slice of this profile per task (1g.10gb) instead of --gpus."
            ),
        ] = None,
        name: Annotated[str | None, typer.Option(help="A name for the job.")] = None,
        min_available: Annotated[
            int | None, typer.Option(help="Gang size needed to run [default: tasks].")
        ] = None,
        env: Annotated[
            list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")
        ] = None,
        label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE, repeatable.")] = None,
        expected_duration: Annotated[
            float | None, typer.Option(help="Seconds the job should take (for progress).")
        ] = None,
        checkpoint_interval: Annotated[
            float | None, typer.Option(help="Seconds between the job's checkpoints.")
        ] = None,
        checkpoint_cost: Annotated[float, typer.Option(help="Seconds one checkpoint takes.")] = 0.0,
        max_retries: Annotated[int, typer.Option(help="Reruns after a failure.")] = 0,
        json_output: Annotated[bool, typer.Option("--json", help="Print the job as JSON.")] = False,
    ) -> None:
        """Submit a job; prints its id."""
        body: dict[str, Any] = {
            "env": _pairs(env, "--env"),
            "labels": _pairs(label, "--label"),
            "workdir": str(Path.cwd()),
            "max_retries": max_retries,
        }
        if min_available is not None:
            body["min_available"] = min_available
        if gpu_profile is not None:
            if gpus != 1.0:
                fail("give --gpus or --gpu-profile, not both", EXIT_BAD_INPUT)
            body["gpu_profile"] = gpu_profile
        if expected_duration is not None:
            body["expected_duration"] = expected_duration
        if checkpoint_interval is not None or checkpoint_cost:
            body["checkpoint"] = {"interval": checkpoint_interval, "cost": checkpoint_cost}
        with _client() as client:
            job = client.submit(command, queue, type, tasks, gpus, name, **body)
        if json_output:
            _print_json(job)
        else:
            sys.stdout.write(job["id"] + "\n")

    @app.command()
    def status(
        job: Annotated[str, typer.Argument(help="Job id.")],
        json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Show one job."""
        with _client() as client:
            found = client.get(job)
            if json_output:
                _print_json(found)
                return
            moved = [  # evicted because its GPU was sick (docs/gpus.md)
                e
                for e in client.events(job)
                if e["kind"] == "evict" and (e["data"] or {}).get("reason") == "health"
            ]
        console = Console(highlight=False, soft_wrap=True)
        rows = [
            ("job", f"{found['id']} ({found['name']})"),
            ("user / queue", f"{found['user']} / {found['queue']}"),
            ("type", f"{found['type']} ({found['priority_class']})"),
            (
                "state",
                found["state"] + (f" ({found['hold_reason']})" if found["hold_reason"] else ""),
            ),
            ("tasks", f"{found['tasks']} × {_per_task(found)}"),
            ("submitted", _short(found["submit_time"])),
            ("started", _short(found["start_time"])),
            ("ended", _short(found["end_time"])),
            ("evictions", str(found["evictions"])),
            ("exit code", "-" if found["exit_code"] is None else str(found["exit_code"])),
        ]
        if found["checkpoint_step"] is not None:
            rows.append(("checkpoint", f"step {found['checkpoint_step']}"))
        if found["reason"]:
            rows.append(("reason", found["reason"]))
        for event in moved:
            data = event["data"] or {}
            rows.append(
                ("moved off GPU", f"{_short(event['time'])} {data['gpu']}: {data['gpu_reason']}")
            )
        for task in found["placement"]:
            rows.append(
                (
                    f"task {task['rank']}",
                    f"{task['node']} GPUs {task['devices']} pid {task['pid']} {task['state']}",
                )
            )
        for label, value in rows:
            console.print(Text.assemble((f"{label}:", "bold"), " ", _plain(value)))

    @app.command("list")
    def list_jobs(
        state: Annotated[
            list[str] | None, typer.Option(help="Only jobs in this state (repeatable).")
        ] = None,
        queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
        user: Annotated[str | None, typer.Option(help="Admins: another user's jobs.")] = None,
        limit: Annotated[int, typer.Option(help="At most this many (newest).")] = 200,
        json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """List your jobs (admins: everybody's)."""
        with _client() as client:
            jobs = client.jobs(state=state, queue=queue, user=user, limit=limit)
        if json_output:
            _print_json(jobs)
            return
        table = Table(box=None, highlight=False)
        for column in ("ID", "NAME", "USER", "QUEUE", "TYPE", "STATE", "GPUS", "SUBMITTED"):
            table.add_column(column)
        for job in jobs:
            table.add_row(
                *(
                    _plain(value)
                    for value in (
                        job["id"],
                        job["name"],
                        job["user"],
                        job["queue"],
                        job["type"],
                        job["state"],
                        f"{job['tasks'] * job['gpus_per_task']:g}",
                        _short(job["submit_time"]),
                    )
                )
            )
        Console().print(table)

    @app.command()
    def logs(
        job: Annotated[str, typer.Argument(help="Job id.")],
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")
        ] = False,
        rank: Annotated[int, typer.Option(help="Which task.")] = 0,
        tail: Annotated[int | None, typer.Option(help="Only the last N lines.")] = None,
    ) -> None:
        """Print a task's output (stdout and stderr)."""
        out = sys.stdout.buffer
        with _client() as client:
            if follow:
                for chunk in client.follow_logs(job, rank, tail):
                    out.write(chunk)
                    out.flush()
            else:
                out.write(client.logs(job, rank, tail).encode())
        out.flush()

    @app.command()
    def cancel(job: Annotated[str, typer.Argument(help="Job id.")]) -> None:
        """Cancel a job (a running one gets SIGTERM, the grace period, then SIGKILL)."""
        with _client() as client:
            found = client.cancel(job)
        if found["state"] == "Cancelled":
            sys.stdout.write(f"{found['id']} cancelled\n")
        else:
            sys.stdout.write(f"{found['id']} cancelling: SIGTERM sent, {found['state']}\n")

    @app.command()
    def watch(
        job: Annotated[str, typer.Argument(help="Job id.")],
        interval: Annotated[float, typer.Option(help="Seconds between looks.")] = 0.5,
    ) -> None:
        """Print a job's events as they happen until it ends; exit 0 if it succeeded."""
        seen = 0
        with _client() as client:
            while True:
                found = client.get(job)
                for event in client.events(job):
                    if event["id"] <= seen:
                        continue
                    seen = event["id"]
                    data = event["data"] or {}
                    detail = " ".join(f"{k}={v}" for k, v in data.items() if v not in (None, []))
                    line = f"{_short(event['time'])}  {event['kind']:<12} {detail}"
                    sys.stdout.write(f"{_plain(line)}\n")
                sys.stdout.flush()
                if found["state"] in _FINAL:
                    sys.stdout.write(f"{found['id']} {found['state']}\n")
                    if found["state"] != "Succeeded":
                        raise typer.Exit(EXIT_FAILURE)
                    return
                time.sleep(interval)

    def _as_tree(found: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
        """Departments each followed by their teams (depth 1); a flat list as it came."""
        children: dict[str, list[dict[str, Any]]] = {}
        for q in found:
            if q.get("parent"):
                children.setdefault(q["parent"], []).append(q)
        rows: list[tuple[dict[str, Any], int]] = []
        for q in found:
            if not q.get("parent"):
                rows.append((q, 0))
                rows.extend((child, 1) for child in children.get(q["name"], []))
        return rows

    @app.command()
    def queues(
        json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Show the queues: state, quotas, what they hold and wait for."""
        with _client() as client:
            found = client.queues()
            if json_output:
                _print_json(found)
                return
            cluster = client.cluster()
        table = Table(box=None, highlight=False)
        for column in (
            "QUEUE",
            "STATE",
            "WEIGHT",
            "DESERVED",
            "ALLOCATED",
            "RUNNING",
            "PENDING",
            "HELD",
            "THROTTLED FOR",
        ):
            table.add_column(column)
        for q, depth in _as_tree(found):
            table.add_row(
                Text("  └ " * depth) + _plain(q["name"]),
                q["state"],
                str(q["weight"]),
                "-" if q["deserved_gpus"] is None else f"{q['deserved_gpus']:g}",
                f"{q['allocated_gpus']:g}",
                str(q["running"]),
                str(q["pending"]),
                str(q["held"]),
                q["throttled_for"] or "-",
            )
        console = Console(highlight=False, soft_wrap=True)
        console.print(table)
        devices = [(node["name"], gpu) for node in cluster["nodes"] for gpu in node["gpus"]]
        for kind, mig in (("GPUs", False), ("MIG slices", True)):
            mine = [(name, gpu) for name, gpu in devices if bool(gpu.get("profile")) == mig]
            sick = sum(1 for _, gpu in mine if gpu["drained"])
            if mine or not mig:
                console.print(f"{kind}: {len(mine) - sick} of {len(mine)} healthy")
        for name, gpu in devices:
            if gpu["drained"]:
                what = f"MIG {gpu['profile']} device" if gpu.get("profile") else "GPU"
                where = f"{name} {what} {gpu['index']} {gpu['uuid'] or ''}".rstrip()
                console.print(f"  drained: {where} — {gpu['drained']}")
