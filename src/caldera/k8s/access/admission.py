"""Who may do what, enforced where Kubernetes enforces it: RBAC and a ValidatingAdmissionPolicy.

caldera decides nothing from fields a user wrote about their own rights (DESIGN §7). What
this module renders:

- `controller_rbac`, `user_roles`: the controller's and the users' RBAC, from
  `caldera.k8s.access.rbac` (re-exported here): the controller reads the cluster and writes only
  in the namespaces it serves; `caldera-critical` and `caldera-protect` grant the RBAC
  verbs `critical` and `protect` that the policy below checks.
- `admission_policy`: a ValidatingAdmissionPolicy (+ binding) the API server runs on every
  TrainingJob create, before anything is stored:
  * the namespace is one caldera serves, and the queue one its binding allows;
  * `type: critical` only where the binding allows critical *and* the requesting user holds
    the verb `critical` on trainingjobs in that namespace (CEL `authorizer`: the user's own
    RBAC, groups included); `protected: true` likewise with the verb `protect`;
  * the pod templates ask for nothing the submitter could not do alone: no host network,
    PID or IPC, no hostPath volume, no privileged container or added capability, no host
    port, a service account only from the namespace's list; no root user, procMount,
    unconfined seccomp or AppArmor, runtimeClassName or unsafe sysctl (Pod Security's
    baseline, issue 34); and only Secrets, ConfigMaps and PersistentVolumeClaims the
    *submitter* may `get` (CEL `authorizer`, their own RBAC: the pods are created with the
    controller's rights, and `pods/log` would show what they read).
  The controller checks the same template rules and bindings again before it creates a pod
  (`caldera.k8s.reading.trainingjob`), for a cluster where the policy is missing.
- `report_policy` (rendered after `admission_policy`): a second ValidatingAdmissionPolicy on
  UPDATE of caldera's pods by anyone in a served namespace but the controller (a user, or a
  service account of a served namespace: the job's own, which may `patch pods` to report
  progress): only the `caldera.io/progress` and `caldera.io/checkpoint` annotations may
  change — no label (`caldera.io/managed`), ownerReference, finalizer, other annotation or
  spec field (issue 34, item 4).
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from caldera.k8s.access.rbac import (
    CONTROLLER_ACCOUNT,
    CONTROLLER_POD_GROUP_RULES,
    CONTROLLER_READ_RULES,
    CONTROLLER_STATE_RULES,
    CONTROLLER_WRITE_RULES,
    CRITICAL_VERB,
    PROTECT_VERB,
    controller_rbac,
    controller_write_rules,
    object_metadata,
    served_namespace,
    user_roles,
)
from caldera.k8s.cluster.api import from_rfc3339
from caldera.k8s.names import POLICY_NAME, REPORT_POLICY_NAME
from caldera.k8s.reading.podtemplate import RESTRICTED_VOLUMES
from caldera.k8s.reading.trainingjob import ADDABLE_CAPABILITY, SAFE_SYSCTLS
from caldera.k8s.settings import KubeSettings
from caldera.trainingjob_api import CHECKPOINT, GROUP, MANAGED, PLURAL, PROGRESS

__all__ = [
    "CONTROLLER_POD_GROUP_RULES",
    "CONTROLLER_READ_RULES",
    "CONTROLLER_STATE_RULES",
    "CONTROLLER_WRITE_RULES",
    "CRITICAL_VERB",
    "POLICY_NAME",
    "POLICY_SETTLE_SECONDS",
    "PROTECT_VERB",
    "REFERENCES_MESSAGE",
    "REPORT_POLICY_NAME",
    "admission_policy",
    "controller_rbac",
    "controller_write_rules",
    "policy_problem",
    "report_policy",
    "served_namespace",
    "user_roles",
]

# -- the ValidatingAdmissionPolicy -----------------------------------------------------------


def _cel(value: Any) -> str:
    """A CEL literal for a string, list of strings or map of those (JSON's syntax is CEL's,
    once double quotes are single-quoted-safe: json.dumps escapes them)."""
    return json.dumps(value, sort_keys=True)


def _allowed(verb: str) -> str:
    return (
        f"authorizer.group('{GROUP}').resource('{PLURAL}')"
        f".namespace(request.namespace).check('{verb}').allowed()"
    )


_SPEC = "(has(t.template.spec) ? t.template.spec : {})"
_CONTAINERS = (
    f"((has({_SPEC}.containers) ? {_SPEC}.containers : []) + "
    f"(has({_SPEC}.initContainers) ? {_SPEC}.initContainers : []))"
)
_MATCH: dict[str, Any] = {
    "resourceRules": [
        {
            "apiGroups": [GROUP],
            "apiVersions": ["*"],
            "resources": [PLURAL],
            "operations": ["CREATE"],
        }
    ]
}


def _pod_rules() -> list[tuple[str, str]]:
    """(CEL over every task `t`, message) for the pod-template rules."""
    containers = _CONTAINERS
    return [
        (
            f"!({_SPEC}.?hostNetwork.orValue(false) || {_SPEC}.?hostPID.orValue(false) || "
            f"{_SPEC}.?hostIPC.orValue(false))",
            "a pod template may not use the host network, PID or IPC namespace",
        ),
        (
            f"!{_SPEC}.?volumes.orValue([]).exists(v, has(v.hostPath))",
            "a pod template may not mount a hostPath volume",
        ),
        (
            f"!{containers}.exists(c, c.?securityContext.?privileged.orValue(false) || "
            "c.?securityContext.?allowPrivilegeEscalation.orValue(false) || "
            "c.?securityContext.?capabilities.?add.orValue([])"
            f".exists(x, x != '{ADDABLE_CAPABILITY}'))",
            "a pod template may not run a privileged container, allow privilege escalation "
            f"or add a capability other than {ADDABLE_CAPABILITY}",
        ),
        (
            f"!{containers}.exists(c, c.?ports.orValue([]).exists(p, has(p.hostPort)))",
            "a pod template may not bind a host port",
        ),
        (
            f"{_SPEC}.?securityContext.?runAsUser.orValue(1) != 0 && "
            f"!{containers}.exists(c, c.?securityContext.?runAsUser.orValue(1) == 0)",
            "a pod template may not run as root (runAsUser: 0)",
        ),
        (
            f"!{containers}.exists(c, c.?securityContext.?procMount.orValue('Default') "
            "!= 'Default')",
            "a pod template may not set procMount (Pod Security: baseline)",
        ),
        (
            f"!([{_SPEC}.?securityContext.orValue({{}})] + "
            f"{containers}.map(c, c.?securityContext.orValue({{}}))).exists(x, "
            "x.?seccompProfile.?type.orValue('') == 'Unconfined' || "
            "x.?appArmorProfile.?type.orValue('') == 'Unconfined')",
            "a pod template may not run unconfined (seccomp or AppArmor: Pod Security: baseline)",
        ),
        (
            f"!has({_SPEC}.runtimeClassName)",
            "a pod template may not choose a runtimeClassName (the operator's to set)",
        ),
        (
            f"{_SPEC}.?securityContext.?sysctls.orValue([]).all(x, "
            f"x.?name.orValue('') in {_cel(sorted(SAFE_SYSCTLS))})",
            "a pod template may not set an unsafe sysctl (Pod Security: baseline)",
        ),
        (_REFERENCES_RULE, REFERENCES_MESSAGE),
        *(
            (f"variables.podSecurity != 'restricted' || ({rule})", message)
            for rule, message in _restricted_rules()
        ),
    ]


def _restricted_rules() -> list[tuple[str, str]]:
    """(CEL over every task `t`, message): what contradicts Pod Security's `restricted`
    (`caldera.k8s.reading.podtemplate.restricted_problem`; the defaults it needs are filled on the
    pods by the controller)."""
    contexts = (
        f"([{_SPEC}.?securityContext.orValue({{}})] + "
        f"{_CONTAINERS}.map(c, c.?securityContext.orValue({{}})))"
    )
    allowed = sorted(RESTRICTED_VOLUMES)
    return [
        (
            f"{_SPEC}.?volumes.orValue([]).all(v, v.all(k, k == 'name' || k in {_cel(allowed)}))",
            "a pod template may use only the volume types Pod Security's restricted allows: "
            + ", ".join(allowed),
        ),
        (
            f"!{contexts}.exists(x, x.?runAsNonRoot.orValue(true) == false)",
            "a pod template may not set runAsNonRoot: false (Pod Security: restricted)",
        ),
        (
            f"{contexts}.all(x, x.?seccompProfile.?type.orValue('RuntimeDefault') in "
            "['RuntimeDefault', 'Localhost'])",
            "a pod template may use only the seccomp profiles RuntimeDefault or Localhost "
            "(Pod Security: restricted)",
        ),
        (
            f"{_CONTAINERS}.all(c, !has(c.securityContext) || "
            "!has(c.securityContext.capabilities) || "
            "!has(c.securityContext.capabilities.drop) || "
            "'ALL' in c.securityContext.capabilities.drop)",
            "a pod template's capabilities.drop must include ALL (Pod Security: restricted)",
        ),
    ]


def _may_get(resource: str, name: str) -> str:
    """CEL: the requesting user may `get` the named object of the namespace (`name` an
    optional string: a reference without a name asks about the whole resource)."""
    return (
        f"authorizer.group('').resource('{resource}').namespace(request.namespace)"
        f".name(string({name}.orValue(''))).check('get').allowed()"
    )


REFERENCES_MESSAGE = (
    "a pod template may use only the Secrets, ConfigMaps and PersistentVolumeClaims "
    "its submitter may get (the pods run with the controller's rights, not theirs)"
)
# Every reference `caldera.k8s.reading.trainingjob.template_references` finds, asked of the
# authorizer with the submitter's own rights.
_REFERENCES_RULE = (
    f"{_SPEC}.?volumes.orValue([]).all(v, "
    f"(!has(v.secret) || {_may_get('secrets', 'v.secret.?secretName')}) && "
    f"(!has(v.configMap) || {_may_get('configmaps', 'v.configMap.?name')}) && "
    "(!has(v.persistentVolumeClaim) || "
    f"{_may_get('persistentvolumeclaims', 'v.persistentVolumeClaim.?claimName')}) && "
    "(!has(v.csi) || !has(v.csi.nodePublishSecretRef) || "
    f"{_may_get('secrets', 'v.csi.nodePublishSecretRef.?name')}) && "
    "v.?projected.?sources.orValue([]).all(p, "
    f"(!has(p.secret) || {_may_get('secrets', 'p.secret.?name')}) && "
    f"(!has(p.configMap) || {_may_get('configmaps', 'p.configMap.?name')}))) && "
    f"{_CONTAINERS}.all(c, c.?env.orValue([]).all(e, "
    f"(!has(e.valueFrom) || !has(e.valueFrom.secretKeyRef) || "
    f"{_may_get('secrets', 'e.valueFrom.secretKeyRef.?name')}) && "
    f"(!has(e.valueFrom) || !has(e.valueFrom.configMapKeyRef) || "
    f"{_may_get('configmaps', 'e.valueFrom.configMapKeyRef.?name')})) && "
    "c.?envFrom.orValue([]).all(f, "
    f"(!has(f.secretRef) || {_may_get('secrets', 'f.secretRef.?name')}) && "
    f"(!has(f.configMapRef) || {_may_get('configmaps', 'f.configMapRef.?name')})))"
)
# A new or re-bound policy takes the API server a moment to enforce: a job created within
# this many seconds of it is not taken as checked by it.
POLICY_SETTLE_SECONDS = 5.0


def _created(obj: Any) -> float | None:
    stamp = ((obj or {}).get("metadata") or {}).get("creationTimestamp")
    try:
        return from_rfc3339(str(stamp)) if stamp else None
    except ValueError:
        return None


def _narrows_nothing(match: Any) -> bool:
    """A binding's matchResources as the API server stores an absent one (empty selectors,
    no resource rules): it leaves out no namespace and no object."""
    if not match:
        return True
    if not isinstance(match, dict):
        return False
    return not any(
        match.get(key)
        for key in ("namespaceSelector", "objectSelector", "resourceRules", "excludeResourceRules")
    )


def _matches_creates(match: Any) -> bool:
    """A policy's matchConstraints as rendered here (the API server adds its defaults: a
    rule's scope, the match policy, empty selectors): every TrainingJob create."""
    if not isinstance(match, dict) or match.get("excludeResourceRules"):
        return False
    if match.get("namespaceSelector") or match.get("objectSelector"):
        return False
    want = _MATCH["resourceRules"][0]
    rules = match.get("resourceRules") or []
    return any(
        isinstance(rule, dict)
        and rule.get("scope", "*") == "*"
        and all(rule.get(key) == want[key] for key in want)
        for rule in rules
    )


