"""A refused room change leaves the room exactly as it was (callers may catch and go on)."""

from __future__ import annotations

import pytest

from caldera.core import CapacityError, Room, TaskPlacement
from caldera.model import NodeGroup, expand_node_groups


def _room() -> Room:
    return Room(expand_node_groups([NodeGroup("n", 1, 4, cpu=8000, memory=1024)]))


@pytest.mark.parametrize(
    "task",
    [
        TaskPlacement(0, (0, 1), 1000, 9000, 0),  # CPU beyond the node, devices fine
        TaskPlacement(0, (1, 2), 1000, 0, 0),  # device 2 already taken below
        TaskPlacement(0, (3, 3), 600, 0, 0),  # the same device twice
    ],
    ids=["cpu", "second-device", "duplicate-device"],
)
def test_refused_take_changes_nothing(task: TaskPlacement) -> None:
    room = _room()
    room.take(TaskPlacement(0, (2,), 1000, 0, 0))
    before = room.fingerprint()
    with pytest.raises(CapacityError):
        room.take(task)
    assert room.fingerprint() == before


def test_take_all_takes_every_task_or_none() -> None:
    room = _room()
    room.take(TaskPlacement(0, (3,), 1000, 0, 0))
    before = room.fingerprint()
    gang = (TaskPlacement(0, (0,), 1000, 0, 0), TaskPlacement(0, (3,), 1000, 0, 0))
    assert not room.take_all(gang)  # device 3 is taken: nothing of the gang stays
    assert room.fingerprint() == before
    assert room.take_all(gang[:1])
    assert room.free[0][0] == 0 and not room.can_take(gang[0])
