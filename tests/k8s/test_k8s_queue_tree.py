"""Departments above teams (DESIGN §2 "Hierarchy") as Volcano's hierarchical Queues: a team's
Queue names its department in `spec.parent`, read back the same way, and the controller creates
departments before their teams (Volcano admits a child only under an existing parent)."""

from __future__ import annotations

from caldera.k8s import FakeCluster, KubeSettings
from caldera.k8s.config import parse_kube_config
from caldera.k8s.controller import sync_cluster_objects
from caldera.k8s.effects.render import queue_from_volcano, volcano_queue

TREE = {
    "queues": [
        {"name": "web", "parent": "product", "weight": 1, "deserved": {"gpu": 8}},
        {"name": "product", "weight": 1, "deserved": {"gpu": 16}, "guarantee": {"gpu": 8}},
        {"name": "search", "parent": "product", "weight": 1},
        {"name": "lab", "weight": 1},
    ]
}


def test_a_team_names_its_department_and_reads_back_the_same() -> None:
    settings = KubeSettings()
    queues = {q.name: q for q in parse_kube_config(TREE).queues}
    rendered = {name: volcano_queue(q, settings) for name, q in queues.items()}
    assert rendered["web"]["spec"]["parent"] == "product"
    assert "parent" not in rendered["product"]["spec"] and "parent" not in rendered["lab"]["spec"]
    for name, body in rendered.items():
        assert queue_from_volcano(body, settings).parent == queues[name].parent
    root = dict(rendered["lab"], spec={**rendered["lab"]["spec"], "parent": "root"})
    assert queue_from_volcano(root, settings).parent is None  # Volcano's own root


def test_departments_are_created_before_their_teams() -> None:
    cluster = FakeCluster()
    sync_cluster_objects(cluster, parse_kube_config(TREE).queues, KubeSettings())
    applied = [a[2] for a in cluster.actions if a[:2] == ("apply", "queue")]
    assert applied.index("product") < applied.index("web")
    assert applied.index("product") < applied.index("search")
