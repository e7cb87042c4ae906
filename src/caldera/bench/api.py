"""`caldera bench api`: the service under submission load (figures in docs/benchmarks.md).

Submit latency is measured by the client around each call; the server's own share comes
from the `Server-Timing` header it adds to every response.

1. Start latency: on an idle cluster, submit a job whose first act is to print the time, and
   measure from just before the POST to that printed time: the submit call, the cycle, the
   spawn through the runner and the exec, all included. Repeated `starts` times, one at a
   time so each finds an idle GPU.
2. Load: open loop at `rate` submissions per second for `duration` seconds (each request is
   sent at its scheduled time whatever the previous ones did, so a slow server cannot slow
   the offered load down and hide its own latency), from `workers` threads with keep-alive
   connections. Each job asks for one GPU and sleeps. Before the clock starts the cluster is
   filled (`gpus` such jobs, all running, their runners settled), so every job of the load
   waits: the cycle runs over a growing pending queue while submissions keep coming.

Without `url` the benchmark starts its own `caldera serve --gpus N` on a free port with a
throwaway data dir and stops it (and every task it started) afterwards. Its database is
SQLite in that data dir, the one at `database_url`, or (`private_postgres`) a private
PostgreSQL server started for the run from Debian's binaries with the production defaults:
fsync and synchronous commit on, so each commit waits for its flush (`caldera.bench.postgres`).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from caldera.metrics_util import percentile
from caldera.ports import free_port

__all__ = ["ApiBenchResult", "bench_api"]

_TOKEN = "bench-admin-token"
_QUEUE = "bench"


@dataclass
class ApiBenchResult:
    rate: float
    duration: float
    submitted: int
    errors: int
    error_kinds: dict[str, int]  # HTTP status (or transport error) -> how many
    achieved_rate: float
    submit_p50_ms: float
    submit_p95_ms: float
    submit_p99_ms: float
    submit_max_ms: float
    server_p50_ms: float  # inside the server (Server-Timing), without client-side queueing
    server_p99_ms: float
    start_p50_ms: float
    start_max_ms: float
    starts_measured: int
    pending_at_end: int
    cycle_mean_ms: float | None
    gpus: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def _own_server(gpus: int, database_url: str | None, rate: float) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="caldera-bench-") as folder:
        root = Path(folder)
        config = root / "caldera.yaml"
        settings: dict[str, object] = {
            "queues": [{"name": _QUEUE, "weight": 1}],
            "tokens": [{"token": _TOKEN, "user": "bench", "critical": True, "admin": True}],
            # One user submits everything: the per-user limits, meant for a shared host, would
            # answer most of the load 429 (50/s, 10,000 waiting by default).
            "limits": {
                "submit_rate": max(2 * rate, 50.0),
                "submit_burst": 100_000,
                "pending_jobs_per_user": 10_000_000,
            },
        }
        if os.geteuid() == 0:  # a root server runs jobs as another account, never as root
            settings["isolation"] = {"sandbox_user": "nobody"}
            root.chmod(0o711)  # which must reach the data dir
        config.write_text(json.dumps(settings))
        config.chmod(0o600)
        port = free_port()
        caldera = str(Path(sys.executable).parent / "caldera")
        argv = [caldera, "serve", "--config", str(config), "--data-dir", str(root / "data")]
        argv += ["--gpus", str(gpus), "--port", str(port)]
        if database_url:
            argv += ["--database-url", database_url]
        with open(root / "server.log", "wb") as log:
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if server.poll() is not None:
                    tail = (root / "server.log").read_text()[-500:]
                    raise RuntimeError(f"the benchmark server exited: {tail}")
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the benchmark server did not start in 60 s")
                time.sleep(0.1)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
            _kill_tasks(root / "data")


@contextmanager
def _private_postgres() -> Iterator[str]:
    """A durable private PostgreSQL server for one run (fsync on); its URL."""
    from caldera.bench.postgres import find_binaries, start_postgres

    bin_dir = find_binaries()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL binaries not found in /usr/lib/postgresql/*/bin (make system-deps)"
        )
    server = start_postgres(bin_dir, durable=True)
    try:
        yield server.url()
    finally:
        server.stop()


def _kill_tasks(data_dir: Path) -> None:
    from caldera.service.launcher import kill_recorded_tasks

    kill_recorded_tasks(data_dir, wait=30.0)  # gone before their folder is removed


def _start_latencies(client: httpx.Client, starts: int) -> list[float]:
    """Seconds from just before each submit to the moment its process printed the time."""
    latencies: list[float] = []
    for _ in range(starts):
        sent = time.time()
        response = client.post(
            "/v1/jobs",
            json={
                "queue": _QUEUE,
                "gpus": 1,
                "command": ["sh", "-c", "date +%s.%N"],
                "name": "start-probe",
            },
        )
        response.raise_for_status()
        job_id = response.json()["id"]
        deadline = time.monotonic() + 30
        while True:
            text = client.get(f"/v1/jobs/{job_id}/logs").text.strip()
            if text:
                latencies.append(float(text.splitlines()[0]) - sent)
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"start probe {job_id} printed nothing in 30 s")
            time.sleep(0.01)
        while client.get(f"/v1/jobs/{job_id}").json()["state"] not in ("Succeeded", "Failed"):
            time.sleep(0.02)
    return latencies


def _fill(client: httpx.Client, gpus: int) -> list[str]:
    """Fill the cluster before the load, and wait until every task runs and its runner has
    settled: the load then meets the steady state of a full cluster, not the start-up of
    `gpus` runner processes (a Python interpreter each) competing for the CPU."""
    body = {"queue": _QUEUE, "gpus": 1, "command": ["sleep", "3600"], "name": "fill"}
    ids = []
    for _ in range(gpus):
        response = client.post("/v1/jobs", json=body)
        response.raise_for_status()
        ids.append(response.json()["id"])
    deadline = time.monotonic() + 60
    while True:
        running = client.get("/v1/jobs", params={"state": "Running", "limit": 100000}).json()
        if {job["id"] for job in running} >= set(ids):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {gpus} jobs filling the cluster did not all run in 60 s")
        time.sleep(0.1)
    time.sleep(2.0)  # the runners' own start-up (interpreter, imports) is over by then
    return ids


def _load(
    url: str,
    token: str,
    rate: float,
    duration: float,
    workers: int,
    progress: Callable[[int], None] | None,
) -> tuple[list[float], list[float], dict[str, int], float, list[str]]:
    # One keep-alive connection per worker, opened before the clock starts. The load client
    # is the standard library's http.client, not httpx: it runs on the same machine as the
    # server, and httpx costs several times its CPU per request, taken from the server and
    # timed as its latency.
    where = urlsplit(url)
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Connection": "keep-alive",
    }
    connections: queue.SimpleQueue[http.client.HTTPConnection] = queue.SimpleQueue()
    made: list[http.client.HTTPConnection] = []
    for _ in range(workers):
        connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, 30)
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        made.append(connection)
        connections.put(connection)
    latencies: list[float] = []
    inside: list[float] = []
    ids: list[str] = []
    errors: dict[str, int] = {}  # what failed: the HTTP status, or the transport error
    record = threading.Lock()
    payload = json.dumps(
        {"queue": _QUEUE, "gpus": 1, "command": ["sleep", "3600"], "name": "load"}
    ).encode()

    def submit() -> None:
        connection = connections.get()
        try:
            _submit(connection)
        finally:
            connections.put(connection)

    def _submit(connection: http.client.HTTPConnection) -> None:
        began = time.perf_counter()
        answer = b""
        timing = ""
        try:
            connection.request("POST", "/v1/jobs", body=payload, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            timing = response.getheader("server-timing", "")
            failure = None if response.status == 201 else str(response.status)
        except (OSError, http.client.HTTPException) as error:
            connection.close()  # reconnects on the next request
            failure = type(error).__name__
        elapsed = time.perf_counter() - began
        with record:
            if failure is None:
                latencies.append(elapsed)
                inside.append(_server_ms(timing))
                ids.append(json.loads(answer)["id"])
            else:
                errors[failure] = errors.get(failure, 0) + 1

    total = int(rate * duration)
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i in range(total):
            due = began + i / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            pool.submit(submit)
            if progress is not None and i % int(max(rate, 1)) == 0:
                progress(i)
    wall = time.monotonic() - began
    for connection in made:
        connection.close()
    return latencies, inside, errors, wall, ids


def _server_ms(timing: str) -> float:
    """The server's own time for a request, from its Server-Timing header (0 if absent)."""
    _, _, value = timing.partition("dur=")
    try:
        return float(value.split(";")[0])
    except ValueError:
        return 0.0


