"""The side-by-side bench's accounting of the API server's request counts (`VERB resource`,
from `apiserver_request_total`, every client): writes apart, the background (Leases, node
heartbeats, the bench's own `/metrics`) apart, per started pod; what caldera's controller
itself wrote in a caldera mode; and the ratios of pods bound per second between modes. Pure:
tests/bench/test_bench_k8s.py checks it without a cluster."""

from __future__ import annotations

__all__ = [
    "BEHIND",
    "background",
    "controller_writes",
    "is_write",
    "per_pod",
    "ratios",
]

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
BACKGROUND = frozenset({"leases", "nodes", "nodes/status"})  # grow with time, not with pods
# What only caldera's controller writes in the caldera modes (Volcano's own PodGroup updates
# are PUTs, KWOK's pod status patches `pods/status`: neither is here). Not `DELETE pods`: KWOK
# deletes every pod that was evicted or deleted with a grace period, once it has "stopped".
CONTROLLER_WRITES = frozenset(
    {
        "POST pods",
        "POST pods/eviction",
        "PATCH trainingjobs/status",
        "POST podgroups",
        "DELETE podgroups",
        "POST services",
        "DELETE services",
        "POST configmaps",
        "PUT configmaps",
        "PATCH configmaps",
    }
)
EVENT_WRITES = ("POST events", "PATCH events")
BEHIND = {"caldera": "kube-scheduler", "caldera-volcano": "volcano"}  # the runtime behind


def is_write(key: str) -> bool:
    """Whether a `VERB resource` count of the API server is a write."""
    return key.split(" ", 1)[0] in WRITES


def background(key: str) -> bool:
    resource = key.split(" ", 1)[1] if " " in key else ""
    return not resource or resource in BACKGROUND


def per_pod(requests: dict[str, int], pods: int) -> tuple[float, float]:
    """Requests and writes per started pod, the background left out (see the module's docstring)."""
    work = {k: n for k, n in requests.items() if not background(k)}
    total = sum(work.values())
    writes = sum(n for k, n in work.items() if is_write(k))
    return round(total / max(pods, 1), 2), round(writes / max(pods, 1), 2)


def controller_writes(caldera: dict[str, int], behind: dict[str, int]) -> dict[str, int]:
    """The writes of caldera's controller in a caldera mode's counts (`VERB resource`): what
    only it writes there, and its Events — those beyond the count of the mode behind it,
    measured in the same run on the same workload (may be negative by a few: the
    schedulers' own Events vary from run to run)."""
    found = {k: n for k, n in caldera.items() if k in CONTROLLER_WRITES and n}
    for key in EVENT_WRITES:
        extra = caldera.get(key, 0) - behind.get(key, 0)
        if extra:
            found[key] = extra
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def ratios(pods_per_s: dict[str, float]) -> dict[str, float]:
    """caldera + Volcano / Volcano (PodGroups and pods, and Volcano Jobs) and caldera /
    kube-scheduler in pods bound per second, for each pair that both ran (and bound
    something)."""
    pairs = {
        "caldera-volcano/volcano": ("caldera-volcano", "volcano"),
        "caldera-volcano/volcano-job": ("caldera-volcano", "volcano-job"),
        "caldera/kube-scheduler": ("caldera", "kube-scheduler"),
    }
    return {
        name: round(pods_per_s[a] / pods_per_s[b], 3)
        for name, (a, b) in pairs.items()
        if pods_per_s.get(a) and pods_per_s.get(b)
    }
