"""An in-process stand-in for the agent's HTTP session: calls a WSGI app directly.

``exosuit serve`` runs the real agent against its own API in the same process
with it; tests may too. It offers the methods the reporter and the program reconciler
use: ``put`` (inventory, program reports) and ``get`` (desired state, image data).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import webob

__all__ = ["WsgiSession"]

# A WSGI application (PEP 3333): environ, start_response → the body's chunks.
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class WsgiSession:
    """Implements [exosuit.agent.reporter.Session] without a network."""

    auth = None

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def put(
        self,
        url: str,
        *,
        json: dict[str, Any],
        headers: Mapping[str, str] | None = None,
        **_ignored: object,
    ) -> _Response:
        request = webob.Request.blank(
            _path(url),
            method="PUT",
            body=_dumps(json),
            content_type="application/json",
            headers=dict(headers or {}),
        )
        return _Response(request.get_response(self.app))

    def get(
        self, url: str, *, headers: Mapping[str, str] | None = None, **_ignored: object
    ) -> _Response:
        request = webob.Request.blank(_path(url), method="GET", headers=dict(headers or {}))
        return _Response(request.get_response(self.app))


def _path(url: str) -> str:
    """The path (and query) of ``url``: the app answers whatever host it names."""
    path = url.split("://", 1)[-1]
    return path[path.index("/") :] if "/" in path else "/"


def _dumps(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


class _Response:
    """The parts of a requests/keystoneauth response the reporter reads."""

    def __init__(self, response: webob.Response) -> None:
        self.status_code: int = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self._body: bytes = response.body

    @property
    def text(self) -> str:
        """The body as text (image data is bytes: decoded only when asked, never fails)."""
        return self._body.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self._body)

    def iter_content(self, chunk_size: int = 65536) -> Iterator[bytes]:
        for start in range(0, len(self._body), chunk_size):
            yield self._body[start : start + chunk_size]

    def close(self) -> None:
        pass
