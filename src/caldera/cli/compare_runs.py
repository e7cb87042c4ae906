"""The policies of one `caldera compare`, run in parallel processes (`--jobs N`).

Each policy's simulation is independent of the others (the same scenario, its own
simulator), so the comparison runs one process per policy, at most `jobs` at a time, and
takes as long as its slowest policy rather than the sum of them. The rows come back in the
order asked, so the table and the JSON document are those of the serial run (only the wall
time each run took differs, as it does between two serial runs).

Processes are spawned, not forked: the parent draws the progress bars from a thread, and a
fork taken while that thread holds a lock could hang the child. Each worker sends its
simulated time (at most a few times a second), then its `PolicyRun` or a one-line failure,
on one queue; the parent moves that policy's bar. A worker that dies without a word (killed,
out of memory) is reported by its exit code. A failed policy loses only its own column:
the others finish and are reported, then the command says which failed and exits 1.
`jobs == 1` runs in this process, one policy after the other, with the same error handling.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.reduction import ForkingPickler
from types import MappingProxyType
from typing import Any

from caldera.cli.progress import Tick, horizon, sim_bars
from caldera.report import PolicyRun, run_policies
from caldera.sim import Scenario

__all__ = ["PolicyFailure", "default_jobs", "run_in_parallel"]

_TICK_EVERY = 0.25
"""Seconds of wall time between two progress messages from one worker."""

_POLL = 0.5
"""Seconds the parent waits for a message before it looks for workers that died."""


@dataclass(frozen=True)
class PolicyFailure:
    """A policy whose run did not finish: its name and why, on one line."""

    policy: str
    reason: str

    def __str__(self) -> str:
        return f"{self.policy} failed: {self.reason}"


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def _mapping_proxy(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


def _reduce_mapping_proxy(
    proxy: MappingProxyType[Any, Any],
) -> tuple[Callable[[dict[Any, Any]], MappingProxyType[Any, Any]], tuple[dict[Any, Any]]]:
    return _mapping_proxy, (dict(proxy),)


# A scenario keeps read-only mappings (MappingProxyType), which pickle cannot send as they
# are; only multiprocessing's own pickler learns to send them, as copies.
ForkingPickler.register(MappingProxyType, _reduce_mapping_proxy)


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _one_run(scenario: Scenario, policy: str, tick: Tick | None) -> PolicyRun:
    """`policy`'s run of `scenario`, exactly as the serial comparison makes it."""

    @contextmanager
    def progress(variant: Scenario, label: str) -> Iterator[Tick | None]:
        yield tick

    (run,) = run_policies(scenario, [policy], progress)
    return run


def _worker(scenario: Scenario, policy: str, messages: Queue[Any], ticks: bool) -> None:
    """In a child process: run one policy, send ("tick", t)…, then ("done", run) or
    ("failed", reason). Never raises: the parent hears of every failure."""
    last = 0.0

    def tick(t: float) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= _TICK_EVERY:
            last = now
            messages.put(("tick", policy, t))

    try:
        run = _one_run(scenario, policy, tick if ticks else None)
    except BaseException as error:  # reported to the parent, on one line
        messages.put(("failed", policy, _reason(error)))
        return
    messages.put(("done", policy, run))


def _serial(
    scenario: Scenario, policies: Sequence[str], quiet: bool
) -> tuple[list[PolicyRun], list[PolicyFailure]]:
    runs: list[PolicyRun] = []
    failures: list[PolicyFailure] = []
    for policy in policies:
        with sim_bars(scenario, quiet) as add:
            try:
                runs.append(_one_run(scenario, policy, None if add is None else add(policy)))
            except Exception as error:  # one policy's failure, on one line
                failures.append(PolicyFailure(policy, _reason(error)))
    return runs, failures


def run_in_parallel(
    scenario: Scenario, policies: Sequence[str], jobs: int, quiet: bool
) -> tuple[list[PolicyRun], list[PolicyFailure]]:
    """Every policy's run of `scenario`, at most `jobs` processes at a time: the runs that
    finished, in the order of `policies`, and the policies that failed."""
    if jobs <= 1 or len(policies) <= 1:
        return _serial(scenario, policies, quiet)
    context = multiprocessing.get_context("spawn")
    messages: Queue[Any] = context.Queue()
    waiting = list(policies)
    running: dict[str, BaseProcess] = {}
    silent: set[str] = set()  # dead workers not heard from after one more wait
    done: dict[str, PolicyRun] = {}
    failed: dict[str, str] = {}
    with sim_bars(scenario, quiet) as add:
        bars = {policy: add(policy) for policy in policies} if add is not None else {}
        try:
            while waiting or running:
                while waiting and len(running) < jobs:
                    policy = waiting.pop(0)
                    process = context.Process(
                        target=_worker,
                        args=(scenario, policy, messages, bool(bars)),
                        name=f"caldera-compare-{policy}",
                        daemon=True,
                    )
                    process.start()
                    running[policy] = process
                try:
                    kind, policy, payload = messages.get(timeout=_POLL)
                except queue.Empty:
                    for policy, worker in list(running.items()):
                        if worker.is_alive():
                            continue
                        if policy in silent:  # its last words would have arrived by now
                            failed[policy] = f"its process exited with code {worker.exitcode}"
                            del running[policy]
                        else:
                            silent.add(policy)
                    continue
                if kind == "tick":
                    if policy in bars:
                        bars[policy](payload)
                    continue
                if kind == "done":
                    done[policy] = payload
                    if policy in bars:
                        bars[policy](horizon(scenario))
                else:
                    failed[policy] = payload
                running.pop(policy).join()
        finally:
            for worker in running.values():  # interrupted: leave no worker behind
                worker.terminate()
                worker.join()
    runs = [done[policy] for policy in policies if policy in done]
    failures = [PolicyFailure(policy, failed[policy]) for policy in policies if policy in failed]
    return runs, failures