def policy_problem(policy: Any, binding: Any, created: float) -> str | None:
    """Why caldera's admission policy did not check the references of a TrainingJob
    created at `created` against its submitter's rights, or None when it did: the policy
    and its binding exist, unchanged in what matters (the reference rule as rendered here,
    failing closed on CREATE of TrainingJobs, denying, in every namespace), and both were in
    force before the job was created. The controller cannot ask for the submitter's rights
    itself (Kubernetes records no creator), so without this it refuses the references."""
    if not isinstance(policy, dict) or not isinstance(binding, dict):
        missing = "ValidatingAdmissionPolicy" if not isinstance(policy, dict) else "binding"
        return f"the admission policy {POLICY_NAME} is not installed (its {missing} is missing)"
    spec = policy.get("spec") or {}
    bound = binding.get("spec") or {}
    rule = f"object.spec.tasks.all(t, {_REFERENCES_RULE})"
    checks = any(
        isinstance(v, dict) and v.get("expression") == rule for v in spec.get("validations") or []
    )
    if (
        not checks
        or spec.get("failurePolicy", "Fail") != "Fail"
        or not _matches_creates(spec.get("matchConstraints"))
        or bound.get("policyName") != POLICY_NAME
        or "Deny" not in (bound.get("validationActions") or [])
        or not _narrows_nothing(bound.get("matchResources"))
        or bound.get("paramRef")
    ):
        return f"the admission policy {POLICY_NAME} installed is not the one caldera renders"
    since = max(_created(policy) or math.inf, _created(binding) or math.inf)
    if not created >= since + POLICY_SETTLE_SECONDS:
        return f"the admission policy {POLICY_NAME} was installed after the job was created"
    return None


