"""A real HTTP server around a WSGI app, on a free loopback port, in a thread."""

from __future__ import annotations

import contextlib
import threading

from cheroot import wsgi as cheroot_wsgi


@contextlib.contextmanager
def serve_wsgi(app, threads: int = 8):
    """Yield the base URL of ``app`` served over HTTP; stop the server afterwards."""
    server = cheroot_wsgi.Server(("127.0.0.1", 0), app, numthreads=threads)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    host, port = server.bind_addr[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        thread.join(timeout=5)
