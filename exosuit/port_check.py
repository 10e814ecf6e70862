"""Whether ``exosuit serve`` could listen where it is asked to, before anything is built.

``make run`` calls it with the system's Python before it makes the virtualenv (so: the
standard library only, and no import of the rest of the package): a taken port is said at
once, with the option that picks another, not after the install and the migrations.
``exosuit serve`` says the same when it cannot bind (exosuit/serve.py).

    python3 -m exosuit.port_check [--host H] [--port N] [other serve options …]
"""

from __future__ import annotations

import argparse
import errno
import socket
import sys

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "main", "taken"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6666


def taken(host: str, port: int) -> OSError | None:
    """Why (host, port) cannot be listened on, or None when it can (port 0: any)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As cheroot does: a port left in TIME_WAIT by a stopped server is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error
    return None


def hint(host: str, port: int, error: OSError) -> str:
    """The message for a port that cannot be listened on, naming the way out."""
    why = "it is taken (another Exosuit?)" if error.errno == errno.EADDRINUSE else str(error)
    other = port + 1 if port else DEFAULT_PORT
    return (
        f"exosuit serve: cannot listen on {host}:{port}: {why}. Pick another port: "
        f'make run ARGS="--port {other}" (exosuit serve --port {other}).'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m exosuit.port_check")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    known, _ = parser.parse_known_args(argv)
    error = taken(known.host, known.port)
    if error is None:
        return 0
    print(hint(known.host, known.port, error), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