def _cycle_mean_ms(client: httpx.Client) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name in (
                "caldera_cycle_duration_seconds_sum",
                "caldera_cycle_duration_seconds_count",
            ):
                values[sample.name] = sample.value
    count = values.get("caldera_cycle_duration_seconds_count", 0.0)
    if not count:
        return None
    return values["caldera_cycle_duration_seconds_sum"] / count * 1000


def bench_api(
    url: str | None = None,
    token: str | None = None,
    rate: float = 200.0,
    duration: float = 60.0,
    gpus: int = 8,
    workers: int = 16,
    starts: int = 20,
    database_url: str | None = None,
    progress: Callable[[int], None] | None = None,
    private_postgres: bool = False,
) -> ApiBenchResult:
    if url is None and private_postgres:
        with _private_postgres() as database_url, _own_server(gpus, database_url, rate) as own:
            return _run(own, _TOKEN, True, rate, duration, gpus, workers, starts, progress)
    if url is None:
        with _own_server(gpus, database_url, rate) as own:
            return _run(own, _TOKEN, True, rate, duration, gpus, workers, starts, progress)
    return _run(
        url,
        token or os.environ.get("CALDERA_TOKEN", ""),
        False,
        rate,
        duration,
        gpus,
        workers,
        starts,
        progress,
    )


