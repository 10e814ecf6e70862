"""The ``nova_notify`` job: tell Nova how a bind round ended (doc/nova.md).

Queued in the bind's transaction (exosuit/db/nova.py); run by a conductor
worker, never inside an API request. One POST per round carries one
``accelerator-request-bound`` event per ARQ. Outcomes:

* 200, or 207 whatever its per-event codes (422: the server is not on its host
  yet, which is normal when the bind was quick; 404: no such server): done,
  the refused events are logged and never sent again;
* 404 or 422 for the whole request (no server took any event): done, with a
  warning;
* Nova unreachable, 5xx, 401/403: the attempt fails and the worker retries it
  with backoff (``[conductor] backoff_base`` …, up to ``max_attempts``).

A job that succeeded never runs again, so each resolution reaches Nova once.
The one exception is a conductor that dies after Nova answered and before it
recorded the outcome: the job then runs again when its lease expires and Nova
gets the same events twice, which it tolerates (it waits for events by tag).
"""

from __future__ import annotations

import datetime as dt
import logging

from oslo_config import cfg

from exosuit.db import Connection, models
from exosuit.db import arqs as arqs_db
from exosuit.db import jobs as jobs_db
from exosuit.db import nova as nova_db
from exosuit.jobs import JobContext, JobKind, RetryLater, Service
from exosuit.nova import client
from exosuit.schemas import JSONObject

__all__ = ["EVENT_NAME", "JOB_KINDS", "SERVICES", "events_of", "notify", "nova_client"]

EVENT_NAME = "accelerator-request-bound"

LOG = logging.getLogger(__name__)

TIMEOUT_REASON = (
    "the host did not report the work this bind needs done within [DEFAULT] bind_timeout"
)


def nova_client(conf: cfg.ConfigOpts) -> client.NovaClient | None:
    """The Nova client of ``[nova]``; None when no auth plugin is configured there."""
    adapter = client.make_adapter(conf)
    return None if adapter is None else client.NovaClient(adapter)


def notify(ctx: JobContext, payload: JSONObject) -> None:
    """Send the round's events to Nova (after its deadline if some ARQs still wait)."""
    instance = payload["instance_uuid"]
    waiting = [a["uuid"] for a in payload["arqs"] if a["status"] is None]
    if waiting:
        deadline = dt.datetime.fromisoformat(payload["deadline"])
        left = (deadline - models.utcnow()).total_seconds()
        if left > 0:  # brought forward early (cannot happen unless clocks jump)
            raise RetryLater(f"ARQs {', '.join(waiting)} still wait for their host", delay=left)
        if not ctx.heartbeat():
            return
        payload = ctx.db.write(_time_out, ctx.job_id, payload, waiting)
    statuses = [(a["uuid"], a["status"]) for a in payload["arqs"]]
    nova = ctx.services["nova"]
    if nova is None:
        LOG.debug(
            "no auth_type in [nova]: Nova is not told that the ARQs of instance %s resolved (%s)",
            instance,
            statuses,
        )
        return
    if not ctx.heartbeat():  # another worker may run this job now: let it send
        return
    answer = nova.external_events(events_of(instance, statuses))
    _log(instance, answer)


def _time_out(
    conn: Connection, job_id: int | None, payload: JSONObject, waiting: list[str]
) -> JSONObject:
    """Fail the binds still waiting at the deadline and record every status in this
    job, so that a retry (Nova unreachable) tells Nova the same thing."""
    states = arqs_db.time_out_binds(conn, payload["instance_uuid"], waiting, reason=TIMEOUT_REASON)
    for arq in payload["arqs"]:
        if arq["status"] is None:
            bound = states.get(arq["uuid"]) == arqs_db.BOUND
            arq["status"] = nova_db.COMPLETED if bound else nova_db.FAILED
    if job_id is not None:
        jobs_db.set_payload(conn, job_id, payload, state=jobs_db.RUNNING)
    return payload


def events_of(instance_uuid: str, statuses: list[tuple[str, str]]) -> list[JSONObject]:
    """The body's ``events``: one ``accelerator-request-bound`` event per ARQ."""
    return [
        {"name": EVENT_NAME, "server_uuid": instance_uuid, "tag": arq_uuid, "status": status}
        for arq_uuid, status in statuses
    ]


def _log(instance: str, answer: client.EventsAnswer) -> None:
    refused = answer.refused
    if not refused:
        LOG.info(
            "Nova took the %d accelerator-request-bound event(s) of instance %s",
            len(answer.events),
            instance,
        )
        return
    codes = ", ".join(f"{e.get('tag')}: {e.get('code')}" for e in refused)
    if answer.status in (200, 207) and all(e.get("code") == 422 for e in refused):
        # The server is not on its host yet: nova-compute reads the ARQs when it gets there.
        LOG.info(
            "Nova answered %s for instance %s; not on a host yet (%s): not resent",
            answer.status,
            instance,
            codes,
        )
    else:
        LOG.warning(
            "Nova answered %s for instance %s and did not take event(s) %s%s: not resent",
            answer.status,
            instance,
            codes,
            f" ({answer.detail})" if answer.detail else "",
        )


JOB_KINDS = (JobKind(nova_db.NOTIFY, notify),)
SERVICES = (Service("nova", nova_client),)
