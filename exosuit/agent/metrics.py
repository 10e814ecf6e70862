"""The agent's own ``/metrics`` for a node-local scrape ([agent] metrics_port; off by
default; doc/metrics.md): this host's devices and their live figures as the agent last
read them (at its last discovery), its report age and its reports.

Fresher than the API's copy (kept at most once per ``[api] report_age_resolution``) and
there while the API is not. Its names start with ``exosuit_agent_`` so that a Prometheus
scraping both the API and the agents never adds a figure up twice; labels are the
API's device labels but ``device_uuid`` (the API gives that; join on ``hostname`` and
``pci_address``).

Standard library only, and started only when configured: ``socketserver`` costs the
agent about 1 MB, where ``http.server`` or prometheus-client would cost 8 to 12 MB. One
thread answers one request at a time (a scrape is a few kilobytes), each connection
bounded by ``TIMEOUT``.
"""

from __future__ import annotations

import logging
import math
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

LOG = logging.getLogger(__name__)

__all__ = ["DEVICE_LABELS", "MetricsServer", "Observed", "render", "serve_metrics"]

DEVICE_LABELS = ("hostname", "type", "vendor", "model", "pci_address")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TIMEOUT = 5.0
# The largest request head read (request line and headers).
_MAX_HEAD = 16 * 1024


class Observed(Protocol):
    """What the agent exposes (exosuit.agent.service.Agent): its host name, its state
    (the devices last seen, when the API last acknowledged a report), the figures of its
    last discovery, its acknowledged reports and its clock."""

    @property
    def hostname(self) -> str: ...

    @property
    def reports(self) -> int: ...

    @property
    def usage(self) -> Mapping[str, Mapping[str, float]]: ...

    @property
    def state(self) -> Any: ...

    @property
    def clock(self) -> Any: ...


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]
) -> Iterator[str]:
    yield f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"
    for labels, value in samples:
        pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        text = repr(float(value)) if math.isfinite(value) else "NaN"
        yield f"{name}{{{pairs}}} {text}\n" if pairs else f"{name} {text}\n"


def render(agent: Observed) -> str:
    """The agent's metrics in Prometheus' text format (0.0.4)."""
    devices: dict[str, dict[str, str]] = {}
    info: list[tuple[dict[str, str], float]] = []
    for identity, seen in sorted(agent.state.devices.items()):
        device = seen.get("device") or {}
        labels = {"hostname": agent.hostname}
        for name in DEVICE_LABELS[1:]:
            labels[name] = str(device.get(name) or "")
        devices[identity] = labels
        info.append(({**labels, "driver": str(seen.get("found_by") or "")}, 1.0))
    figures: dict[str, list[tuple[dict[str, str], float]]] = {}
    for identity, read in sorted(agent.usage.items()):
        if identity in devices:
            for figure, value in read.items():
                figures.setdefault(figure, []).append((devices[identity], value))
    parts = list(
        _family(
            "exosuit_agent_device_info",
            "gauge",
            "A device the agent reports (always 1), with the driver that found it.",
            info,
        )
    )
    for figure in sorted(figures):
        if figure != "info":
            parts += _family(
                "exosuit_agent_device_" + figure,
                "gauge",
                "A device's live figure as its driver read it at the agent's last "
                "discovery (doc/drivers.md, Usage).",
                figures[figure],
            )
    acknowledged = agent.state.acknowledged_at
    if acknowledged is not None:
        age = max(0.0, agent.clock.now() - acknowledged)
        parts += _family(
            "exosuit_agent_report_age_seconds",
            "gauge",
            "Seconds since the API last acknowledged this agent's report.",
            [({"hostname": agent.hostname}, age)],
        )
    parts += _family(
        "exosuit_agent_reports_total",
        "counter",
        "Reports the API acknowledged since the agent started.",
        [({"hostname": agent.hostname}, float(agent.reports))],
    )
    return "".join(parts)


class _Handler(socketserver.StreamRequestHandler):
    timeout = TIMEOUT
    server: MetricsServer

    def handle(self) -> None:
        try:
            head = self.rfile.readline(_MAX_HEAD)
            method, path = (head.decode("latin-1").split() + ["", ""])[:2]
            while True:  # the headers: read and ignored
                line = self.rfile.readline(_MAX_HEAD)
                if line in (b"\r\n", b"\n", b""):
                    break
            status, body = self._answer(method, path.split("?")[0])
            self.wfile.write(
                f"HTTP/1.0 {status}\r\nContent-Type: "
                f"{CONTENT_TYPE if status.startswith('200') else 'text/plain'}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass  # the scraper went away: nothing to answer

    def _answer(self, method: str, path: str) -> tuple[str, bytes]:
        if path != "/metrics":
            return "404 Not Found", b"Only /metrics is here.\n"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"GET /metrics\n"
        try:
            return "200 OK", self.server.render().encode()
        except Exception:  # a metric that cannot be read must not stop the agent
            LOG.exception("the agent's /metrics could not be rendered")
            return "500 Internal Server Error", b"See the agent's log.\n"


class MetricsServer(socketserver.TCPServer):
    """``GET /metrics`` on ``(host, port)`` (port 0: any free one; ``address`` says which),
    answered with ``render()``, in a daemon thread once started."""

    allow_reuse_address = True

    def __init__(self, host: str, port: int, render: Callable[[], str]) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.address_family = family
        super().__init__((host, port), _Handler)
        self.render = render
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread = threading.Thread(
            target=self.serve_forever, name="exosuit-agent-metrics", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def serve_metrics(host: str, port: int, agent: Observed) -> MetricsServer:
    """``agent``'s /metrics on ``host:port``, started; SystemExit if it cannot listen."""
    try:
        server = MetricsServer(host, port, lambda: render(agent)).start()
    except OSError as error:
        raise SystemExit(
            f"exosuit-agent: cannot serve /metrics on {host}:{port}: {error}"
        ) from None
    LOG.info("the agent's metrics at http://%s:%d/metrics", *server.address)
    return server
