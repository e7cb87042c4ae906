"""Invariant checks on one cycle's decisions (DESIGN §3 "never allowed", §4.1, §4.5).

`violations(snapshot, decisions)` returns what is wrong, as readable lines (empty: all good),
so a property can show every broken rule at once. The checks re-derive everything from the
snapshot with a fresh `Room`; they share no code with the cycle beyond the model and `Room`'s
capacity accounting (whose own index is checked against a rebuild).
"""

from __future__ import annotations

from collections.abc import Iterable

from caldera.core import (
    Decisions,
    EvictReason,
    JobView,
    Nomination,
    Room,
    Snapshot,
    TaskPlacement,
)
from caldera.core import effective_weight as w_eff
from caldera.core.room import CapacityError
from caldera.model import (
    CRITICAL_PRIORITY,
    GPU_MILLI,
    JobState,
    JobType,
    Node,
    Resources,
    TopologyMode,
)

__all__ = ["deserved_gpu", "domain_of", "guarantee_gpu", "island_ok", "one_domain", "violations"]


def domain_of(node: Node, tier: int) -> int:
    return node.tier1 if tier <= 1 else node.tier2


def one_domain(nodes: tuple[Node, ...], tasks: Iterable[TaskPlacement], tier: int) -> bool:
    return len({domain_of(nodes[t.node], tier) for t in tasks}) <= 1


def island_ok(node: Node, task: TaskPlacement) -> bool:
    """A multi-GPU task sits inside one NVLink island, or takes whole islands."""
    if task.milli < GPU_MILLI or len(task.devices) <= 1:
        return True
    size = node.island_size
    islands: dict[int, int] = {}
    for device in task.devices:
        islands[node.island_of(device)] = islands.get(node.island_of(device), 0) + 1
    if len(task.devices) <= size:
        return len(islands) == 1
    full = sum(1 for count in islands.values() if count == size)
    return full >= len(task.devices) // size and len(islands) <= -(-len(task.devices) // size)


def deserved_gpu(snapshot: Snapshot, queue: str) -> int:
    """A queue's deserved milli-GPUs: its `deserved` quota's (0 included), or its weight's
    share of the cluster's GPUs when it has none (DESIGN §4.1 step 7). MIG slices count by
    their GPU-equivalent (caldera.model.mig), like a MIG job's `gpu`."""
    q = snapshot.queues[queue]
    if q.deserved is not None:
        return q.deserved.gpu
    total = sum(n.capacity_milli for n in snapshot.nodes)
    weights = sum(max(other.weight, 0) for other in snapshot.queues.values()) or 1
    return total * max(q.weight, 0) // weights


def guarantee_gpu(snapshot: Snapshot, queue: str) -> int:
    q = snapshot.queues[queue]
    return q.guarantee.gpu if q.guarantee else 0


def _protected(job: JobView) -> bool:
    spec = job.spec
    return (
        spec.labels.get("protected", "").lower() == "true"
        or spec.priority >= CRITICAL_PRIORITY
        or spec.namespace == "kube-system"
        or spec.priority_class_name in ("system-cluster-critical", "system-node-critical")
    )


