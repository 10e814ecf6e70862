"""A Nova that only knows ``POST /v2.1/os-server-external-events``, over real HTTP.

It implements the documented contract of that call (Nova's api-ref and its
controller, ``nova/api/openstack/compute/server_external_events.py``) closely
enough that Exosuit cannot tell the difference:

* the token: ``X-Auth-Token`` must be valid (a static set of tokens, or a real
  Keystone: then every token is validated there, as keystonemiddleware would),
  else 401; the caller needs the ``admin`` or ``service`` role (the default
  policy), else 403; a configured ``require_service_token`` also needs a valid
  ``X-Service-Token`` carrying the ``service`` role;
* the microversion: ``OpenStack-API-Version: compute X.Y`` (or the legacy
  ``X-OpenStack-Nova-API-Version``); none means 2.1. The
  ``accelerator-request-bound`` event name exists from 2.82 on: before, 400;
* the body: ``{"events": [...]}``, at least one event; each with ``name`` and
  ``server_uuid`` (a UUID), optional ``status`` (failed | completed |
  in-progress) and ``tag`` (string up to 255); nothing else (400 otherwise);
* the answer: per event, 404 for an unknown server, 422 for a server not on a
  host yet, 200 otherwise (accepted: recorded in ``accepted``). 200 when all
  were accepted, else 207 with each event's ``code`` and ``status``. When none
  was accepted, Nova's controller answers 404 for the whole request; real Nova
  34 was observed to answer 207 with per-event 422 instead
  (reference/nova-observed.md), so ``none_accepted_status`` chooses.

Failures can be injected (``fail_next(n, status)``). Every request is recorded
(``requests``), whatever the answer.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeNova", "ReceivedRequest", "keystone_tokens", "static_tokens"]

PATH = "/v2.1/os-server-external-events"
EVENT_NAMES_2_1 = {
    "network-changed",
    "network-vif-plugged",
    "network-vif-unplugged",
    "network-vif-deleted",
}
# name → first microversion that accepts it
LATER_EVENT_NAMES = {
    "volume-extended": (2, 51),
    "power-update": (2, 76),
    "accelerator-request-bound": (2, 82),
    "volume-reimaged": (2, 93),
}
STATUSES = {"failed", "completed", "in-progress"}
MAX_VERSION = (2, 100)

# token → roles (None: invalid)
TokenCheck = Callable[[str], "set[str] | None"]


def static_tokens(tokens: dict[str, set[str]]) -> TokenCheck:
    return tokens.get


def keystone_tokens(session, auth_url: str) -> TokenCheck:
    """Validate each token with Keystone (``GET /v3/auth/tokens``), as Nova's
    keystonemiddleware does with Nova's own service credentials (``session``);
    valid answers are cached, as keystonemiddleware caches them."""
    cache: dict[str, set[str]] = {}
    lock = threading.Lock()

    def check(token: str) -> set[str] | None:
        if not token:
            return None
        with lock:
            if token in cache:
                return cache[token]
        r = session.get(
            f"{auth_url}/auth/tokens", headers={"X-Subject-Token": token}, raise_exc=False
        )
        if r.status_code != 200:
            return None
        roles = {role["name"] for role in r.json()["token"].get("roles", [])}
        with lock:
            cache[token] = roles
        return roles

    return check


@dataclasses.dataclass
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: object
    status: int
    answer: object


class FakeNova:
    """Start with ``start()``; ``url`` is the compute endpoint (``…/v2.1``)."""

    def __init__(
        self,
        check_token: TokenCheck,
        *,
        require_service_token: bool = False,
        none_accepted_status: int = 207,
    ) -> None:
        self.check_token = check_token
        self.require_service_token = require_service_token
        self.none_accepted_status = none_accepted_status
        # server uuid → its host (None: not on a host yet)
        self.servers: dict[str, str | None] = {}
        self.requests: list[ReceivedRequest] = []
        self.accepted: list[dict] = []
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- control -----------------------------------------------------------------------

    def add_server(self, server_uuid: str, host: str | None = "compute-1") -> None:
        with self._lock:
            self.servers[server_uuid] = host

    def fail_next(self, count: int, status: int = 500) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def wait_for_requests(self, count: int, timeout: float = 20.0) -> list[ReceivedRequest]:
        """Block until at least ``count`` requests arrived; all requests so far."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(
                    f"Nova got {len(self.requests)} request(s), not {count}, "
                    f"in {timeout} s: {self.requests}"
                )
            return list(self.requests)

    def events_for(self, server_uuid: str) -> list[dict]:
        """The events Nova accepted or refused for a server, in arrival order, as sent."""
        with self._lock:
            return [
                e
                for r in self.requests
                if r.status in (200, 207)
                for e in r.body["events"]
                if e.get("server_uuid") == server_uuid
            ]

    def start(self) -> FakeNova:
        nova = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                nova._handle(self)

            def do_GET(self):  # noqa: N802
                nova._reply(self, 404, {"itemNotFound": {"code": 404, "message": "Not found"}})

            def log_message(self, format, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}/v2.1"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-nova",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    # -- the API -----------------------------------------------------------------------

    def _reply(self, http, status: int, body) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        http.send_response(status)
        http.send_header("Content-Type", "application/json")
        http.send_header("Content-Length", str(len(data)))
        http.send_header("OpenStack-API-Version", "compute 2.82")
        http.end_headers()
        http.wfile.write(data)

    def _handle(self, http) -> None:
        length = int(http.headers.get("Content-Length") or 0)
        raw = http.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k: v for k, v in http.headers.items()}
        status, answer = self._answer(http.path, headers, body)
        with self._changed:
            self.requests.append(ReceivedRequest("POST", http.path, headers, body, status, answer))
            self._changed.notify_all()
        self._reply(http, status, answer)

    def _answer(self, path: str, headers: dict[str, str], body) -> tuple[int, object]:
        if path != PATH:
            return 404, _fault("itemNotFound", 404, f"No route for {path}")
        roles = self.check_token(headers.get("X-Auth-Token") or "")
        if roles is None:
            return 401, {
                "error": {
                    "code": 401,
                    "title": "Unauthorized",
                    "message": "The request you have made requires authentication.",
                }
            }
        if self.require_service_token:
            service_roles = self.check_token(headers.get("X-Service-Token") or "")
            if service_roles is None or "service" not in service_roles:
                return 401, {
                    "error": {
                        "code": 401,
                        "title": "Unauthorized",
                        "message": "A valid service token is required.",
                    }
                }
        if not roles & {"admin", "service"}:
            return 403, _fault(
                "forbidden",
                403,
                "Policy doesn't allow os_compute_api:os-server-external-events:create",
            )
        with self._lock:
            if self._failures:
                failure = self._failures.pop(0)
                return failure, _fault("computeFault", failure, "Injected failure")
        version = _microversion(headers)
        if version is None:
            return 400, _fault("badRequest", 400, "Invalid microversion header")
        if version > MAX_VERSION:
            return 406, _fault("notAcceptable", 406, "Version not supported")
        error = _invalid(body, version)
        if error:
            return 400, _fault(
                "badRequest", 400, f"Invalid input for field/attribute events. {error}"
            )
        answered = []
        accepted = []
        with self._lock:
            for event in body["events"]:
                event = dict(event)
                event.setdefault("status", "completed")
                event.setdefault("tag", None)
                if event["server_uuid"] not in self.servers:
                    event.update(status="failed", code=404)
                elif self.servers[event["server_uuid"]] is None:
                    event.update(status="failed", code=422)
                else:
                    event["code"] = 200
                    accepted.append(event)
                answered.append(event)
            self.accepted.extend(accepted)
        if not accepted and self.none_accepted_status == 404:
            return 404, _fault("itemNotFound", 404, "No instances found for any event")
        return (200 if len(accepted) == len(answered) else 207), {"events": answered}


