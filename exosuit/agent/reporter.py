"""Sends snapshots to ``PUT /agent/v1/hosts/{hostname}/inventory``.

The HTTP session is passed in: a keystoneauth1 session (with an auth plugin in a
cloud), the agent's own plain one against a noauth ``http://`` API (agent/http.py),
or whatever tests and `exosuit serve` hand it; so is the clock that dates a
``Retry-After``.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import logging
import math
from collections.abc import Mapping
from typing import Any, Protocol

from exosuit.agent.clock import Clock, SystemClock
from exosuit.agent.http import transport_errors, unreachable

LOG = logging.getLogger(__name__)

__all__ = [
    "DESIRED_GENERATION_HEADER",
    "ReportOutcome",
    "Reporter",
    "Response",
    "Session",
    "put_outcome",
    "retry_after_seconds",
]

# The header a report names the generation of the desired state its agent holds with.
DESIRED_GENERATION_HEADER = "Exosuit-Desired-Generation"


class Response(Protocol):
    """The parts of a keystoneauth (requests) response the reporter reads."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class Session(Protocol):
    """The part of a keystoneauth1 session the reporter uses
    (exosuit.agent.transport.WsgiSession is another)."""

    @property
    def auth(self) -> object:
        """The auth plugin, or None: requests go unauthenticated."""
        ...

    def put(
        self,
        url: str,
        *,
        json: dict[str, Any],
        raise_exc: bool,
        timeout: float,
        authenticated: bool,
        headers: Mapping[str, str] | None = None,
    ) -> Response: ...


@dataclasses.dataclass(frozen=True)
class ReportOutcome:
    """What happened to one report.

    kind: ``ok`` (acknowledged), ``resend`` (the API does not know the hash:
    send the whole snapshot), ``retry`` (try again after ``retry_after``
    seconds, or with backoff when None), ``rejected`` (the API refused this
    snapshot; sending it again will not help). ``desired_state``: the answer's, None
    when it had none (the API says the one the agent holds is current).
    """

    kind: str
    detail: str = ""
    retry_after: float | None = None
    changed: bool = False
    desired_state: dict[str, Any] | None = None


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (RFC 9110: delay-seconds or an
    HTTP date), counted from ``now`` (epoch seconds); never negative. None when the
    header is absent or unreadable (the caller backs off instead), or not a finite
    number (``inf`` would be a wait without end)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


class Reporter:
    def __init__(
        self,
        session: Session,
        endpoint: str,
        hostname: str,
        timeout: float = 30.0,
        *,
        clock: Clock | None = None,
    ) -> None:
        """``clock``: the time an HTTP-date ``Retry-After`` is counted from (default:
        the real one; the agent passes the clock it waits with)."""
        self.session = session
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.endpoint = endpoint.rstrip("/")  # the API's base URL, without /v2
        self.url = f"{self.endpoint}/agent/v1/hosts/{hostname}/inventory"
        self.timeout = timeout

    def report(self, body: dict[str, Any], *, holds: int | None = None) -> ReportOutcome:
        """PUT one body (a full snapshot, or ``{"schema_version", "hash"}`` only).
        ``holds``: the generation of the desired state the agent holds, sent as the
        ``Exosuit-Desired-Generation`` header (the API then leaves the desired state out
        of an unchanged answer while that generation is current; an older API ignores
        the header and always sends it)."""
        headers = {DESIRED_GENERATION_HEADER: str(holds)} if holds is not None else None
        try:
            response = self.session.put(
                self.url,
                json=body,
                raise_exc=False,
                timeout=self.timeout,
                authenticated=self.session.auth is not None,
                headers=headers,
            )
        except transport_errors() as error:
            what = "API unreachable" if unreachable(error) else "API call failed"
            return ReportOutcome("retry", f"{what}: {error}")
        status = response.status_code
        if status == 200:
            data = response.json()
            desired = data.get("desired_state")
            return ReportOutcome(
                "ok",
                changed=bool(data.get("changed")),
                desired_state=desired if isinstance(desired, dict) else None,
            )
        detail = f"{status} {_message(response)}"
        if status == 412:
            return ReportOutcome("resend", detail)
        if status in (429, 503):
            return ReportOutcome(
                "retry",
                detail,
                retry_after=retry_after_seconds(
                    response.headers.get("Retry-After"), self.clock.now()
                ),
            )
        if status >= 500 or status in (401, 403, 408):
            return ReportOutcome("retry", detail)
        return ReportOutcome("rejected", detail)


def _message(response: Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    inner = body.get("error_message") if isinstance(body, dict) else None
    if isinstance(inner, str):
        try:
            fault = json.loads(inner)
        except ValueError:
            return inner
        # JSON that is not an object (a bare string, a number): the text as it is.
        return str(fault.get("faultstring", inner)) if isinstance(fault, dict) else inner
    return str(body)[:500]


# Answers after which an outcome is sent again later (the API may take it then).
RETRIED_STATUSES = frozenset({401, 403, 408, 429})


def put_outcome(
    session: Session, url: str, body: dict[str, Any], *, timeout: float, what: str
) -> Response | None:
    """PUT the outcome of host work (an activation, a partition layout, a CDI spec, a
    bind's slice) to the API: its response once the API has settled it (any answer but
    the ones below; a 400 will not be taken later either), or None when the API was
    unreachable or answered 5xx, 401, 403, 408 or 429, logged as ``what`` "is not
    reported yet …; will retry": the caller keeps the outcome and sends it again."""
    try:
        response = session.put(
            url, json=body, raise_exc=False, timeout=timeout, authenticated=session.auth is not None
        )
    except transport_errors() as error:
        LOG.warning("%s is not reported yet (%s); will retry", what, error)
        return None
    status = response.status_code
    if status >= 500 or status in RETRIED_STATUSES:
        LOG.warning("%s is not reported yet (%s %s); will retry", what, status, response.text[:200])
        return None
    return response
