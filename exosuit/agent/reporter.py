"""Sends snapshots to ``PUT /agent/v1/hosts/{hostname}/inventory``.

The HTTP session is a keystoneauth1 session passed in (with an auth plugin in
a cloud, without one against a noauth API), so tests and `exosuit serve`
hand it whatever they like.
"""

from __future__ import annotations

import dataclasses
import email.utils
import time

from keystoneauth1 import exceptions as ksa_exc

__all__ = ["ReportOutcome", "Reporter"]


@dataclasses.dataclass(frozen=True)
class ReportOutcome:
    """What happened to one report.

    kind: ``ok`` (acknowledged), ``resend`` (the API does not know the hash:
    send the whole snapshot), ``retry`` (try again after ``retry_after``
    seconds, or with backoff when None), ``rejected`` (the API refused this
    snapshot; sending it again will not help).
    """

    kind: str
    detail: str = ""
    retry_after: float | None = None
    changed: bool = False
    desired_state: dict | None = None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Reporter:
    def __init__(self, session, endpoint: str, hostname: str, timeout: float = 30.0) -> None:
        self.session = session
        self.url = f"{endpoint.rstrip('/')}/agent/v1/hosts/{hostname}/inventory"
        self.timeout = timeout

    def report(self, body: dict) -> ReportOutcome:
        """PUT one body (a full snapshot, or ``{"schema_version", "hash"}`` only)."""
        try:
            response = self.session.put(
                self.url,
                json=body,
                raise_exc=False,
                timeout=self.timeout,
                authenticated=self.session.auth is not None,
            )
        except ksa_exc.ConnectionError as error:
            return ReportOutcome("retry", f"API unreachable: {error}")
        except ksa_exc.ClientException as error:
            return ReportOutcome("retry", f"API call failed: {error}")
        status = response.status_code
        if status == 200:
            data = response.json()
            return ReportOutcome("ok", changed=bool(data.get("changed")),
                                 desired_state=data.get("desired_state") or {})
        detail = f"{status} {_message(response)}"
        if status == 412:
            return ReportOutcome("resend", detail)
        if status in (429, 503):
            return ReportOutcome("retry", detail,
                                 retry_after=_retry_after(response.headers.get("Retry-After")))
        if status >= 500 or status in (401, 403, 408):
            return ReportOutcome("retry", detail)
        return ReportOutcome("rejected", detail)


def _message(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    inner = body.get("error_message") if isinstance(body, dict) else None
    if isinstance(inner, str):
        try:
            import json

            return json.loads(inner).get("faultstring", inner)
        except ValueError:
            return inner
    return str(body)[:500]
