"""Notifications on a message bus: the audit trail's records, as oslo.messaging sends them.

The conductor's ``audit_publish`` job (exosuit/conductor/audit.py) hands each pending
record of exosuit/db/audit.py to ``Publisher.publish``, which sends one oslo-style
notification (priority INFO, event type ``exosuit.<object type>.<action>``, the record
as payload) through ``[oslo_messaging_notifications] driver`` to
``transport_url``'s ``topics`` (doc/audit.md).

NOTE: oslo.messaging's ``Notifier`` logs a message it could not deliver and returns as
if it had (its drivers catch every error), so a broker that is down would lose the
notification. The ``messagingv2`` (and ``messaging``) drivers are therefore spoken
here as their ``notify`` does, through the same notification transport and message
format, but letting the error reach the job, which retries: the record stays pending
until the broker took it. Other drivers (``log``, ``routing``, ``test``) go through
``Notifier`` as they are: best effort.
"""

from __future__ import annotations

import datetime as dt
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from oslo_config import cfg

with warnings.catch_warnings():
    # oslo.messaging imports oslo.service, which imports eventlet (unused here), and both
    # warn that it is deprecated at import.
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
    import oslo_messaging
    from oslo_messaging import opts as messaging_opts

__all__ = ["GROUP", "SERVICE", "Publisher", "options", "payload_of", "register_opts"]

GROUP = "oslo_messaging_notifications"
# The conductor's service name for the publisher (exosuit/jobs.py Service).
SERVICE = "notifier"
PRIORITY = "INFO"
# The drivers whose delivery errors reach the caller, and their message format versions.
_RELIABLE = {"messagingv2": 2.0, "messaging": 1.0}
# Reconnection attempts of one publish when [oslo_messaging_notifications] retry is -1
# (for ever): a job must not hold its worker for ever; the job retries with backoff.
DEFAULT_RETRY = 2


def options() -> list[cfg.Opt]:
    """oslo.messaging's ``[oslo_messaging_notifications]`` options (driver,
    transport_url, topics, retry): the very objects oslo.messaging registers itself, so
    that registering them twice is no conflict."""
    for group, opts in messaging_opts.list_opts():
        if group == GROUP:
            return list(opts)
    raise LookupError(f"oslo.messaging declares no [{GROUP}] options")


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register ``options()`` in ``[oslo_messaging_notifications]`` (a no-op when done)."""
    conf.register_opts(options(), group=GROUP)


def payload_of(event: Mapping[str, Any]) -> dict[str, Any]:
    """A record of exosuit/db/audit.py as a notification's payload (and the API shows it)."""
    created = event["created_at"]
    return {
        "id": event["id"],
        "time": created.isoformat() + "Z" if isinstance(created, dt.datetime) else created,
        "action": event["action"],
        "object_type": event["object_type"],
        "object_uuid": event["object_uuid"],
        "host": event["host"],
        "actor": event["actor"],
        "user_id": event["user_id"],
        "project_id": event["project_id"],
        "request_id": event["request_id"],
        "before": event["before"],
        "after": event["after"],
    }


class Publisher:
    """Sends notifications through ``[oslo_messaging_notifications]``; one per conductor
    process (its transport's connection pool is shared by the worker threads)."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        register_opts(conf)
        group = conf[GROUP]
        self.drivers = [d for d in group.driver if d and d != "noop"]
        if not self.drivers:
            raise RuntimeError(
                f"[{GROUP}] driver is not set in this conductor's configuration: the API's "
                "records wait for a conductor that has it"
            )
        self.topics = list(group.topics)
        self.retry = group.retry if group.retry >= 0 else DEFAULT_RETRY
        self.publisher_id = f"exosuit.{conf.host}"
        self.transport = oslo_messaging.get_notification_transport(conf)
        others = [d for d in self.drivers if d not in _RELIABLE]
        self._notifier = None
        if others:
            self._notifier = oslo_messaging.Notifier(
                self.transport,
                publisher_id=self.publisher_id,
                driver=others,
                topics=self.topics,
                retry=self.retry,
            )

    def publish(self, event_type: str, payload: Mapping[str, Any]) -> None:
        """Send one notification; raises when a ``messaging``/``messagingv2`` driver
        could not deliver it (the record stays pending and the job retries)."""
        ctxt = {
            "request_id": payload.get("request_id"),
            "user_id": payload.get("user_id"),
            "project_id": payload.get("project_id"),
        }
        message = {
            "message_id": str(uuid.uuid4()),
            "publisher_id": self.publisher_id,
            "event_type": event_type,
            "priority": PRIORITY,
            "payload": dict(payload),
            "timestamp": str(dt.datetime.now(dt.UTC).replace(tzinfo=None)),
        }
        for driver in self.drivers:
            version = _RELIABLE.get(driver)
            if version is None:
                continue
            for topic in self.topics:
                target = oslo_messaging.Target(topic=f"{topic}.{PRIORITY.lower()}")
                # The call MessagingDriver.notify makes, without its catch-all.
                self.transport._send_notification(
                    target, ctxt, message, version=version, retry=self.retry
                )
        if self._notifier is not None:
            self._notifier.info(ctxt, event_type, dict(payload))

    def close(self) -> None:
        self.transport.cleanup()
