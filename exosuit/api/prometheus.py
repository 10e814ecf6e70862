"""The history from a Prometheus that scrapes /metrics (``[dashboard] prometheus_url``).

Its HTTP API's ``GET /api/v1/query_range`` (``query``, ``start``, ``end``, ``step``)
answers ``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric":
{labels}, "values": [[unix time, "value"], ...]}]}}``, or ``{"status": "error",
"errorType", "error"}``. The series are the ones /metrics exposes
(exosuit/api/handlers/metrics.py): ``exosuit_device_<figure>`` for a device's usage and
``exosuit_device_attach_handles`` (``state`` free or in_use) for the allocation, each
labelled with the device (``device_uuid``, ``type``, ``vendor``, ``model`` …). Several
API replicas scraped give the same series once per instance: a device's figure is
their maximum, and a model's handles the sum over its devices of that maximum.

Whatever goes wrong on the way (no answer, not JSON, an error status) is one
``PrometheusError`` naming the URL and what it said.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from exosuit.db.usage_history import ModelHistory

__all__ = ["MAX_POINTS", "Prometheus", "PrometheusError"]

# The points a series of one answer has at most (Prometheus refuses more than 11,000).
MAX_POINTS = 720
# The per-device families of /metrics that are not a usage figure.
_NOT_FIGURES = "exosuit_device_(info|attach_handles|holder)"
_PREFIX = "exosuit_device_"

Points = list[tuple[dt.datetime, float]]


class PrometheusError(Exception):
    """Prometheus did not answer a query, or answered an error."""


def _time(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).replace(tzinfo=None)


@dataclasses.dataclass(frozen=True)
class Prometheus:
    """A Prometheus at ``url`` (its base URL), asked with ``timeout`` seconds."""

    url: str
    timeout: float

    def query_range(
        self, query: str, *, window: int, step: int, now: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """(labels, [(unix time, value)]) of each series ``query`` gives over the last
        ``window`` seconds at ``step``; values that are not finite numbers left out."""
        params = {"query": query, "start": now - window, "end": now, "step": step}
        address = f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        body = self._get(address)
        if body.get("status") != "success":
            raise PrometheusError(
                f"Prometheus at {self.url} refused the query {query!r}: "
                f"{body.get('errorType', '?')}: {body.get('error', body)}"
            )
        found = []
        for series in body.get("data", {}).get("result", []):
            points = []
            for at, value in series.get("values", []):
                number = float(value)
                if math.isfinite(number):
                    points.append((float(at), number))
            found.append((dict(series.get("metric", {})), points))
        return found

    def _get(self, address: str) -> dict[str, Any]:
        request = urllib.request.Request(address, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                text = response.read()
        except urllib.error.HTTPError as error:
            # 400 and 422 carry the error document; anything else is said as it is.
            text = error.read()
            try:
                body: dict[str, Any] = json.loads(text)
            except ValueError:
                raise PrometheusError(
                    f"Prometheus at {self.url} answered {error.code}: {text[:500]!r}"
                ) from error
            return body
        except (OSError, ValueError) as error:  # URLError, timeouts, a malformed URL
            raise PrometheusError(f"Prometheus at {self.url} did not answer: {error}") from error
        try:
            decoded: dict[str, Any] = json.loads(text)
        except ValueError as error:
            raise PrometheusError(
                f"Prometheus at {self.url} answered something that is not JSON: {text[:200]!r}"
            ) from error
        return decoded

    def device_usage(
        self, device_uuid: str, *, window: int, step: int, now: float
    ) -> dict[str, Points]:
        """figure → [(time, value)] of the device's ``exosuit_device_<figure>`` series
        (``device_uuid`` must be a UUID: it is put in the query as it is)."""
        query = (
            f'{{__name__=~"{_PREFIX}.+", __name__!~"{_NOT_FIGURES}", device_uuid="{device_uuid}"}}'
        )
        merged: dict[str, dict[float, float]] = {}
        for labels, points in self.query_range(query, window=window, step=step, now=now):
            figure = labels.get("__name__", "").removeprefix(_PREFIX)
            into = merged.setdefault(figure, {})
            for at, value in points:
                into[at] = max(value, into.get(at, value))
        return {
            figure: [(_time(at), value) for at, value in sorted(points.items())]
            for figure, points in sorted(merged.items())
        }

    def allocation(self, *, window: int, step: int, now: float) -> list[ModelHistory]:
        """Each device model's attach handles held and free over time."""
        query = (
            "sum by (type, vendor, model, state) (max by (device_uuid, type, vendor, model, "
            "state) (exosuit_device_attach_handles))"
        )
        models: dict[tuple[str, str, str], dict[float, list[float]]] = {}
        for labels, points in self.query_range(query, window=window, step=step, now=now):
            key = (labels.get("type", ""), labels.get("vendor", ""), labels.get("model", ""))
            column = 0 if labels.get("state") == "in_use" else 1
            series = models.setdefault(key, {})
            for at, value in points:
                series.setdefault(at, [0.0, 0.0])[column] += value
        return [
            ModelHistory(
                *key, [(_time(at), held, free) for at, (held, free) in sorted(series.items())]
            )
            for key, series in sorted(models.items())
        ]
