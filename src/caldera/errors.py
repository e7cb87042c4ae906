"""Every error caldera raises on purpose, under one root (httpx's `_exceptions.py` is the model).

    CalderaError
    ├── InputError (ValueError)          what a person wrote cannot be used; the message is
    │   │                                one line naming the file or the field
    │   ├── ScenarioError                a scenario file (simulate, compare, demo)
    │   ├── ConfigError                  a configuration file (serve, k8s run / render)
    │   │   └── KubeConfigError          … including its `kubernetes:` section
    │   └── RequestError                 a job request cannot be accepted as written
    │       ├── Rejected                 admission refused it (`closed`: the queue is not Open)
    │       ├── LimitError               over a size or rate limit (caldera.service.limits;
    │       │                                `status` 400, 413 or 429)
    │       ├── RecordError              a Kubernetes job record
    │       └── RenderError              a job that cannot be rendered as pods
    ├── NotFound (LookupError)           no such job, queue or cluster object
    ├── Conflict                         the request clashes with the current state
    │   │                                (a job that has already ended, an object that exists)
    │   └── ClusterConflict              … reported by the Kubernetes API (also ClusterError)
    ├── InvariantError (RuntimeError)    caldera broke one of its own rules: a bug, never
    │   │                                the user's fault
    │   ├── IllegalTransition (ValueError)   a job state change the lifecycle forbids
    │   └── CapacityError                a node over capacity or below zero
    ├── ClusterError (RuntimeError)      a Kubernetes API call failed
    │   ├── ClusterUnavailable           the API server cannot be reached
    │   ├── VolcanoMissing               the Volcano CRDs are not installed
    │   ├── Forbidden                    RBAC refused a call
    │   │   └── QuotaExceeded            a ResourceQuota refused a create: not now, not never
    │   ├── EvictionBlocked              the Eviction API refused (a PodDisruptionBudget)
    │   ├── ClusterConflict              (see Conflict)
    │   ├── Invalid                      the API server refused the object
    │   └── DevClusterError              the dev cluster cannot be built or started
    │                                    (caldera.devcluster.errors)
    ├── ServiceError (RuntimeError)      the service cannot start, or cannot run a task
    │   ├── DatabaseBusy                 another server holds the database
    │   │                                (caldera.service.store)
    │   └── SpawnError (OSError)         a task's process could not be started
    │                                    (caldera.service.launcher)
    └── ApiError                         the REST API answered with an error (the SDK);
                                         `status` is the HTTP status, None if unreachable

The standard bases (ValueError, LookupError, RuntimeError) are kept where callers and
libraries already rely on them (pydantic turns a ValueError in a validator into a field error).
This module imports nothing from caldera, so every layer may raise these.
"""

from __future__ import annotations

__all__ = [
    "ApiError",
    "CalderaError",
    "CapacityError",
    "ClusterConflict",
    "ClusterError",
    "ClusterUnavailable",
    "ConfigError",
    "Conflict",
    "EvictionBlocked",
    "Forbidden",
    "IllegalTransition",
    "InputError",
    "Invalid",
    "InvariantError",
    "KubeConfigError",
    "NotFound",
    "QuotaExceeded",
    "RecordError",
    "Rejected",
    "RenderError",
    "RequestError",
    "ScenarioError",
    "ServiceError",
    "VolcanoMissing",
]


class CalderaError(Exception):
    """The root: `except CalderaError` catches everything caldera raises on purpose."""


# -- input a person wrote ----------------------------------------------------------------------


class InputError(CalderaError, ValueError):
    """Something a person wrote cannot be used. The message is one line, meant for them."""


class ScenarioError(InputError):
    """A scenario file cannot be used."""


class ConfigError(InputError):
    """A configuration file cannot be used."""


class KubeConfigError(ConfigError):
    """The Kubernetes controller's file cannot be used (one line naming the file and field)."""


class RequestError(InputError):
    """A job request cannot be accepted as written (it becomes a reject reason or a 400)."""


class Rejected(RequestError):
    """Admission refused the submission. `closed`: because the queue is not Open."""

    def __init__(self, reason: str, closed: bool = False) -> None:
        super().__init__(reason)
        self.closed = closed


class RecordError(RequestError):
    """A Kubernetes job record cannot be admitted."""


class RenderError(RequestError):
    """A job cannot be rendered as pods as asked."""


# -- the state of things -----------------------------------------------------------------------


class NotFound(CalderaError, LookupError):
    """No such job, queue or object."""


class Conflict(CalderaError):
    """The request clashes with the current state (a job that has already ended, an object
    that already exists or changed under a precondition)."""


# -- caldera's own rules -----------------------------------------------------------------------


class InvariantError(CalderaError, RuntimeError):
    """caldera broke one of its own rules: a bug, never the user's fault."""


class IllegalTransition(InvariantError, ValueError):
    """A runtime tried a job state change the lifecycle does not allow."""


class CapacityError(InvariantError):
    """A change would put a node over capacity or below zero."""


# -- the outside world -------------------------------------------------------------------------


class ClusterError(CalderaError, RuntimeError):
    """A Kubernetes API call failed. The message is one line."""


class ClusterUnavailable(ClusterError):
    """The API server cannot be reached (or answered with a server error)."""


class VolcanoMissing(ClusterError):
    """The Volcano CRDs (scheduling.volcano.sh/v1beta1) are not installed."""


class Forbidden(ClusterError):
    """RBAC refused a call: the controller's service account lacks a permission."""


class QuotaExceeded(Forbidden):
    """A ResourceQuota refused a create: the namespace is full for now; try again later."""


class EvictionBlocked(ClusterError):
    """The Eviction API refused to evict a pod now (its PodDisruptionBudget allows no more
    disruptions); the eviction is rolled back and planned again."""


class ClusterConflict(ClusterError, Conflict):
    """The object already exists (or changed under a precondition)."""


class Invalid(ClusterError):
    """The API server refused the object (validation, admission webhook)."""


class ServiceError(CalderaError, RuntimeError):
    """The service cannot start. One line, for the user."""


class ApiError(CalderaError):
    """The REST API answered with an error, or could not be reached (`status` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
