"""High availability as Kubernetes controllers do it: leader election on a
`coordination.k8s.io/v1` Lease (issue 10, deliverable 3).

Every replica runs `LeaderElector.run`; one holds the Lease and acts, the others wait warm
(their informers list and watch, so a takeover needs no cold start). The rules are
client-go's `leaderelection`:

- the holder renews `renewTime` every `retry_period`; a renewal is a replace with the
  object's resourceVersion, so two writers cannot both succeed;
- a replica takes the Lease over only when the holder's record has not changed for
  `lease_duration` seconds *as measured on its own clock* from when it last saw the record
  change (no trust in other machines' clocks);
- a holder that has not renewed for `renew_deadline` (< `lease_duration`) seconds stops
  acting at once (`leading` clears, `on_lost` runs): it may have lost the Lease without
  knowing. Since `renew_deadline < lease_duration`, the old leader has stopped before anyone
  may take over: never two leaders acting at once.

`caldera k8s run` exits when it stops leading (a Deployment restarts it as a standby): its
memory may be older than what the new leader writes.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from caldera.errors import NotFound
from caldera.k8s.cluster.api import ClusterConflict, ClusterError, Object

__all__ = ["LEASE_NAME", "LeaderElector", "LeaseAPI", "default_identity"]

log = logging.getLogger("caldera.k8s")

LEASE_NAME = "caldera-controller"  # the leader-election Lease, in the state namespace


class LeaseAPI(Protocol):
    def read_lease(self, namespace: str, name: str) -> Object | None: ...

    def create_lease(self, namespace: str, body: Object) -> Object: ...

    def replace_lease(self, namespace: str, name: str, body: Object) -> Object:
        """ClusterConflict when the resourceVersion in `body` is no longer current."""
        ...


def default_identity() -> str:
    """host_pid_random: unique per process, readable in `kubectl get lease -o yaml`."""
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


def _micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElector:
    api: LeaseAPI
    namespace: str
    name: str = LEASE_NAME
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    clock: Callable[[], float] = time.monotonic  # only ever compared with itself
    wall: Callable[[], float] = time.time  # for the Lease's timestamps (informative)
    leading: threading.Event = field(default_factory=threading.Event)
    transitions: int = 0  # times this replica became the leader
    _observed: tuple[Any, ...] | None = None  # the holder record last seen
    _observed_at: float = 0.0  # when it last changed, on our clock
    _renewed_at: float = 0.0  # our last successful renewal, on our clock

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")

    # -- one attempt -----------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One round: True if this replica holds the Lease now."""
        now = self.clock()
        try:
            lease = self.api.read_lease(self.namespace, self.name)
        except NotFound:
            lease = None
        if lease is None:
            return self._create(now)
        spec = lease.get("spec") or {}
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("leaseTransitions"),
            (lease.get("metadata") or {}).get("resourceVersion"),
        )
        if record != self._observed:
            self._observed, self._observed_at = record, now
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now - self._observed_at < duration:
            return False  # someone else holds it and renews
        taking_over = holder != self.identity
        spec = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "renewTime": _micro_time(self.wall()),
        }
        if taking_over:
            spec["acquireTime"] = spec["renewTime"]
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            self.api.replace_lease(self.namespace, self.name, {**lease, "spec": spec})
        except ClusterConflict:
            return False  # someone wrote first: look again next round
        self._renewed_at = now
        if taking_over:
            log.info("leader election: %s took the lease %s over", self.identity, self.name)
        return True

    def _create(self, now: float) -> bool:
        stamp = _micro_time(self.wall())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            self.api.create_lease(self.namespace, body)
        except ClusterConflict:
            return False
        self._renewed_at = now
        log.info("leader election: %s holds the new lease %s", self.identity, self.name)
        return True

    # -- the loop --------------------------------------------------------------------------

    def still_leading(self) -> bool:
        """Leading, and renewed recently enough to be sure of it (checked before acting)."""
        return self.leading.is_set() and self.clock() - self._renewed_at < self.renew_deadline

    def run(
        self,
        stop: threading.Event,
        on_started: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        """Acquire, then renew every `retry_period` until `stop`, or until the Lease cannot
        be renewed within `renew_deadline` (then `on_lost`, and return)."""
        while not stop.is_set():
            try:
                held = self.try_acquire_or_renew()
            except ClusterError as error:
                log.warning("leader election: %s", error)
                held = False
            if held and not self.leading.is_set():
                self.leading.set()
                self.transitions += 1
                on_started()
            elif self.leading.is_set() and not self.still_leading():
                self.leading.clear()
                log.error(
                    "leader election: %s could not renew within %.0f s: stepping down",
                    self.identity,
                    self.renew_deadline,
                )
                on_lost()
                return
            stop.wait(self.retry_period)
        if self.leading.is_set():
            self.release()

    def release(self) -> None:
        """Give the Lease up on a clean stop, so a standby need not wait it out."""
        self.leading.clear()
        try:
            lease = self.api.read_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
            self.api.replace_lease(self.namespace, self.name, {**lease, "spec": spec})
        except (ClusterError, NotFound) as error:
            log.warning("leader election: could not release the lease: %s", error)
