"""Who the controller and the people using caldera are to Kubernetes' RBAC: what
`caldera k8s render --rbac` and the chart give them.

- `controller_rbac`: the controller's ServiceAccount; a ClusterRole that only *reads* the
  cluster (nodes, every pod: to know what room is really free), and a Role bound in each
  served namespace for what it writes there (pods, their evictions, PodGroups, Services,
  Events, TrainingJob status) — it cannot create a pod anywhere else, kube-system included;
  a Role in its own namespace for its state ConfigMap and its leader-election Lease.
- `user_roles`: ClusterRoles an operator binds per namespace with a RoleBinding:
  `caldera-submitter` (submit, watch, delete TrainingJobs, read their pods and Events),
  `caldera-critical` (the RBAC verb `critical` on trainingjobs) and `caldera-protect` (the
  verb `protect`). RBAC accepts any verb; the admission policy checks these two
  (`caldera.k8s.access.admission`, which re-exports this module).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from caldera.k8s import names
from caldera.k8s.ha.leader import LEASE_NAME
from caldera.k8s.names import POLICY_NAME
from caldera.k8s.settings import KubeSettings, PodSecurity, uses_pod_groups
from caldera.model import PRIORITY_CLASSES
from caldera.trainingjob_api import GROUP, MANAGED, PLURAL

__all__ = [
    "CONTROLLER_ACCOUNT",
    "CONTROLLER_POD_GROUP_RULES",
    "CONTROLLER_READ_RULES",
    "CONTROLLER_STATE_RULES",
    "CONTROLLER_WRITE_RULES",
    "CRITICAL_VERB",
    "PROTECT_VERB",
    "controller_rbac",
    "controller_write_rules",
    "object_metadata",
    "served_namespace",
    "user_roles",
]

CONTROLLER_ACCOUNT = "caldera-controller"
CRITICAL_VERB = "critical"
PROTECT_VERB = "protect"
_RBAC = "rbac.authorization.k8s.io/v1"
_VOLCANO = "scheduling.volcano.sh"


def _rule(
    group: str, resources: Iterable[str], verbs: Iterable[str], names: Iterable[str] = ()
) -> dict[str, list[str]]:
    rule = {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
    if names:
        rule["resourceNames"] = list(names)  # `create` and `list` cannot be narrowed by name
    return rule


# Only the verbs the controller's client sends (caldera.k8s.cluster.client), each one seen in
# the API server's audit log of the end-to-end tests
# (tests/k8s_real/test_real_zz_chart_lifecycle.py), and by name where the object is known: the
# PriorityClasses, the Lease, the state ConfigMap.
_CLASSES = [pc.name for pc in PRIORITY_CLASSES.values()]
# Cluster-wide, read only (and the cluster-scoped objects caldera keeps: PriorityClasses,
# Volcano Queues).
CONTROLLER_READ_RULES: tuple[dict[str, list[str]], ...] = (
    _rule("", ["nodes"], ["list", "watch"]),
    _rule("", ["pods"], ["get", "list", "watch"]),
    _rule("scheduling.k8s.io", ["priorityclasses"], ["get"], _CLASSES),
    _rule("scheduling.k8s.io", ["priorityclasses"], ["create"]),
    _rule(_VOLCANO, ["queues"], ["get", "list", "create", "update"]),
    # Whether caldera's own admission policy checked a template's Secrets and ConfigMaps
    # against its submitter's rights (`policy_problem`), read by name.
    _rule(
        "admissionregistration.k8s.io",
        ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
        ["get"],
        [POLICY_NAME],
    ),
)
# In each served namespace only (pods are read cluster-wide above).
CONTROLLER_WRITE_RULES: tuple[dict[str, list[str]], ...] = (
    _rule(GROUP, [PLURAL], ["list", "watch"]),
    _rule(GROUP, [f"{PLURAL}/status"], ["patch"]),
    _rule("", ["pods"], ["create", "delete"]),
    _rule("", ["pods/eviction"], ["create"]),
    _rule("", ["services"], ["create", "delete"]),
    _rule("", ["events"], ["create"]),
    _rule(_VOLCANO, ["podgroups"], ["list"]),
)
# Beside the above in each served namespace, only where the pods' scheduler reads PodGroups
# (`uses_pod_groups`): behind kube-scheduler no start writes one.
CONTROLLER_POD_GROUP_RULES: tuple[dict[str, list[str]], ...] = (
    _rule(_VOLCANO, ["podgroups"], ["create", "delete"]),
)
# In the controller's own namespace: the queues' waiting modes and the leader Lease.
CONTROLLER_STATE_RULES: tuple[dict[str, list[str]], ...] = (
    _rule("", ["configmaps"], ["get", "patch"], [names.STATE_CONFIG_MAP]),
    _rule("", ["configmaps"], ["create"]),
    _rule("coordination.k8s.io", ["leases"], ["get", "update"], [LEASE_NAME]),
    _rule("coordination.k8s.io", ["leases"], ["create"]),
    _rule("", ["events"], ["create"]),
)


def object_metadata(name: str, **meta: Any) -> dict[str, Any]:
    """An object's metadata as caldera writes it here: its name, labelled as everything caldera
    creates is (`MANAGED`), then `meta` (a namespace)."""
    return {"name": name, "labels": {MANAGED: "true"}, **meta}


def _role(kind: str, name: str, rules: Iterable[dict[str, list[str]]], **meta: Any) -> Any:
    return {
        "apiVersion": _RBAC,
        "kind": kind,
        "metadata": object_metadata(name, **meta),
        "rules": [copy.deepcopy(rule) for rule in rules],
    }


def _binding(
    kind: str, name: str, role_kind: str, role: str, account: str, account_ns: str, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": _RBAC,
        "kind": kind,
        "metadata": object_metadata(name, **meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
    }


def served_namespace(name: str, level: PodSecurity) -> dict[str, Any]:
    """A namespace caldera serves, labelled for Pod Security Admission at `level` (enforced,
    and warned about on apply): the pods caldera creates there meet it
    (`caldera.k8s.reading.podtemplate.restricted_defaults`)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                "pod-security.kubernetes.io/enforce": level.value,
                "pod-security.kubernetes.io/warn": level.value,
            },
        },
    }


