"""High availability on the real control plane (issue 10, deliverable 3): two replicas of
`caldera k8s run`, leader election on a coordination.k8s.io Lease. The standby acts on
nothing while the leader lives, and takes over within seconds when the leader is killed
(SIGKILL: it cannot give the Lease up). The session's controller leads; these tests start a
second replica beside it."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from caldera_support import Cluster, training_job
from real_support import wait_for

LEASE_DURATION = 6  # caldera_support.CONFIG: kubernetes.leader_election
ACTING = re.compile(r"caldera\.k8s: (start|evict|admitted) ")  # what only a leader logs


def _log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _session_controller_leads(clean: Cluster) -> dict[str, object]:
    """Wait until the session's controller holds the Lease (a controller started after
    another died waits the dead one's Lease out first); the Lease's spec."""
    proc = clean.proc
    assert proc is not None and proc.poll() is None
    mine = f"_{proc.pid}_"  # identities are host_pid_random

    def leads() -> dict[str, object] | None:
        lease = clean.lease()
        return lease if mine in str(lease.get("holderIdentity", "")) else None

    return dict(wait_for("the session's controller leads", leads))


def test_a_standby_acts_on_nothing_then_takes_over_within_seconds_when_the_leader_dies(
    clean: Cluster,
) -> None:
    leader = _session_controller_leads(clean)
    standby_log = clean.folder / "standby.log"
    standby = clean.spawn_controller(standby_log)
    try:
        wait_for("the standby waits for the lease", lambda: "standby:" in _log(standby_log))
        assert clean.apply("bob", "team-a", training_job("first")).returncode == 0
        clean.wait("team-a", "first", "Running")
        assert not ACTING.search(_log(standby_log)), _log(standby_log)  # the leader did it
        assert clean.lease()["holderIdentity"] == leader["holderIdentity"]

        assert clean.proc is not None
        clean.proc.send_signal(signal.SIGKILL)  # no clean shutdown: the Lease stays held
        clean.proc.wait(timeout=20)
        killed = time.monotonic()
        assert clean.apply("bob", "team-a", training_job("second")).returncode == 0
        clean.wait("team-a", "second", "Running", timeout=60)
        took_over = time.monotonic() - killed
        # Within the lease duration and a few renewal rounds and cycles, not minutes.
        assert took_over < LEASE_DURATION + 15, took_over
        lease = clean.lease()
        assert lease["holderIdentity"] != leader["holderIdentity"]
        assert lease["leaseTransitions"] == int(str(leader["leaseTransitions"])) + 1
        assert "leading:" in _log(standby_log)
        assert clean.state("team-a", "first") == "Running"  # the new leader took it back
        assert clean.status("team-a", "first")["attempts"] == 1
    finally:
        clean.proc = standby  # the survivor is the session's controller from now on


def test_a_cleanly_stopped_leader_hands_over_at_once(clean: Cluster) -> None:
    """SIGTERM: the leader gives the Lease up, so the standby need not wait it out."""
    _session_controller_leads(clean)
    standby_log = clean.folder / "standby-2.log"
    standby = clean.spawn_controller(standby_log)
    try:
        wait_for("the standby waits for the lease", lambda: "standby:" in _log(standby_log))
        clean.stop_controller()  # SIGTERM, waits for the exit
        stopped = time.monotonic()
        wait_for("the standby leads", lambda: "leading:" in _log(standby_log))
        assert time.monotonic() - stopped < LEASE_DURATION, "waited the lease out"
    finally:
        clean.proc = standby
