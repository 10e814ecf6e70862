"""WSGI entry point for external servers (uwsgi, mod_wsgi, gunicorn):
``exosuit.wsgi:application``. The configuration file is read from
``EXOSUIT_CONFIG_FILE`` (optional).

``exosuit.wsgi:asgi_application`` is the same application for an ASGI server (exosuit-api
runs it under granian): each request's body is read whole before a thread runs it
(exosuit/api/asgi_bridge.py)."""

from __future__ import annotations

import os
from wsgiref.types import WSGIApplication

from exosuit.api.asgi_bridge import WsgiOverAsgi
from exosuit.api.deploy import loadapp
from exosuit.conf import ApiSettings, make_conf


def _make() -> WSGIApplication:
    files = [f for f in os.environ.get("EXOSUIT_CONFIG_FILE", "").split(os.pathsep) if f]
    return loadapp(make_conf(files))


application = _make()


def _asgi(app: WSGIApplication) -> WsgiOverAsgi:
    api = ApiSettings.from_conf(app.application.conf)  # type: ignore[attr-defined]
    return WsgiOverAsgi(
        app,
        threads=api.threads,
        body_timeout=api.body_timeout,
        max_body=max(api.max_body_size, api.max_agent_body_size),
    )


asgi_application = _asgi(application)