def _fault(kind: str, code: int, message: str) -> dict:
    return {kind: {"code": code, "message": message}}


def _microversion(headers: dict[str, str]) -> tuple[int, int] | None:
    value = None
    for name, header in headers.items():
        if name.lower() == "openstack-api-version":
            service, _, number = header.strip().partition(" ")
            if service.lower() == "compute":
                value = number.strip()
        elif name.lower() == "x-openstack-nova-api-version" and value is None:
            value = header.strip()
    if value is None:
        return (2, 1)
    if value == "latest":
        return MAX_VERSION
    match = re.fullmatch(r"(\d+)\.(\d+)", value)
    return (int(match[1]), int(match[2])) if match else None


def _invalid(body, version: tuple[int, int]) -> str | None:
    """Why the body breaks Nova's schema at ``version`` (None: it does not)."""
    if not isinstance(body, dict) or set(body) != {"events"}:
        return "The body must be an object with only 'events'."
    events = body["events"]
    if not isinstance(events, list) or not events:
        return "'events' must be a non-empty list."
    names = set(EVENT_NAMES_2_1) | {n for n, v in LATER_EVENT_NAMES.items() if version >= v}
    for event in events:
        if not isinstance(event, dict):
            return f"{event!r} is not an object."
        extra = set(event) - {"name", "server_uuid", "status", "tag"}
        if extra:
            return f"Additional properties are not allowed ({sorted(extra)})."
        if event.get("name") not in names:
            return f"{event.get('name')!r} is not one of {sorted(names)}."
        try:
            uuid.UUID(str(event.get("server_uuid")))
        except ValueError:
            return f"{event.get('server_uuid')!r} is not a 'uuid'."
        if "status" in event and event["status"] not in STATUSES:
            return f"{event['status']!r} is not one of {sorted(STATUSES)}."
        if "tag" in event and (not isinstance(event["tag"], str) or len(event["tag"]) > 255):
            return f"{event['tag']!r} is not a string of at most 255 characters."
    return None
