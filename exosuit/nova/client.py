"""The two Nova calls Exosuit makes: ``POST /os-server-external-events`` (the
conductor tells Nova how a bind ended) and ``GET /servers/{id}`` (whether Nova manages
a server a caller attaches devices to: doc/nova.md "Attach and detach").

``NovaClient`` takes its keystoneauth ``Adapter`` as a parameter: in a cloud it
is built from ``[nova]`` (service type ``compute``, any auth plugin, the catalog
or ``endpoint_override``) by ``make_adapter``, wrapped with a service token from
``[service_user]`` when ``send_service_user_token`` is set, as Nova wraps its
own outgoing calls; for a caller's question it carries the caller's token instead
(``user_auth``), as Nova calls Cyborg for a user. Tests hand it one pointed at a
Nova on loopback. Every call names compute microversion 2.82, the first that knows
the ``accelerator-request-bound`` event. keystoneauth's and Nova's errors are
translated here, at one boundary, into ``exosuit.exceptions.NovaError`` and
``NovaUnavailable``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import requests
from keystoneauth1 import adapter as ksa_adapter
from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import plugin as ksa_plugin
from keystoneauth1 import service_token
from oslo_config import cfg

from exosuit import exceptions
from exosuit.schemas import JSONObject

__all__ = ["MICROVERSION", "EventsAnswer", "NovaClient", "make_adapter"]

LOG = logging.getLogger(__name__)

MICROVERSION = "2.82"
PATH = "/os-server-external-events"
SERVER = "/servers/%s"


@dataclasses.dataclass(frozen=True)
class EventsAnswer:
    """What Nova said: ``status`` 200 (every event accepted), 207 (``events`` carry
    their own ``code``: 404 unknown server, 422 server not on a host yet, 400), or
    404/422 for the whole request (no server took any event)."""

    status: int
    events: list[JSONObject]
    detail: str = ""

    @property
    def refused(self) -> list[JSONObject]:
        """The events Nova did not accept (each with its ``code``)."""
        if self.status not in (200, 207):
            return self.events
        return [e for e in self.events if e.get("code", 200) != 200]


class NovaClient:
    """Nova's compute API through a keystoneauth Adapter (thread-safe, as its session)."""

    def __init__(self, adapter: ksa_adapter.Adapter) -> None:
        self.adapter = adapter

    def external_events(self, events: list[JSONObject]) -> EventsAnswer:
        """POST the events in one request.

        Returns Nova's answer for 200, 207, and for a whole-request 404 or 422
        (retrying would not change them). Raises ``NovaUnavailable`` when Nova
        cannot be reached, times out, answers 5xx, 401 or 403 (worth retrying),
        and ``NovaError`` for any other answer (a request Nova finds wrong).
        """
        method, url = "POST", PATH
        try:
            response = self.adapter.post(
                url, json={"events": events}, microversion=MICROVERSION, raise_exc=False
            )
        except ksa_exc.ClientException as error:  # unreachable, timeout, no endpoint, auth
            raise exceptions.NovaUnavailable(method=method, url=url, detail=str(error)) from error
        status: int = response.status_code
        if status in (200, 207):
            return EventsAnswer(status, _events_of(response, events))
        detail = _detail(response)
        if status in (404, 422):
            return EventsAnswer(status, [dict(e, code=status) for e in events], detail)
        if status >= 500 or status in (401, 403, 408, 429):
            raise exceptions.NovaUnavailable(method=method, url=url, detail=f"{status}: {detail}")
        raise exceptions.NovaError(method=method, url=url, status=status, detail=detail)

    def server(self, uuid: str) -> JSONObject | None:
        """Nova's server ``uuid`` as the adapter's user sees it (``GET /servers/{id}``),
        None when Nova answers 404 (no such server, or not the user's). Raises
        ``NovaUnavailable`` (unreachable, timed out, 5xx, 401, 403) and ``NovaError``
        (any other answer)."""
        method, url = "GET", SERVER % uuid
        try:
            response = self.adapter.get(url, microversion=MICROVERSION, raise_exc=False)
        except ksa_exc.ClientException as error:  # unreachable, timeout, no endpoint, auth
            raise exceptions.NovaUnavailable(method=method, url=url, detail=str(error)) from error
        status: int = response.status_code
        if status == 200:
            try:
                server: Any = response.json()["server"]
            except (ValueError, KeyError, TypeError):
                server = None
            if isinstance(server, dict):
                return server
            raise exceptions.NovaError(
                method=method, url=url, status=status, detail="no server in the answer"
            )
        if status == 404:
            return None
        detail = _detail(response)
        if status >= 500 or status in (401, 403, 408, 429):
            raise exceptions.NovaUnavailable(method=method, url=url, detail=f"{status}: {detail}")
        raise exceptions.NovaError(method=method, url=url, status=status, detail=detail)


def _events_of(response: requests.Response, sent: list[JSONObject]) -> list[JSONObject]:
    """Nova's per-event answers; the events as sent (code 200) if the body has none."""
    try:
        events: Any = response.json().get("events")
    except (ValueError, AttributeError):
        events = None
    if not isinstance(events, list):
        return [dict(e, code=200) for e in sent]
    return events


def _detail(response: requests.Response) -> str:
    """Nova's fault message (``{"itemNotFound": {"message": …}}``), or the raw text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for fault in body.values():
            if isinstance(fault, dict) and "message" in fault:
                return " ".join(str(fault["message"]).split())
    return " ".join((response.text or "").split())[:500]


def make_adapter(
    conf: cfg.ConfigOpts, user_auth: ksa_plugin.BaseAuthPlugin | None = None
) -> ksa_adapter.Adapter | None:
    """A keystoneauth Adapter for Nova from ``[nova]``, or None when no auth plugin is
    configured there (standalone: nobody to notify, no server of Nova's).

    ``user_auth``: the caller's (keystonemiddleware's ``keystone.token_auth``): the calls
    carry the caller's token, and find Nova in its catalog, instead of ``[nova]``'s
    user (Nova shows a server to its project and to admins only). With
    ``[service_user] send_service_user_token``, every call also carries a service
    token (``X-Service-Token``) from ``[service_user]``'s credentials.
    """
    if not conf.nova.auth_type:
        return None
    auth = user_auth or ks_loading.load_auth_from_conf_options(conf, "nova")
    if auth is None:  # [nova] auth_section names a group without an auth_type
        return None
    if conf.service_user.send_service_user_token:
        service_auth = None
        if conf.service_user.auth_type:
            service_auth = ks_loading.load_auth_from_conf_options(conf, "service_user")
        if service_auth is None:
            raise exceptions.NovaUnavailable(
                method="POST",
                url=PATH,
                detail="[service_user] send_service_user_token is set but [service_user] "
                "has no auth_type",
            )
        auth = service_token.ServiceTokenAuthWrapper(user_auth=auth, service_auth=service_auth)
    session = ks_loading.load_session_from_conf_options(conf, "nova", auth=auth)
    return ks_loading.load_adapter_from_conf_options(conf, "nova", session=session, auth=auth)