def _run(
    url: str,
    token: str,
    own: bool,
    rate: float,
    duration: float,
    gpus: int,
    workers: int,
    starts: int,
    progress: Callable[[int], None] | None,
) -> ApiBenchResult:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        start = sorted(_start_latencies(client, starts))
        filled = _fill(client, gpus)
        latencies, inside, errors, wall, ids = _load(url, token, rate, duration, workers, progress)
        ids = filled + ids
        pending = len(client.get("/v1/jobs", params={"state": "Pending", "limit": 100000}).json())
        cycle = _cycle_mean_ms(client)
        if not own:  # leave someone else's server as we found it
            for job_id in ids:
                client.post(f"/v1/jobs/{job_id}/cancel")
    latencies.sort()
    inside.sort()
    ms = [value * 1000 for value in latencies]
    return ApiBenchResult(
        rate=rate,
        duration=duration,
        submitted=len(latencies),
        errors=sum(errors.values()),
        error_kinds=dict(sorted(errors.items())),
        achieved_rate=round(len(latencies) / wall, 1) if wall else 0.0,
        submit_p50_ms=round(percentile(ms, 0.50), 2),
        submit_p95_ms=round(percentile(ms, 0.95), 2),
        submit_p99_ms=round(percentile(ms, 0.99), 2),
        submit_max_ms=round(ms[-1], 2) if ms else 0.0,
        server_p50_ms=round(percentile(inside, 0.50), 2),
        server_p99_ms=round(percentile(inside, 0.99), 2),
        start_p50_ms=round(percentile(start, 0.5) * 1000, 1),
        start_max_ms=round(start[-1] * 1000, 1) if start else 0.0,
        starts_measured=len(start),
        pending_at_end=pending,
        cycle_mean_ms=round(cycle, 2) if cycle is not None else None,
        gpus=gpus,
    )
