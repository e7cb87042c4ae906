"""Leader election on a coordination.k8s.io Lease (caldera.k8s.ha.leader), on the in-memory
cluster with a clock per replica: one leader at a time, a standby takes over only after the
leader stopped renewing for a whole lease duration, and a leader that cannot renew steps down
before anyone may take over."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from caldera.k8s import FakeCluster
from caldera.k8s.ha.leader import LeaderElector

NAMESPACE = "caldera-system"


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def replica(cluster: FakeCluster, name: str, clock: Clock) -> LeaderElector:
    return LeaderElector(
        cluster,
        NAMESPACE,
        identity=name,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        clock=clock,
        wall=clock,
    )


def holder(cluster: FakeCluster) -> str:
    return str(cluster.leases[(NAMESPACE, "caldera-controller")]["spec"]["holderIdentity"])


def test_the_first_replica_holds_the_lease_and_the_second_waits() -> None:
    cluster, clock = FakeCluster(), Clock()
    a, b = replica(cluster, "a", clock), replica(cluster, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    for _ in range(20):  # a renews every 2 s: b never gets it
        clock.now += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert holder(cluster) == "a"
    assert cluster.leases[(NAMESPACE, "caldera-controller")]["spec"]["leaseTransitions"] == 0


def test_a_standby_takes_over_only_after_a_whole_lease_duration_without_renewal() -> None:
    cluster, clock = FakeCluster(), Clock()
    a, b = replica(cluster, "a", clock), replica(cluster, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b sees the record at t=0
    # a dies now. b's own clock decides, from when it last saw the record change.
    clock.now = 14
    assert not b.try_acquire_or_renew()
    clock.now = 15
    assert b.try_acquire_or_renew()
    lease = cluster.leases[(NAMESPACE, "caldera-controller")]["spec"]
    assert (lease["holderIdentity"], lease["leaseTransitions"]) == ("b", 1)
    # a comes back: it must not act, and may not take the lease back while b renews.
    assert not a.try_acquire_or_renew()


@pytest.mark.parametrize(
    ("since_renewal", "leading"),
    [(0, True), (9.9, True), (10, False), (15, False)],
)
def test_a_leader_trusts_its_lease_only_within_the_renew_deadline(
    since_renewal: float, leading: bool
) -> None:
    cluster, clock = FakeCluster(), Clock()
    a = replica(cluster, "a", clock)
    assert a.try_acquire_or_renew()
    a.leading.set()
    clock.now += since_renewal
    assert a.still_leading() is leading


def test_the_old_leader_has_stepped_down_before_the_standby_may_take_over() -> None:
    """renew_deadline < lease_duration: at every instant at most one replica may act."""
    cluster, clock = FakeCluster(), Clock()
    a, b = replica(cluster, "a", clock), replica(cluster, "b", clock)
    assert a.try_acquire_or_renew()
    a.leading.set()
    took_over_at = None
    for _ in range(60):  # a is cut off from here on: it never renews again
        b_leads = b.try_acquire_or_renew()
        assert not (a.still_leading() and b_leads)
        if b_leads and took_over_at is None:
            took_over_at = clock.now
        clock.now += 0.5
    assert took_over_at == 15 and holder(cluster) == "b"


def test_a_conflicting_renewal_is_not_a_win() -> None:
    cluster, clock = FakeCluster(), Clock()
    a = replica(cluster, "a", clock)
    assert a.try_acquire_or_renew()
    key = (NAMESPACE, "caldera-controller")
    stale = cluster.read_lease(*key)
    assert stale is not None
    clock.now = 2
    assert a.try_acquire_or_renew()
    stale["spec"]["holderIdentity"] = "b"
    with pytest.raises(Exception, match="modified"):
        cluster.replace_lease(*key, stale)  # what b's late write would meet
    assert holder(cluster) == "a"


def fast(cluster: FakeCluster, name: str) -> LeaderElector:
    """Real time, short durations: for the loop itself."""
    return LeaderElector(
        cluster, NAMESPACE, identity=name, lease_duration=3, renew_deadline=0.5, retry_period=0.05
    )


def test_the_loop_leads_until_stopped_then_releases_so_a_standby_need_not_wait() -> None:
    cluster = FakeCluster()
    a, b = fast(cluster, "a"), fast(cluster, "b")
    stop = threading.Event()
    started: list[str] = []
    loop = threading.Thread(target=a.run, args=(stop, lambda: started.append("a")))
    loop.start()
    assert a.leading.wait(10)
    assert not b.try_acquire_or_renew()
    stop.set()
    loop.join(10)
    assert not a.leading.is_set() and started == ["a"]
    assert b.try_acquire_or_renew()  # released: free at once, no lease duration to wait out
    assert holder(cluster) == "b"


def test_the_loop_steps_down_when_it_cannot_renew() -> None:
    cluster = FakeCluster()
    a = fast(cluster, "a")
    stop, lost = threading.Event(), threading.Event()
    loop = threading.Thread(target=a.run, args=(stop,), kwargs={"on_lost": lost.set})
    loop.start()
    assert a.leading.wait(10)
    cluster.reachable = False  # the API server is gone for this replica
    assert lost.wait(10)
    loop.join(10)
    assert not loop.is_alive() and not a.leading.is_set() and not a.still_leading()
    stop.set()


def test_the_durations_must_nest() -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        LeaderElector(FakeCluster(), NAMESPACE, lease_duration=10, renew_deadline=10)
