"""Pods caldera did not create take a node's pod slots one each (issue 34, item 2): a node's
`pods` allocatable counts every pod on it, DaemonSets and other teams' pods included, so
caldera places its own tasks against what is left. Before, they took one slot per node
(none when they asked for nothing), and a gang went onto a node past its pod limit."""

from __future__ import annotations

from k8s_support import World


def _world() -> World:
    world = World().hypernode("a", "n", count=2)
    for node in world.cluster.nodes.values():
        node["status"]["allocatable"]["pods"] = "4"
    for i in range(3):  # best-effort pods of another team on n-0: no requests, three slots
        world.cluster.add_foreign_pod("other-team", f"agent-{i}", "n-0")
    return world.start()


def test_foreign_pods_take_one_slot_each() -> None:
    world = _world()
    world.submit("wide", tasks=6, gpus=0)  # 1 slot left on n-0, 4 on n-1: no room
    world.step()
    world.step(1)
    assert world.state("wide") == "Pending", world.status("wide")
    assert not [p for p in world.cluster.pods if p[0] == "team"]


def test_a_gang_fits_in_the_slots_left() -> None:
    world = _world()
    world.submit("fits", tasks=5, gpus=0)
    world.step()
    world.step(1)
    assert world.state("fits") == "Running", world.status("fits")
    placed = world.pinned("fits")
    assert placed.count("n-0") <= 1 and placed.count("n-1") <= 4, placed
