"""Admission limits (the config file's `limits` section, docs/service.md "Security model").

Every limit has a default meant for a shared host; an operator raises what their users need.
The API enforces them before anything is stored: a request over a size limit is answered 413
or 422, a user over their pending-job or submission-rate limit 429 with `Retry-After`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from caldera.errors import RequestError
from caldera.runtime.requests import RequestRecord

__all__ = ["Admission", "LimitError", "Limits", "RateLimiter", "check_sizes"]


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # A request body larger than this is refused (413) before it is read further.
    body_bytes: int = Field(default=1024 * 1024, ge=1024)
    tasks_per_job: int = Field(default=256, ge=1, le=4096)
    gpus_per_task: int = Field(default=64, ge=1, le=4096)
    name_length: int = Field(default=255, ge=1, le=255)
    labels: int = Field(default=64, ge=0)
    label_key_length: int = Field(default=253, ge=1, le=1024)
    label_value_length: int = Field(default=1024, ge=1)
    env_vars: int = Field(default=256, ge=0)
    env_bytes: int = Field(default=128 * 1024, ge=0)  # names and values together
    command_bytes: int = Field(default=128 * 1024, ge=1)  # all arguments together
    pending_jobs_per_user: int = Field(default=10_000, ge=1)
    # Token bucket per user: `submit_rate` submissions a second, bursts of `submit_burst`.
    submit_rate: float = Field(default=50.0, gt=0, allow_inf_nan=False)
    submit_burst: int = Field(default=200, ge=1)
    # Per client address, for callers without a known token: `auth_failure_rate` failed
    # authentications a second, bursts of `auth_failure_burst`; past that 429 before any
    # route runs (`caldera.service.api.strangers`).
    auth_failure_rate: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    auth_failure_burst: int = Field(default=20, ge=1)


class RateLimiter:
    """A token bucket per key (a user, a client address). `take(key)` returns 0 when the
    request may go ahead, else the seconds until it may (for `Retry-After`); `wait(key)` says
    the same without taking. At most `keys` buckets are kept: past that, the full ones (which
    a new bucket would equal) are dropped, so many callers cannot grow it without bound."""

    def __init__(
        self,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        keys: int = 100_000,
    ) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self.keys = keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when)
        self._lock = threading.Lock()

    def wait(self, key: str) -> float:
        now = self.clock()
        with self._lock:
            tokens, when = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * self.rate)
        return 0.0 if tokens >= 1.0 else max((1.0 - tokens) / self.rate, 0.001)

    def _prune(self, now: float) -> None:
        """Drop the buckets that have refilled (caller holds the lock)."""
        if len(self._buckets) < self.keys:
            return
        for key, (tokens, when) in list(self._buckets.items()):
            if tokens + (now - when) * self.rate >= self.burst:
                del self._buckets[key]
        # Still full: forget the oldest tenth (a scan per tenth, not per request).
        for key in list(self._buckets)[: max(0, len(self._buckets) - self.keys * 9 // 10)]:
            del self._buckets[key]

    def take(self, user: str) -> float:
        now = self.clock()
        with self._lock:
            self._prune(now)
            tokens, when = self._buckets.get(user, (self.burst, now))
            tokens = min(self.burst, tokens + (now - when) * self.rate)
            if tokens >= 1.0:
                self._buckets[user] = (tokens - 1.0, now)
                return 0.0
            self._buckets[user] = (tokens, now)
            return max((1.0 - tokens) / self.rate, 0.001)

    @staticmethod
    def retry_after(seconds: float) -> str:
        return str(max(1, math.ceil(seconds)))


class LimitError(RequestError):
    """A request over a limit. `status`: 413 (too large), 400 (over a size limit), 429 (over
    a user's pending-job or rate limit, with `retry_after` seconds)."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def check_sizes(limits: Limits, request: RequestRecord) -> None:
    """The configured size limits of a request. Raises LimitError (400)."""

    def over(message: str) -> LimitError:
        return LimitError(400, message)

    if request.tasks > limits.tasks_per_job:
        raise over(f"tasks: at most {limits.tasks_per_job} per job (limits.tasks_per_job)")
    if request.gpu > limits.gpus_per_task * 1000:
        raise over(f"gpus: at most {limits.gpus_per_task} per task (limits.gpus_per_task)")
    if len(request.name) > limits.name_length:
        raise over(f"name: at most {limits.name_length} characters (limits.name_length)")
    labels = request.labels
    if len(labels) > limits.labels:
        raise over(f"labels: at most {limits.labels} (limits.labels)")
    for key, value in labels.items():
        if len(key) > limits.label_key_length:
            raise over(f"labels: a key is longer than {limits.label_key_length} characters")
        if len(value) > limits.label_value_length:
            raise over(f"labels.{key}: longer than {limits.label_value_length} characters")
    env = request.env
    if len(env) > limits.env_vars:
        raise over(f"env: at most {limits.env_vars} variables (limits.env_vars)")
    if sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items()) > limits.env_bytes:
        raise over(f"env: more than {limits.env_bytes} bytes (limits.env_bytes)")
    if sum(len(a.encode()) + 1 for a in request.command) > limits.command_bytes:
        raise over(f"command: more than {limits.command_bytes} bytes (limits.command_bytes)")


class Admission:
    """Per-user gates before a submission is stored: the submission rate (a token bucket)
    and the number of waiting jobs. `count(user)` asks the database how many of the user's
    jobs wait; it is asked only when the running estimate (the last count plus what was
    accepted since, never an underestimate) reaches the limit."""

    def __init__(
        self,
        limits: Limits,
        count: Callable[[str], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.count = count
        self.rate = RateLimiter(limits.submit_rate, limits.submit_burst, clock)
        self._waiting: dict[str, int] = {}
        self._lock = threading.Lock()

    def admit(self, user: str) -> None:
        """Raises LimitError (429) when `user` may not submit now."""
        wait = self.rate.take(user)
        if wait > 0:
            raise LimitError(
                429,
                f"user {user} submits faster than {self.limits.submit_rate:g}/s "
                "(limits.submit_rate)",
                wait,
            )
        most = self.limits.pending_jobs_per_user
        with self._lock:
            estimate = self._waiting.get(user)
            if estimate is None or estimate + 1 > most:
                estimate = self.count(user)
            if estimate + 1 > most:
                self._waiting[user] = estimate
                raise LimitError(
                    429,
                    f"user {user} has {estimate} jobs waiting, the most allowed "
                    "(limits.pending_jobs_per_user)",
                    10.0,
                )
            self._waiting[user] = estimate + 1