def admission_policy(settings: KubeSettings) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, from the namespace bindings."""
    bindings = settings.namespaces
    queues = {ns: list(b.queues) for ns, b in bindings.items()}
    critical = sorted(ns for ns, b in bindings.items() if b.critical)
    accounts = {ns: list(b.service_accounts) for ns, b in bindings.items()}
    validations: list[dict[str, Any]] = [
        {
            "expression": f"request.namespace in {_cel(sorted(bindings))}",
            "messageExpression": "'caldera serves no jobs in namespace ' + request.namespace "
            "+ ' (ask the operator to bind it: kubernetes.namespaces)'",
            "reason": "Forbidden",
        },
        {
            "expression": "!has(object.spec.queue) || !(request.namespace in variables.queues) "
            "|| object.spec.queue in variables.queues[request.namespace]",
            "messageExpression": "'queue ' + object.spec.queue + ' is not bound to namespace ' "
            "+ request.namespace + ' (allowed: ' + "
            "variables.queues[request.namespace].join(', ') + ')'",
            "reason": "Forbidden",
        },
        {
            "expression": f"!variables.critical || request.namespace in {_cel(critical)}",
            "messageExpression": "'namespace ' + request.namespace + "
            "' may not submit type critical (kubernetes.namespaces.' + request.namespace + "
            "'.critical)'",
            "reason": "Forbidden",
        },
        {
            "expression": f"!variables.critical || {_allowed(CRITICAL_VERB)}",
            "messageExpression": "'user ' + request.userInfo.username + "
            f"' may not submit type critical in ' + request.namespace + ' (needs the RBAC verb "
            f"{CRITICAL_VERB} on {PLURAL}.{GROUP}: ClusterRole caldera-critical)'",
            "reason": "Forbidden",
        },
        {
            "expression": "!object.spec.?protected.orValue(false) || " + _allowed(PROTECT_VERB),
            "messageExpression": "'user ' + request.userInfo.username + "
            f"' may not submit a protected job in ' + request.namespace + ' (needs the RBAC verb "
            f"{PROTECT_VERB} on {PLURAL}.{GROUP}: ClusterRole caldera-protect)'",
            "reason": "Forbidden",
        },
        {
            "expression": "object.spec.tasks.all(t, "
            f"!has({_SPEC}.serviceAccountName) || "
            f"{_SPEC}.serviceAccountName in variables.accounts)",
            "messageExpression": "'a pod template may run only as a service account of ' + "
            "request.namespace + ' that the operator allows: ' + variables.accounts.join(', ')",
            "reason": "Forbidden",
        },
    ]
    for rule, message in _pod_rules():
        validations.append(
            {
                "expression": f"object.spec.tasks.all(t, {rule})",
                "message": message,
                "reason": "Forbidden",
            }
        )
    variables = [
        {"name": "critical", "expression": "object.spec.?type.orValue('normal') == 'critical'"},
        {"name": "queues", "expression": _cel(queues)},
        {"name": "podSecurity", "expression": _cel(settings.pod_security.value)},
        {
            "name": "accounts",
            "expression": f"request.namespace in {_cel(accounts)} ? "
            f"{_cel(accounts)}[request.namespace] : ['default']",
        },
    ]
    return _policy(POLICY_NAME, copy.deepcopy(_MATCH), validations, variables=variables)


def _policy(
    name: str,
    match: dict[str, Any],
    validations: list[dict[str, Any]],
    *,
    conditions: list[dict[str, Any]] | None = None,
    variables: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy of caldera's and its binding: both labelled as caldera's,
    the policy failing closed (an API server that cannot evaluate it refuses the request) and
    the binding denying what a validation rejects, cluster-wide. The two policies differ only
    in what they match, the conditions and variables they use and what they check."""
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": match}
    if conditions is not None:
        spec["matchConditions"] = conditions
    if variables is not None:
        spec["variables"] = variables
    spec["validations"] = validations
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": object_metadata(name),
        "spec": spec,
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": object_metadata(name),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


