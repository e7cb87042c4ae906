"""A scenario in compressed time: every duration divided by one factor, so that hours of a
scenario replay in minutes on a real control plane.

`compress(scenario, factor)` divides by `factor`: submit and cancel times, job durations,
expected durations, checkpoint intervals and costs, the run's end and warm-up, and the policy's
timers (grace period, throttle timeout, cooldown, nomination timeout, preempt back-off, lossy
patience, start SLOs). What Kubernetes cannot express is made expressible, the same way for
every runtime (the simulator's prediction runs on the compressed scenario too, so a difference
between them is never the compression's):

- a grace period is whole seconds on Kubernetes (`terminationGracePeriodSeconds`,
  `gracePeriodSeconds`): it is rounded *up* to a whole second of compressed time, at least 1;
- a fraction of a GPU asks for one whole GPU (the KWOK nodes advertise whole GPUs; no GPU-share
  device plugin runs);
- MIG slices and queue time windows are refused (one line): neither has a KWOK counterpart here.

What compression cannot keep (docs/evaluation.md, "Against the real Volcano"): caldera's
effective weight grows with ln(1 + hours run), which is not linear in time, so a compressed job
defends itself as a job that has run `factor` times less long; and the control plane's own
latencies (API round trips, scheduler periods) are not compressed, so they weigh `factor` times
more in scenario time.
"""

from __future__ import annotations

import math
from dataclasses import replace

from caldera.config import Scenario, Submission
from caldera.core import PolicyConfig
from caldera.errors import ScenarioError
from caldera.model import GPU_MILLI, Checkpointing, JobSpec

__all__ = ["compress", "expand_seconds"]


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value / factor


def compressed_grace(grace: float, factor: float) -> float:
    """A grace period in compressed seconds, whole and at least 1 (Kubernetes' unit)."""
    return float(max(math.ceil(grace / factor - 1e-9), 1))


def _policy(config: PolicyConfig, factor: float) -> PolicyConfig:
    slo = {kind: _scaled(limit, factor) for kind, limit in config.slo.items()}
    return replace(
        config,
        grace_period=compressed_grace(config.grace_period, factor),
        throttle_timeout=config.throttle_timeout / factor,
        cooldown=config.cooldown / factor,
        nomination_timeout=config.nomination_timeout / factor,
        preempt_backoff=config.preempt_backoff / factor,
        lossy_patience=config.lossy_patience / factor,
        slo=slo,
    )


def _spec(spec: JobSpec, factor: float) -> JobSpec:
    if spec.gpu_profile is not None:
        raise ScenarioError(
            f"job {spec.name!r}: MIG slices cannot be replayed on Kubernetes here "
            "(no device plugin advertises them on the KWOK nodes)"
        )
    checkpoint = spec.checkpoint
    gpu = GPU_MILLI if 0 < spec.gpu < GPU_MILLI else spec.gpu
    return replace(
        spec,
        submit=spec.submit / factor,
        duration=_scaled(spec.duration, factor),
        expected_duration=_scaled(spec.expected_duration, factor),
        checkpoint=Checkpointing(
            _scaled(checkpoint.interval, factor), checkpoint.cost / factor, checkpoint.on_sigterm
        ),
        gpu=gpu,
        time_shared=0,
    )


def compress(scenario: Scenario, factor: float) -> Scenario:
    """The scenario with time divided by `factor` (>= 1); ScenarioError when it holds what
    cannot be replayed on the dev cluster's KWOK nodes."""
    if not factor >= 1:
        raise ScenarioError(f"the compression factor must be at least 1, not {factor:g}")
    for queue in scenario.queues:
        if queue.time_windows:
            raise ScenarioError(
                f"queue {queue.name!r}: time windows cannot be compressed (they are tied to "
                "the days of the week)"
            )
        if queue.time_sharing:
            raise ScenarioError(
                f"queue {queue.name!r}: time-sharing cannot be replayed on Kubernetes here"
            )
    submissions = tuple(
        Submission(_spec(s.spec, factor), s.invalid, _scaled(s.cancel_at, factor))
        for s in scenario.submissions
    )
    return replace(
        scenario,
        submissions=submissions,
        config=_policy(scenario.config, factor),
        until=_scaled(scenario.until, factor),
        warmup=scenario.warmup / factor,
        name=f"{scenario.name} (time / {factor:g})",
    )


def expand_seconds(value: float | None, factor: float) -> float | None:
    """A compressed duration back in scenario seconds."""
    return None if value is None else value * factor
