"""What the Kubernetes benchmarks read off the machine and the API server: a process's CPU
seconds and peak RSS (`/proc`), the API server's own request counts (its `/metrics`), and
percentiles of what was timed."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cpu", "cpu_and_rss", "events_by_reason", "percentile", "server_requests", "wait_for"]


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (a value that was measured; the benchmarks' recorded
    figures use it, where `caldera.metrics_util.percentile` interpolates)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def cpu_and_rss(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS in MiB (`VmHWM`) of a running process."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu_s = (int(stat[11]) + int(stat[12])) / ticks
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            rss = int(line.split()[1]) / 1024
    return cpu_s, rss


def cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each process that still runs."""
    found = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError, IndexError, ValueError):  # it has ended
            found[name] = cpu_and_rss(pid)[0]
    return found


def server_requests(api: Any) -> dict[str, int]:
    """Requests the API server has answered, by `VERB resource[/subresource]` (every
    client), from its own `apiserver_request_total`."""
    from prometheus_client.parser import text_string_to_metric_families

    method, url, headers, _, _ = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, _request_timeout=60)
    response.read()
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(response.data.decode()):
        if family.name != "apiserver_request":  # the parser drops `_total`
            continue
        for sample in family.samples:
            labels = sample.labels
            if not sample.name.endswith("_total"):
                continue
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            key = f"{labels.get('verb', '')} {resource}"
            counts[key] = counts.get(key, 0) + int(sample.value)
    return counts


def events_by_reason(api: Any) -> dict[str, int]:
    """The cluster's Events by `component reason`, each counted as often as it happened (its
    `count` or series): who said what, where a mode's `POST events` and `PATCH events` go."""
    import kubernetes  # the official client: loaded only where a benchmark lists Events

    tally: dict[str, int] = {}
    for event in kubernetes.client.CoreV1Api(api).list_event_for_all_namespaces().items:
        component = event.reporting_component or (event.source and event.source.component) or ""
        times = (event.series and event.series.count) or event.count or 1
        key = f"{component} {event.reason}"
        tally[key] = tally.get(key, 0) + times
    return dict(sorted(tally.items(), key=lambda kv: -kv[1]))


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    """Poll `check` every 0.2 s until it holds; TimeoutError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench k8s: timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)