_REPORTS = sorted({PROGRESS, CHECKPOINT})


def _unchanged(path: str, empty: str) -> str:
    return f"object.{path}.orValue({empty}) == oldObject.{path}.orValue({empty})"


def report_policy(
    settings: KubeSettings, account: str = CONTROLLER_ACCOUNT
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (+ binding) that keeps a pod's report path to its
    reports: an UPDATE of a caldera pod by a user or a service account of a served
    namespace may change the progress and checkpoint annotations and nothing else. The
    controller (`account` in the state namespace), cluster admins (system:masters) and the
    cluster's own components (kubelet, garbage collector: `system:` users outside the served
    namespaces) are not matched."""
    controller = f"system:serviceaccount:{settings.state_namespace}:{account}"
    served = _cel(sorted(settings.namespaces))
    reports = _cel(_REPORTS)
    old = "oldObject.metadata.?annotations.orValue({})"
    new = "object.metadata.?annotations.orValue({})"
    what = f"a caldera pod may be changed here only in its {' and '.join(_REPORTS)} annotations"
    checks = [
        (_unchanged("metadata.?labels", "{}"), f"{what}, not its labels"),
        (_unchanged("metadata.?ownerReferences", "[]"), f"{what}, not its ownerReferences"),
        (_unchanged("metadata.?finalizers", "[]"), f"{what}, not its finalizers"),
        ("object.spec == oldObject.spec", f"{what}, not its spec"),
        (
            f"{new}.all(k, k in {reports} || (k in {old} && {old}[k] == {new}[k])) && "
            f"{old}.all(k, k in {reports} || k in {new})",
            f"{what}, not its other annotations",
        ),
    ]
    match = {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "operations": ["UPDATE"],
            }
        ],
        # Matched when the old or the new pod has it: removing it is matched too.
        "objectSelector": {"matchLabels": {MANAGED: "true"}},
    }
    conditions = [
        {"name": "served", "expression": f"request.namespace in {served}"},
        {
            "name": "not-the-controller",
            "expression": f"request.userInfo.username != {_cel(controller)}",
        },
        {
            "name": "not-a-cluster-admin",
            "expression": "!('system:masters' in request.userInfo.groups)",
        },
        {
            "name": "a-tenant",
            "expression": "!request.userInfo.username.startsWith('system:') || "
            f"{served}.exists(ns, "
            "request.userInfo.username.startsWith('system:serviceaccount:' + ns + ':'))",
        },
    ]
    validations = [
        {"expression": rule, "message": message, "reason": "Forbidden"} for rule, message in checks
    ]
    return _policy(REPORT_POLICY_NAME, match, validations, conditions=conditions)
