"""The REST API (FastAPI); its OpenAPI schema is served at /openapi.json and /docs.

Every route but /healthz and /metrics needs `Authorization: Bearer TOKEN`. Errors are JSON
`{"detail": "one line"}` with a typed status: 400 invalid request, 401 no or bad token,
403 not allowed (a queue not in the token's list, `critical` without permission, another
user's job, an admin route), 404 no such job or queue, 409 the queue is not Open or the job
has already ended.

- `schemas`  request and resource models, rows → resources
- `auth`     bearer token → `Principal`
- `jobs`     /v1/jobs: submit, list, show, cancel, events of a job
- `logs`     /v1/jobs/{id}/logs, followed as a stream
- `cluster`  /v1/whoami, /v1/events, /v1/cluster, /v1/queues
- `app`      `create_app`: the routers, the error format, the Server-Timing header

The routes see the runtime only through `caldera.service.views.ServiceRuntime`.
"""

from caldera.service.api.app import API_VERSION, ServerTiming, create_app
from caldera.service.api.schemas import JobOut, JobRequest, iso

__all__ = ["API_VERSION", "JobOut", "JobRequest", "ServerTiming", "create_app", "iso"]
