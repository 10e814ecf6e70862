"""A small stand-in for the Kubernetes API server, for the plugin's tests (no cluster
runs here).

It answers, over real HTTP on loopback, exactly the requests the plugin makes, at
their real paths, with the API server's JSON shapes:

* ``GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}``: the
  ResourceClaims a test put in ``claims``;
* ``GET /api/v1/nodes/{name}``: the Nodes of ``nodes`` (their uid owns the slices);
* ``GET|POST /apis/resource.k8s.io/v1/resourceslices`` (list with a ``fieldSelector``
  of ``spec.nodeName``/``spec.driver``/``spec.pool.name``; create with
  ``generateName``), ``PUT|DELETE …/resourceslices/{name}`` (replace only at the
  current ``resourceVersion``, else 409 Conflict).

Every ResourceSlice written is checked as the API server would refuse it (422
Invalid): against the published schema's part in data/resourceslice-v1.schema.json
(``slice_errors``), with the kubernetes client's model classes as a second reader.
Writes are recorded in ``writes``.

What it leaves out (doc/kubernetes.md says so too): authentication and RBAC, watches,
the scheduler (a test writes a claim's allocation itself), the API server's CEL
validation and its defaulting and normalization (quantities are stored as written),
ownerReference garbage collection, the kubelet's own deletion of a node's slices.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
from kubernetes import client

SCHEMA = json.loads((Path(__file__).parent / "data" / "resourceslice-v1.schema.json").read_text())
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

_CLAIM = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)$")
_NODE = re.compile(r"^/api/v1/nodes/([^/]+)$")
_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
_SLICE = re.compile(r"^/apis/resource\.k8s\.io/v1/resourceslices/([^/]+)$")
_SELECTABLE = {
    "spec.nodeName": ("nodeName",),
    "spec.driver": ("driver",),
    "spec.pool.name": ("pool", "name"),
}


def model_round_trip(data: dict[str, Any], klass: str) -> Any:
    """``data`` read into the client's model ``klass`` and written out again (what the
    model knows of it; an unknown or misspelt field is lost on the way)."""
    api = client.ApiClient()
    model = api.deserialize(json.dumps(data), klass, "application/json")
    return api.sanitize_for_serialization(model)


def slice_errors(body: dict[str, Any]) -> list[str]:
    """Why the API server would refuse this ResourceSlice (empty: it would not)."""
    errors = [
        f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
        for e in _VALIDATOR.iter_errors(body)
    ]
    for index, device in enumerate((body.get("spec") or {}).get("devices") or ()):
        if not isinstance(device, dict):
            continue
        combined = len(device.get("attributes") or {}) + len(device.get("capacity") or {})
        if combined > 32:
            errors.append(f"spec/devices/{index}: {combined} attributes and capacities > 32")
    if not errors:
        try:
            if model_round_trip(body, "V1ResourceSlice") != body:
                errors.append("the model classes do not read it back whole")
        except ValueError as error:  # pydantic's ValidationError
            errors.append(f"the model classes refuse it: {error}")
    return errors


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _selected(item: dict[str, Any], selector: str) -> bool:
    spec = item.get("spec") or {}
    for term in filter(None, selector.split(",")):
        key, _, wanted = term.partition("=")
        value: Any = spec
        for part in _SELECTABLE[key]:
            value = (value or {}).get(part)
        if value != wanted:
            return False
    return True


@dataclass
class KubeStandIn:
    """The stand-in's state; ``start()`` serves it at ``url``."""

    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: list[tuple[str, str, Any]] = field(default_factory=list)
    refused: list[tuple[str, list[str]]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    _version: int = 0
    _server: ThreadingHTTPServer | None = None

    # -- what a test puts in --------------------------------------------------------------

    def add_node(self, name: str) -> str:
        uid = str(uuid.uuid4())
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "uid": uid, "resourceVersion": "1"},
        }
        return uid

    def add_claim(self, namespace: str, name: str, results: list[dict[str, str]] | None) -> str:
        """A ResourceClaim, allocated ``results`` (``request``, ``driver``, ``pool``,
        ``device`` each) as the scheduler writes them; None: not allocated."""
        uid = str(uuid.uuid4())
        claim: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": r, "exactly": {"deviceClassName": "exosuit-fpga"}}
                        for r in sorted({r["request"] for r in results or ()})
                    ]
                }
            },
            "status": {},
        }
        if results is not None:
            claim["status"] = {"allocation": {"devices": {"results": results}}}
        self.claims[(namespace, name)] = claim
        return uid

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that points at the stand-in (no credentials: it asks for none)."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
                    "users": [{"name": "plugin", "user": {}}],
                    "contexts": [
                        {"name": "standin", "context": {"cluster": "standin", "user": "plugin"}}
                    ],
                    "current-context": "standin",
                }
            )
        )
        return path

    def slices_of(self, node: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.slices.values() if s["spec"].get("nodeName") == node]

    # -- serving ---------------------------------------------------------------------------

    def start(self) -> KubeStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length)) if length else None

            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                body = self._body() if method in ("POST", "PUT") else None
                with standin.lock:
                    standin.requests.append((method, parts.path))
                    code, answer = standin._answer(method, parts.path, parts.query, body)
                self._send(code, answer)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _answer(self, method: str, path: str, query: str, body: Any) -> tuple[int, Any]:
        if method == "GET" and (match := _CLAIM.match(path)):
            claim = self.claims.get((match[1], match[2]))
            if claim is None:
                return 404, _status(404, "NotFound", f'resourceclaims "{match[2]}" not found')
            return 200, claim
        if method == "GET" and (match := _NODE.match(path)):
            node = self.nodes.get(match[1])
            if node is None:
                return 404, _status(404, "NotFound", f'nodes "{match[1]}" not found')
            return 200, node
        if path == _SLICES and method == "GET":
            selector = parse_qs(query).get("fieldSelector", [""])[0]
            items = [s for _, s in sorted(self.slices.items()) if _selected(s, selector)]
            return 200, {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSliceList",
                "metadata": {"resourceVersion": str(self._version)},
                "items": items,
            }
        if path == _SLICES and method == "POST":
            return self._write("POST", None, body)
        if match := _SLICE.match(path):
            name = match[1]
            if name not in self.slices:
                return 404, _status(404, "NotFound", f'resourceslices "{name}" not found')
            if method == "PUT":
                return self._write("PUT", name, body)
            if method == "DELETE":
                self.writes.append(("DELETE", name, None))
                gone = self.slices.pop(name)
                return 200, gone
        return 404, _status(404, "NotFound", f"the stand-in does not serve {method} {path}")

    def _write(self, method: str, name: str | None, body: Any) -> tuple[int, Any]:
        errors = slice_errors(body) if isinstance(body, dict) else ["not an object"]
        if errors:
            self.refused.append((method, errors))
            return 422, _status(422, "Invalid", "; ".join(errors))
        stored = json.loads(json.dumps(body))
        meta = stored["metadata"]
        if method == "POST":
            if meta.get("name") in self.slices:
                return 409, _status(409, "AlreadyExists", f"{meta['name']} already exists")
            name = meta.get("name") or meta["generateName"] + uuid.uuid4().hex[:5]
            meta.update(name=name, uid=str(uuid.uuid4()))
        else:
            current = self.slices[name]
            if (
                meta.get("name") != name
                or meta.get("resourceVersion") != (current["metadata"]["resourceVersion"])
            ):
                return 409, _status(409, "Conflict", "the object has been modified")
            meta["uid"] = current["metadata"]["uid"]
        meta["resourceVersion"] = self._next_version()
        self.slices[name] = stored
        self.writes.append((method, name, stored))
        return (201 if method == "POST" else 200), stored
