"""An in-process stand-in for the agent's HTTP session: calls a WSGI app directly.

``exosuit serve`` runs the real agent against its own API in the same process
with it; tests may too. It offers the one method the reporter uses.
"""

from __future__ import annotations

import json

import webob

__all__ = ["WsgiSession"]


class WsgiSession:
    auth = None

    def __init__(self, app) -> None:
        self.app = app

    def put(self, url: str, *, json: dict, **_ignored) -> webob.Response:
        path = url.split("://", 1)[-1]
        path = path[path.index("/"):] if "/" in path else "/"
        request = webob.Request.blank(path, method="PUT", body=_dumps(json),
                                      content_type="application/json")
        return _Response(request.get_response(self.app))


def _dumps(data) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


class _Response:
    """The parts of a requests/keystoneauth response the reporter reads."""

    def __init__(self, response: webob.Response) -> None:
        self.status_code = response.status_code
        self.headers = response.headers
        self.text = response.text
        self._body = response.body

    def json(self):
        return json.loads(self._body)
