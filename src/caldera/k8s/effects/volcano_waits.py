"""Queues whose jobs wait because Volcano takes no PodGroups for them now.

Volcano refuses a start's PodGroup when its Queue is missing or not Open (just created and
not yet opened by vc-controller-manager, or closed by an operator). The runtime then treats
that queue as Closed for new starts (running jobs carry on; admission still sees it Open, so
no job is rejected) and reads the Volcano Queue again every `RECHECK` seconds until it says
Open.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from caldera.k8s.cluster.api import ClusterAPI, ClusterError

__all__ = ["RECHECK", "VolcanoWaits"]

log = logging.getLogger("caldera.k8s")

RECHECK = 5.0  # seconds between reads of a Volcano Queue that refused a PodGroup


class VolcanoWaits:
    """Queue → when to read its Volcano Queue again."""

    def __init__(self) -> None:
        self.until: dict[str, float] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(self.until)

    def __contains__(self, queue: object) -> bool:
        return queue in self.until

    def times(self) -> list[float]:
        """When a queue is to be read again (for the loop's next wake-up)."""
        return list(self.until.values())

    def refused(self, queue: str, now: float) -> None:
        """Volcano refused a PodGroup of `queue`: its pending jobs wait."""
        if queue not in self.until:
            log.warning("queue %s: Volcano takes no PodGroups for it now; its jobs wait", queue)
        self.until[queue] = now + RECHECK

    def recheck(self, api: ClusterAPI, now: float) -> bool:
        """Read the Volcano Queues whose time came; True when one is Open again (its jobs are
        planned again)."""
        opened = False
        for queue, when in list(self.until.items()):
            if now < when:
                continue
            try:
                found = api.read_queue(queue)
            except ClusterError as error:
                log.warning("cannot read Volcano queue %s: %s", queue, error)
                found = None
            if found is not None and (found.get("status") or {}).get("state") == "Open":
                log.info("queue %s: Volcano's Queue is Open; its jobs are planned again", queue)
                del self.until[queue]
                opened = True
            else:
                self.until[queue] = now + RECHECK
        return opened
