"""The pure decision core: snapshot in, decisions out (DESIGN §1, §3, §4)."""

from caldera.core.admission import Admission, admit, could_ever_fit
from caldera.core.config import DEFAULT_SLO, UNIX_WEEK_OFFSET, PolicyConfig
from caldera.core.cycle import CALDERA, run
from caldera.core.decisions import (
    Decisions,
    Evict,
    EvictReason,
    Hold,
    Nominate,
    Release,
    Start,
    ThrottleOff,
    ThrottleOn,
    Waiting,
    WaitReason,
)
from caldera.core.jobindex import JobIndex
from caldera.core.policy import Policy
from caldera.core.room import CapacityError, Room, TaskPlacement
from caldera.core.shortcuts.memo import SearchMemo
from caldera.core.snapshot import JobView, Nomination, PendingVictim, Snapshot, Throttle
from caldera.core.waiting import WaitingReasons
from caldera.core.weight import effective_weight

__all__ = [
    "CALDERA",
    "DEFAULT_SLO",
    "UNIX_WEEK_OFFSET",
    "Admission",
    "CapacityError",
    "Decisions",
    "Evict",
    "EvictReason",
    "Hold",
    "JobIndex",
    "JobView",
    "Nominate",
    "Nomination",
    "PendingVictim",
    "Policy",
    "PolicyConfig",
    "Release",
    "Room",
    "SearchMemo",
    "Snapshot",
    "Start",
    "TaskPlacement",
    "Throttle",
    "ThrottleOff",
    "ThrottleOn",
    "WaitReason",
    "Waiting",
    "WaitingReasons",
    "admit",
    "could_ever_fit",
    "effective_weight",
    "run",
]
