"""The dashboard's routes: one page per view, each with a live region that htmx re-fetches
every two seconds (the same route answers an `HX-Request` with the region alone).

Pages: overview (the seeds' four numbers, queues), queues, jobs (sortable, filterable), a job
(timeline, why it waits, log tail), cluster (GPU map, free room per topology domain),
preemptions (who took what from whom, over time). Login and logout.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from caldera.model import JobState
from caldera.service.launcher import JobFiles
from caldera.service.ui import live
from caldera.service.ui.auth import Looker, set_login, viewer_of
from caldera.service.ui.reads import (
    LIVE_STATES,
    SORTABLE,
    TYPES,
    TimelineEntry,
    Viewer,
    domain_room,
    job_row,
    preemption_buckets,
    preemptions,
    sort_jobs,
    timeline,
)
from caldera.service.views import ServiceRuntime

__all__ = ["router"]

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(prefix="/ui", include_in_schema=False)

_LOG_BYTES = 16_384
_LOG_LINES = 40
_JOBS_SHOWN = 500
_PREEMPTIONS_SHOWN = 200


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24} h"


def _clock(t: float | None) -> str:
    if t is None:
        return "–"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short_clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")


templates.env.filters["duration"] = _duration
templates.env.filters["clock"] = _clock
templates.env.filters["short_clock"] = _short_clock


def _render(request: Request, page: str, part: str, viewer: Viewer, **context: Any) -> Response:
    """The whole page, or only its live region when htmx asks for it."""
    name = part if request.headers.get("hx-request") else page
    context.update(viewer=viewer, now=time.time(), live_url=str(request.url))
    return templates.TemplateResponse(request, name, context)


def _runtime(request: Request) -> ServiceRuntime:
    runtime: ServiceRuntime = request.app.state.runtime
    return runtime


def _forbidden(request: Request, viewer: Viewer, message: str) -> Response:
    response = templates.TemplateResponse(
        request, "denied.html", {"viewer": viewer, "message": message}, status_code=403
    )
    return response


# -- login -----------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/ui") -> Response:
    return templates.TemplateResponse(request, "login.html", {"next": next, "error": None})


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    target = (form.get("next") or ["/ui"])[0]
    if not target.startswith("/ui"):
        target = "/ui"  # only ever back into the dashboard
    if viewer_of(request, token) is None:
        context = {"next": target, "error": "unknown token"}
        return templates.TemplateResponse(request, "login.html", context, status_code=401)
    response = RedirectResponse(target, status_code=303)
    set_login(response, request, token)
    return response


@router.post("/logout")
def logout(request: Request) -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    set_login(response, request, None)
    return response


# -- pages -----------------------------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
@router.get("/", response_class=HTMLResponse)
def overview(request: Request, viewer: Looker) -> Response:
    runtime = _runtime(request)
    now = time.time()
    lost_day = sum(
        float((e["data"] or {}).get("lost_gpu_seconds") or 0.0)
        for e in runtime.store.events_of_kind("requeue")
        if e["t"] >= now - 86_400
    )
    rows = live.queue_rows(runtime, viewer, now)
    states = live.state_counts(rows)
    return _render(
        request,
        "overview.html",
        "_overview.html",
        viewer,
        numbers=live.seed_numbers(request.app.state.metrics_registry),
        wasted_day=lost_day / 3600,
        queues=rows,
        states=list(states.items()),
    )


@router.get("/queues", response_class=HTMLResponse)
def queues(request: Request, viewer: Looker) -> Response:
    rows = live.queue_rows(_runtime(request), viewer, time.time())
    return _render(request, "queues.html", "_queues.html", viewer, queues=rows)


@router.get("/jobs", response_class=HTMLResponse)
def jobs(
    request: Request,
    viewer: Looker,
    queue: str = "",
    type: str = "",
    state: str = "live",
    user: str = "",
    sort: str = "submit_time",
    order: str = "desc",
) -> Response:
    runtime = _runtime(request)
    if state == "live":
        states: list[str] | None = list(LIVE_STATES)
    elif state in {s.value for s in JobState}:
        states = [state]
    else:
        states = None
    rows = runtime.store.jobs(
        states=states,
        queue=queue or None,
        job_type=type if type in TYPES else None,
        user=user or None,
        limit=_JOBS_SHOWN,
        newest_first=True,
    )
    now = time.time()
    rows = [r for r in rows if viewer.sees_queue(r["queue"])]
    requeued = runtime.store.requeued_at([r["id"] for r in rows if r["first_start"] is not None])
    shown = [job_row(r, now, requeued.get(r["id"])) for r in rows]
    column = sort if sort in SORTABLE else "submit_time"
    shown = sort_jobs(shown, column, order != "asc")
    filters = {"queue": queue, "type": type, "state": state, "user": user}

    def sort_link(name: str) -> str:
        flip = "asc" if column == name and order != "asc" else "desc"
        return "/ui/jobs?" + urlencode({**filters, "sort": name, "order": flip})

    queue_names = [q.name for q in live.queue_rows(runtime, viewer, now)]
    return _render(
        request,
        "jobs.html",
        "_jobs.html",
        viewer,
        jobs=shown,
        why=live.waiting_reasons(runtime, [j.id for j in shown if j.state == "Pending"]),
        filters=filters,
        sort=column,
        order=order,
        sort_link=sort_link,
        queue_names=queue_names,
        types=TYPES,
        states=["live", *[s.value for s in JobState if s is not JobState.REJECTED], "all"],
        limit=_JOBS_SHOWN,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job(request: Request, job_id: str, viewer: Looker) -> Response:
    runtime = _runtime(request)
    row = runtime.store.job(job_id)
    if row is None:
        return _forbidden(request, viewer, f"no job {job_id}")
    if not viewer.sees_queue(row["queue"]):
        return _forbidden(
            request, viewer, f"job {job_id} belongs to queue {row['queue']}, not one of yours"
        )
    own = runtime.store.events(job=job_id, limit=10_000)
    caused = [
        e
        for e in runtime.store.events_of_kind("evict")
        if (e["data"] or {}).get("preemptor") == job_id
    ]
    log = None
    if viewer.sees_log(row):
        log = _tail(JobFiles(runtime.data_dir, job_id).log(0))
    placement = [
        {
            "rank": task["rank"],
            "node": _node_name(runtime, int(task["placement"]["node"])),
            "devices": list(task["placement"]["devices"]),
            "state": "exited"
            if task.get("done")
            else "releasing"
            if task.get("leaving")
            else "running",
        }
        for task in row["tasks"] or []
    ]
    return _render(
        request,
        "job.html",
        "_job.html",
        viewer,
        job=job_row(row, time.time(), runtime.store.requeued_at([job_id]).get(job_id)),
        row=row,
        waiting=live.waiting_reason(runtime, job_id),
        timeline=_named(runtime, viewer, timeline(own, caused)),
        log=log,
        placement=placement,
    )


@router.get("/cluster", response_class=HTMLResponse)
def cluster(request: Request, viewer: Looker) -> Response:
    runtime = _runtime(request)
    maps = live.gpu_maps(runtime, viewer)
    return _render(
        request,
        "cluster.html",
        "_cluster.html",
        viewer,
        nodes=maps,
        domains=domain_room(runtime.nodes, maps),
    )


@router.get("/preemptions", response_class=HTMLResponse)
def preemption_list(request: Request, viewer: Looker) -> Response:
    runtime = _runtime(request)
    store = runtime.store
    evictions = store.events_of_kind("evict")
    ids: set[str] = {e["job"] for e in evictions}
    ids.update(p for e in evictions if (p := (e["data"] or {}).get("preemptor")))
    queue_of: dict[str, str] = {}
    name_of: dict[str, str] = {}
    for job_id in ids:
        found = store.job(job_id)
        if found is not None:
            queue_of[job_id], name_of[job_id] = found["queue"], found["name"]
    found_all = preemptions(evictions, store.events_of_kind("requeue"), queue_of, name_of)
    visible = [
        p
        for p in found_all
        if viewer.sees_queue(p.victim_queue)
        or (p.preemptor_queue is not None and viewer.sees_queue(p.preemptor_queue))
    ]
    now = time.time()
    buckets = preemption_buckets(visible, now)
    return _render(
        request,
        "preemptions.html",
        "_preemptions.html",
        viewer,
        preemptions=visible[:_PREEMPTIONS_SHOWN],
        total=len(visible),
        lost=sum(p.lost_gpu_hours or 0.0 for p in visible),
        buckets=buckets,
        peak=max((b.total for b in buckets), default=0),
        reasons=sorted({r for b in buckets for r in b.counts}),
    )


def _named(
    runtime: ServiceRuntime, viewer: Viewer, entries: list[TimelineEntry]
) -> list[TimelineEntry]:
    """The timeline with the name of each job an entry names, beside its id (a job of a
    queue the viewer may not see keeps its name to itself)."""
    names: dict[str, str] = {}
    for other in {e.other for e in entries if e.other}:
        found = runtime.store.job(other)
        seen = found is not None and viewer.sees_queue(found["queue"])
        names[other] = str(found["name"]) if found and seen else ""
    return [replace(e, other_name=names[e.other]) if e.other else e for e in entries]


def _node_name(runtime: Any, index: int) -> str:
    nodes = runtime.nodes
    return str(nodes[index].name) if index < len(nodes) else str(index)


def _tail(path: Path) -> str:
    """The last lines of a log, read from its end only."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(size - _LOG_BYTES, 0))
            data = handle.read()
    except FileNotFoundError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-_LOG_LINES:])
