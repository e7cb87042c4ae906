"""/v1/whoami, /v1/events, /v1/cluster and /v1/queues: the service as a whole.

Live state comes from the runtime's read views (`caldera.service.views`), history from the
store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request

from caldera.errors import NotFound
from caldera.model import GPU_MILLI, QueueState, Resources
from caldera.service.api.auth import Caller
from caldera.service.api.schemas import (
    AuditOut,
    ClusterOut,
    EventOut,
    GPUOut,
    NodeOut,
    QueueOut,
    QueuePatch,
    WhoAmI,
    audit_out,
    event_out,
)
from caldera.service.views import QueueView, ServiceRuntime

__all__ = ["router"]

router = APIRouter()


def _runtime(request: Request) -> ServiceRuntime:
    runtime: ServiceRuntime = request.app.state.runtime
    return runtime


@router.get("/whoami", tags=["service"])
def whoami(who: Caller) -> WhoAmI:
    return WhoAmI(
        user=who.user,
        queues=sorted(who.queues),
        critical=who.critical,
        admin=who.admin,
        protect=who.protect,
        trust_progress=who.trust_progress,
    )


@router.get("/audit", tags=["service"])
def audit(
    who: Caller,
    request: Request,
    after: Annotated[int, Query(ge=0, le=2**62, description="Only rows with a larger id")] = 0,
    user: Annotated[str | None, Query(max_length=128, description="Only this user's")] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[AuditOut]:
    """Admins: the audit log of state-changing requests, oldest first."""
    if not who.admin:
        raise HTTPException(403, "only admins may read the audit log")
    rows = _runtime(request).store.audit(after=after, user=user, limit=limit)
    return [audit_out(row) for row in rows]


@router.get("/events", tags=["service"])
def events(
    who: Caller,
    request: Request,
    after: Annotated[int, Query(ge=0, le=2**62, description="Only events with a larger id")] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[EventOut]:
    """Scheduling events, oldest first; non-admins see their own jobs' events."""
    store = _runtime(request).store
    rows = store.events(after=after, limit=limit, user=None if who.admin else who.user)
    return [event_out(row) for row in rows]


@router.get("/cluster", tags=["service"])
def cluster(who: Caller, request: Request) -> ClusterOut:
    """Nodes, each device's free share and who holds it, waiting modes, job counts. A plain
    user sees the ids of their own jobs only (another team's job is a share held)."""
    view = _runtime(request).cluster_view()

    def shown(jobs: Iterable[str]) -> list[str]:
        return [j for j in jobs if who.admin or view.user_of.get(j) == who.user]

    nodes = [
        NodeOut(
            name=node.name,
            gpu_model=node.gpu_model,
            gpus=[
                GPUOut(
                    index=d.index,
                    free=d.free / GPU_MILLI,
                    jobs=shown(d.jobs),
                    uuid=d.uuid,
                    drained=d.drained,
                    profile=d.profile,
                )
                for d in node.devices
            ],
        )
        for node in view.nodes
    ]
    return ClusterOut(
        gpus=view.gpus,
        gpus_allocated=view.allocated_gpus,
        nodes=nodes,
        throttles={q: job for q, job in view.throttles.items() if shown((job,))},
        jobs=dict(view.jobs_by_state),
    )


@router.get("/queues", tags=["queues"])
def queues(who: Caller, request: Request) -> list[QueueOut]:
    del who
    return [_queue_out(view) for view in _runtime(request).queue_views()]


@router.patch("/queues/{name}", tags=["queues"])
def patch_queue(name: str, body: QueuePatch, who: Caller, request: Request) -> QueueOut:
    """Admins: open, drain (Closing) or close a queue. Kept across restarts."""
    if not who.admin:
        raise HTTPException(403, "only admins may change queues")
    runtime = _runtime(request)
    try:
        runtime.set_queue_state(name, QueueState(body.state))
    except NotFound:
        raise HTTPException(404, f"no queue {name!r}") from None
    return next(_queue_out(v) for v in runtime.queue_views() if v.queue.name == name)


def _gpus(value: Resources | None) -> float | None:
    return value.gpu / GPU_MILLI if value is not None and value.gpu > 0 else None


def _queue_out(view: QueueView) -> QueueOut:
    queue = view.queue
    return QueueOut(
        name=queue.name,
        state=queue.state.value,
        weight=queue.weight,
        deserved_gpus=_gpus(queue.deserved),
        guarantee_gpus=_gpus(queue.guarantee),
        capability_gpus=_gpus(queue.capability),
        reclaimable=queue.reclaimable,
        allocated_gpus=view.allocated / GPU_MILLI,
        pending=view.pending,
        held=view.held,
        running=view.running,
        throttled_for=view.throttled_for,
        parent=queue.parent,
    )