def violations(snapshot: Snapshot, decisions: Decisions) -> list[str]:
    problems: list[str] = []
    nodes = snapshot.nodes
    jobs = {j.id: j for j in snapshot.all_jobs}
    config = snapshot.config
    now = snapshot.now

    # The snapshot's room index matches a rebuild (the cycle must leave it as it was).
    rebuilt = Room(nodes)
    for j in snapshot.all_jobs:
        for task in (*j.placement, *j.releasing):
            rebuilt.take(task)
    if rebuilt.fingerprint() != snapshot.free_room.fingerprint():
        problems.append("the snapshot's free-room index no longer matches its jobs")

    # -- starts ----------------------------------------------------------------------------
    started: dict[str, list[TaskPlacement]] = {}
    for start in decisions.starts:
        job = jobs.get(start.job)
        if job is None:
            problems.append(f"start of unknown job {start.job}")
            continue
        if start.job in started:
            problems.append(f"{start.job} started twice in one cycle")
        started[start.job] = list(start.placement)
        spec = job.spec
        if start.grow:
            if job.state is not JobState.RUNNING:
                problems.append(f"{start.job}: grow of a job that is not running")
            total = len(job.placement) + len(start.placement)
            if total > spec.tasks:
                problems.append(f"{start.job}: grew to {total} tasks of {spec.tasks}")
        else:
            if job.state is not JobState.PENDING:
                problems.append(f"{start.job}: started from {job.state}")
            if not spec.min_available <= len(start.placement) <= spec.tasks:
                problems.append(
                    f"{start.job}: started {len(start.placement)} tasks, gang needs "
                    f"{spec.min_available}..{spec.tasks}"
                )
        for task in start.placement:
            node = nodes[task.node]
            if spec.gpu_models is not None and node.gpu_model not in spec.gpu_models:
                problems.append(f"{start.job}: on {node.gpu_model}, wants {spec.gpu_models}")
            want_devices = spec.gpu // GPU_MILLI if spec.gpu >= GPU_MILLI else int(spec.gpu > 0)
            want_milli = GPU_MILLI if spec.gpu >= GPU_MILLI else spec.gpu
            if len(set(task.devices)) != want_devices or (
                want_devices and task.milli != want_milli
            ):
                problems.append(f"{start.job}: task shape {task} for {spec.gpu} milli")
            profiles = {node.profile_of(d) for d in task.devices}
            if profiles != ({spec.gpu_profile} if task.devices else set()):
                problems.append(f"{start.job}: devices {task.devices} for profile {profiles}")
            if (task.cpu, task.memory) != (spec.cpu, spec.memory):
                problems.append(f"{start.job}: task cpu/memory {task.cpu}/{task.memory}")
            if not island_ok(node, task):
                problems.append(f"{start.job}: task {task.devices} straddles NVLink islands")
        topology = spec.topology
        if topology is not None and topology.mode is TopologyMode.HARD:
            tasks = [*start.placement, *(job.placement if start.grow else ())]
            if not one_domain(nodes, tasks, topology.highest_tier):
                problems.append(f"{start.job}: hard tier-{topology.highest_tier} violated")

    # No node over capacity: every start fits on top of what is held.
    for job_id, tasks in started.items():
        for task in tasks:
            try:
                rebuilt.take(task)
            except CapacityError as error:
                problems.append(f"{job_id}: over capacity: {error}")

    # Capability: what a queue holds plus what it starts stays within its cap.
    held: dict[str, Resources] = {}
    for j in snapshot.all_jobs:
        count = len(j.placement) + len(j.releasing) + len(started.get(j.id, ()))
        held[j.spec.queue] = held.get(j.spec.queue, Resources()) + j.spec.task_request.scaled(count)
    for name, q in snapshot.queues.items():
        starts_here = any(jobs[s].spec.queue == name for s in started)
        if starts_here and not held.get(name, Resources()).fits_in(q.capability):
            problems.append(f"queue {name} over its capability after starts")

    # -- evictions -------------------------------------------------------------------------
    evicted: dict[str, int] = {}
    gone_from: dict[str, int] = {}
    largest_reclaimed: dict[str, int] = {}
    # per victim queue, at its last reclaim: what had left it so far (that reclaim included)
    gone_at_reclaim: dict[str, int] = {}
    reclaimers: set[str] = set()
    budget_gpu = 0
    for evict in decisions.evictions:
        victim = jobs.get(evict.job)
        if victim is None:
            problems.append(f"eviction of unknown job {evict.job}")
            continue
        evicted[evict.job] = evicted.get(evict.job, 0) + 1
        if victim.state is not JobState.RUNNING:
            problems.append(f"{evict.job}: evicted while {victim.state}")
        if evict.job in started:
            problems.append(f"{evict.job}: started and evicted in one cycle")
        if _protected(victim):
            problems.append(f"{evict.job}: protected/critical/conformance job evicted")
        if evict.tasks:
            left = len(victim.placement) - len(set(evict.tasks))
            if left < victim.spec.min_available:
                problems.append(f"{evict.job}: partial eviction leaves {left} tasks")
        gpu = victim.spec.gpu * (len(set(evict.tasks)) if evict.tasks else len(victim.placement))
        if evict.reason in (EvictReason.PREEMPT, EvictReason.RECLAIM):
            budget_gpu += gpu
            gone_from[victim.spec.queue] = gone_from.get(victim.spec.queue, 0) + gpu
            if evict.reason is EvictReason.RECLAIM:
                largest = largest_reclaimed.get(victim.spec.queue, 0)
                largest_reclaimed[victim.spec.queue] = max(largest, gpu)
                gone_at_reclaim[victim.spec.queue] = gone_from[victim.spec.queue]
            preemptor = jobs.get(evict.preemptor or "")
            if preemptor is None:
                problems.append(f"{evict.job}: {evict.reason} without a known preemptor")
                continue
            p = preemptor.spec
            if p.type is JobType.DEBUG or not p.priority_class.may_preempt:
                problems.append(f"{evict.job}: evicted for debug job {p.id}")
            weight = w_eff(victim, config, now)
            last = victim.last_evicted_at
            if last is not None and now - last < config.cooldown and p.priority < 1000:
                problems.append(f"{evict.job}: evicted again within the cooldown by {p.id}")
            same = victim.spec.queue == p.queue
            if evict.reason is EvictReason.PREEMPT:
                # inside one queue: priorities and effective weights decide
                if not same:
                    problems.append(f"{evict.job}: preempt across queues")
                if victim.spec.priority >= p.priority:
                    problems.append(f"{evict.job}: evicted by {p.id} of no higher priority")
                if weight >= p.priority:
                    problems.append(f"{evict.job}: W_eff defends it against {p.id}")
            if evict.reason is EvictReason.RECLAIM:
                # across queues: shares decide, whatever the priority; a weight escalated
                # to the ceiling still defends against non-critical preemptors
                if same:
                    problems.append(f"{evict.job}: reclaim inside one queue")
                if not snapshot.queues[victim.spec.queue].reclaimable:
                    problems.append(f"{evict.job}: reclaimed from a non-reclaimable queue")
                if p.priority < 1000 and victim.spec.priority < config.ceiling <= weight:
                    problems.append(f"{evict.job}: escalated to the ceiling, reclaimed by {p.id}")
                reclaimers.add(p.id)
    for job_id, times in evicted.items():
        if times > 1:
            problems.append(f"{job_id}: evicted {times} times in one cycle")

    # Reclaim's floor (DESIGN §4.1 step 1, as Volcano's proportion plugin): a victim queue is
    # above its deserved share before each reclaim — so before its last one at least, taken
    # as the largest — and a reclaim never takes it below its guarantee. What it keeps: its
    # running tasks (not those started this cycle) less what was signalled to leave it up to
    # that last reclaim. Evictions decided after it (a preemption inside the queue, whose
    # preemptor takes the room back) do not count: the floor holds when a reclaim is decided.
    for name, largest in largest_reclaimed.items():
        kept = sum(j.spec.gpu * len(j.placement) for j in snapshot.all_jobs if j.spec.queue == name)
        kept -= gone_at_reclaim[name]
        if kept + largest <= deserved_gpu(snapshot, name):
            problems.append(f"queue {name}: reclaimed while at or below its deserved share")
        if kept < guarantee_gpu(snapshot, name):
            problems.append(f"queue {name}: reclaimed below its guarantee")

    # A non-critical reclaimer's queue stays within its deserved share once it starts: what
    # the queue runs and starts, plus every gang it is promised, less what leaves it — the
    # victims signalled this cycle and those its promised plans have yet to signal (the
    # budget can spread a plan over cycles; the preemptor starts once they are gone). (Extra
    # elastic tasks grown afterwards, in backfill, borrow idle room: not counted.)
    gangs = {
        s.job: min(len(s.placement), jobs[s.job].spec.min_available)
        for s in decisions.starts
        if not s.grow and s.job in jobs
    }
    promised: dict[str, tuple[JobView, Nomination]] = {
        j.id: (j, j.nomination)
        for j in snapshot.all_jobs
        if j.nomination is not None and j.state is JobState.PENDING
    }
    for nominate in decisions.nominations:
        if nominate.nomination is None:
            promised.pop(nominate.job, None)
        elif nominate.job in jobs:
            promised[nominate.job] = (jobs[nominate.job], nominate.nomination)
    to_leave: dict[str, int] = {}
    for _, nomination in promised.values():
        for pending in nomination.pending:
            victim = jobs.get(pending.job)
            if victim is None or pending.job in evicted:
                continue
            tasks = len(pending.tasks) if pending.tasks else len(victim.placement)
            to_leave[victim.spec.queue] = to_leave.get(victim.spec.queue, 0) + (
                victim.spec.gpu * tasks
            )
    for name in {jobs[p].spec.queue for p in reclaimers if jobs[p].spec.priority < 1000}:
        holds = sum(
            j.spec.gpu * (len(j.placement) + gangs.get(j.id, 0))
            for j in snapshot.all_jobs
            if j.spec.queue == name
        )
        holds += sum(j.spec.gang_request.gpu for j, _ in promised.values() if j.spec.queue == name)
        holds -= gone_from.get(name, 0) + to_leave.get(name, 0)
        if holds > deserved_gpu(snapshot, name):
            problems.append(f"queue {name}: reclaimed for, but over its deserved share")

    # Every victim helps place its preemptor (DESIGN §4.1 step 4): it frees devices, CPU or
    # memory the preemptor's nominated placement uses, or it is a job of the preemptor's own
    # queue (whose quota a capped preemptor, or a combined plan, needs).
    def frees(tasks: Iterable[TaskPlacement]) -> set[tuple[int, int | str]]:
        spots: set[tuple[int, int | str]] = set()
        for t in tasks:
            spots.update((t.node, d) for d in t.devices)
            if t.cpu:
                spots.add((t.node, "cpu"))
            if t.memory:
                spots.add((t.node, "memory"))
        return spots

    freed: dict[str, set[tuple[int, int | str]]] = {}
    for evict in decisions.evictions:
        victim = jobs.get(evict.job)
        if victim is None or evict.reason not in (EvictReason.PREEMPT, EvictReason.RECLAIM):
            continue
        tasks = [victim.placement[i] for i in evict.tasks] if evict.tasks else victim.placement
        freed[evict.job] = frees(tasks)
    for nominate in decisions.nominations:
        nomination = nominate.nomination
        holder = jobs.get(nominate.job)
        if nomination is None or holder is None:
            continue
        uses = frees(nomination.placement)
        for pending in nomination.pending:
            tasks = pending.tasks or jobs[pending.job].placement
            freed.setdefault(pending.job, set()).update(frees(tasks))
        for name in nomination.victims:
            victim = jobs.get(name)
            if victim is None or name not in freed or freed[name] & uses:
                continue
            if victim.spec.queue != holder.spec.queue:
                problems.append(f"{name}: evicted for {holder.id} but frees none of its room")

    # Budget: 30 % of the GPUs (at least one node's worth), or one indivisible unit alone.
    # MIG slices count by their GPU-equivalent (caldera.model.mig).
    capacity = sum(n.gpus for n in nodes)
    slices = sum(n.capacity_milli for n in nodes) - capacity * GPU_MILLI
    budget = max(config.eviction_budget * capacity, max((n.gpus for n in nodes), default=0))
    budget_milli = budget * GPU_MILLI + config.eviction_budget * slices
    units = [e for e in decisions.evictions if e.reason in ("preempt", "reclaim")]
    if budget_gpu > budget_milli + 1e-9 and len(units) > 1:
        problems.append(
            f"evicted {budget_gpu / 1000} GPUs in one cycle, budget {budget_milli / 1000:g}"
        )
    return problems
