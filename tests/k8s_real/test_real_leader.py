"""High availability on the real control plane (issue 10, deliverable 3): two replicas of
`caldera k8s run`, leader election on a coordination.k8s.io Lease. The standby acts on
nothing while the leader lives, and takes over within seconds when the leader is killed
(SIGKILL: it cannot give the Lease up). The session's controller leads; these tests start a
second replica beside it."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from caldera_support import Cluster, free_port, training_job
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


def _leader_gauge(port: int) -> float | None:
    """caldera_leader as the replica serving /metrics on `port` says it; None if it does
    not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            body = reply.read().decode()
    except OSError:
        return None
    found = re.search(r"^caldera_leader (\S+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else None


def _adopt(clean: Cluster, standby: subprocess.Popen[bytes], log: Path, port: int) -> None:
    """The surviving replica is the session's controller from now on: its process, its log
    (what a failed wait shows) and its /metrics."""
    clean.proc, clean.log, clean.metrics_port = standby, log, port


def test_a_standby_acts_on_nothing_then_takes_over_within_seconds_when_the_leader_dies(
    clean: Cluster,
) -> None:
    leader = _session_controller_leads(clean)
    standby_log, standby_port = clean.folder / "standby.log", free_port()
    standby = clean.spawn_controller(standby_log, standby_port)
    try:
        wait_for("the standby waits for the lease", lambda: "standby:" in _log(standby_log))
        # Both replicas answer /metrics (the chart probes each): only the leader says 1.
        assert _leader_gauge(clean.metrics_port) == 1.0
        assert _leader_gauge(standby_port) == 0.0
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
        assert _leader_gauge(standby_port) == 1.0
    finally:
        _adopt(clean, standby, standby_log, standby_port)


def test_a_cleanly_stopped_leader_hands_over_at_once(clean: Cluster) -> None:
    """SIGTERM: the leader gives the Lease up, so the standby need not wait it out."""
    _session_controller_leads(clean)
    standby_log, standby_port = clean.folder / "standby-2.log", free_port()
    standby = clean.spawn_controller(standby_log, standby_port)
    try:
        wait_for("the standby waits for the lease", lambda: "standby:" in _log(standby_log))
        clean.stop_controller()  # SIGTERM, waits for the exit
        stopped = time.monotonic()
        wait_for("the standby leads", lambda: "leading:" in _log(standby_log))
        assert time.monotonic() - stopped < LEASE_DURATION, "waited the lease out"
        # It goes on leading (it once died here, binding /metrics only once it led).
        wait_for("the new leader's gauge", lambda: _leader_gauge(standby_port) == 1.0)
        assert clean.apply("bob", "team-a", training_job("after")).returncode == 0
        clean.wait("team-a", "after", "Running")
        assert standby.poll() is None, _log(standby_log)
    finally:
        _adopt(clean, standby, standby_log, standby_port)


def test_a_replica_that_cannot_bind_its_metrics_address_says_so_in_one_line(
    clean: Cluster,
) -> None:
    """Bound before the campaign: a second replica on the same address fails at once, in
    one line, instead of a traceback the moment it would have led."""
    log = clean.folder / "taken.log"
    replica = clean.spawn_controller(log, clean.metrics_port)
    try:
        assert replica.wait(timeout=60) == 1
    finally:
        if replica.poll() is None:
            replica.kill()
            replica.wait()
    said = _log(log)
    assert (
        f"caldera: error: --metrics-bind 127.0.0.1:{clean.metrics_port}: Address already in use"
        in said
    ), said
    assert "Traceback" not in said, said
    assert clean.proc is not None and clean.proc.poll() is None  # the leader carries on
