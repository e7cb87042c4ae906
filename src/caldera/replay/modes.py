"""What each replay mode runs on the dev cluster, and which simulator policy it is compared
with:

- `volcano`: the real vc-scheduler as seed 001 and vc-controller-manager; the jobs are Volcano
  Jobs (Volcano re-creates an evicted pod, as its job controller does with no policy set);
- `caldera-volcano`: caldera's controller (`caldera k8s run`, its own process) in front of the
  real vc-scheduler, configured as docs/kubernetes.md says (`VOLCANO_FOR_CALDERA`);
- `caldera`: caldera's controller with kube-scheduler (no Volcano needed: what CI runs).

Its own module because every part of a replay (setting up, submitting, the command that
compares runtimes) asks it, and a new mode is a change here alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MODES", "Mode"]


@dataclass(frozen=True, slots=True)
class Mode:
    key: str
    label: str
    policy: str  # the simulator policy this runtime is compared with
    scheduler: str  # the pods' schedulerName
    controller: bool  # caldera's controller decides (else users submit Volcano Jobs)
    needs_volcano: bool


MODES: dict[str, Mode] = {
    # the real vc-scheduler runs seed 001's configuration: its simulator model is the one-tier
    # variant of the baseline (docs/baselines.md, `volcano-seed001`)
    "volcano": Mode("volcano", "k8s: Volcano", "volcano-seed001", "volcano", False, True),
    "caldera-volcano": Mode(
        "caldera-volcano", "k8s: caldera + Volcano", "caldera", "volcano", True, True
    ),
    "caldera": Mode(
        "caldera", "k8s: caldera + kube-scheduler", "caldera", "default-scheduler", True, False
    ),
}
