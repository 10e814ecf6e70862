"""WSGI entry point for external servers (uwsgi, mod_wsgi, gunicorn):
``exosuit.wsgi:application``. The configuration file is read from
``EXOSUIT_CONFIG_FILE`` (optional)."""

from __future__ import annotations

import os
from wsgiref.types import WSGIApplication

from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf


def _make() -> WSGIApplication:
    files = [f for f in os.environ.get("EXOSUIT_CONFIG_FILE", "").split(os.pathsep) if f]
    return loadapp(make_conf(files))


application = _make()
