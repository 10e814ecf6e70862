"""Serve Nova's compute API (``nova.wsgi.osapi_compute``) for the tests; run with .venv-nova.

    python serve_nova_api.py CONFIG_DIR PORT

CONFIG_DIR holds ``nova.conf`` and ``api-paste.ini`` (Nova reads them through
``OS_NOVA_CONFIG_DIR``). Nova's WSGI application runs in threading mode; the standard
library's WSGI server, one thread per request, serves it on 127.0.0.1:PORT.
"""

from __future__ import annotations

import os
import socketserver
import sys
from wsgiref import simple_server


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _Quiet(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):  # Nova logs every request itself
        pass


def main() -> int:
    config_dir, port = sys.argv[1], int(sys.argv[2])
    os.environ["OS_NOVA_CONFIG_DIR"] = config_dir
    del sys.argv[1:]  # Nova parses the command line with oslo.config
    from nova.wsgi.osapi_compute import application

    server = simple_server.make_server(
        "127.0.0.1", port, application, server_class=_Server, handler_class=_Quiet
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