def controller_write_rules(settings: KubeSettings) -> tuple[dict[str, list[str]], ...]:
    """What the controller may write in each served namespace behind `settings`' scheduler."""
    if uses_pod_groups(settings):
        return CONTROLLER_WRITE_RULES + CONTROLLER_POD_GROUP_RULES
    return CONTROLLER_WRITE_RULES


def controller_rbac(settings: KubeSettings, name: str = CONTROLLER_ACCOUNT) -> list[dict[str, Any]]:
    """The controller's namespace, ServiceAccount and every role and binding it needs."""
    home = settings.state_namespace
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": home}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": home, "labels": {MANAGED: "true"}},
        },
        _role("ClusterRole", f"{name}-read", CONTROLLER_READ_RULES),
        _binding("ClusterRoleBinding", f"{name}-read", "ClusterRole", f"{name}-read", name, home),
        _role("ClusterRole", f"{name}-jobs", controller_write_rules(settings)),
        _role("Role", f"{name}-state", CONTROLLER_STATE_RULES, namespace=home),
        _binding(
            "RoleBinding", f"{name}-state", "Role", f"{name}-state", name, home, namespace=home
        ),
    ]
    for namespace in settings.namespaces:
        objects.append(served_namespace(namespace, settings.pod_security))
    for namespace in settings.namespaces:
        objects.append(
            _binding(
                "RoleBinding",
                f"{name}-jobs",
                "ClusterRole",
                f"{name}-jobs",
                name,
                home,
                namespace=namespace,
            )
        )
    return objects


def user_roles() -> list[dict[str, Any]]:
    """ClusterRoles for people, to bind per namespace (`kubectl create rolebinding`)."""
    submit = (
        _rule(GROUP, [PLURAL], ["get", "list", "watch", "create", "delete"]),
        _rule(GROUP, [f"{PLURAL}/status"], ["get"]),
        _rule("", ["pods", "pods/log", "events"], ["get", "list", "watch"]),
    )
    return [
        _role("ClusterRole", "caldera-submitter", submit),
        _role("ClusterRole", "caldera-critical", [_rule(GROUP, [PLURAL], [CRITICAL_VERB])]),
        _role("ClusterRole", "caldera-protect", [_rule(GROUP, [PLURAL], [PROTECT_VERB])]),
    ]
