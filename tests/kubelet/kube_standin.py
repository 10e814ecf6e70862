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
Invalid): against the published schema of Kubernetes 1.34 and 1.35
(``kubernetes-validate --strict``, tests/helpers/kube_schemas.py), against the
validation rules the API reference states in prose and the schema cannot carry (names,
lengths, counts, one value per attribute, exactly one node selection: ``api_rules``),
and with the kubernetes client's model classes as a third reader (``slice_errors``).
The ResourceClaims a test adds are checked against the same schemas.
Writes are recorded in ``writes``.

Authorization is that of the plugin's ClusterRole in deploy/kubernetes/base/rbac.yaml:
a request it does not grant (its group, resource and verb as RBAC names them) is
answered 403 Forbidden and recorded in ``forbidden``, so every call the tests make the
plugin send is one the deployed plugin may make.

What it leaves out (doc/kubernetes.md says so too): authentication, watches,
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

import yaml
from kubernetes import client

from tests.deploy.kube_calls import Permission, rbac
from tests.helpers.kube_schemas import schema_errors

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "base" / "rbac.yaml"

_CLAIM = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)$")
_NODE = re.compile(r"^/api/v1/nodes/([^/]+)$")
_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
_SLICE = re.compile(r"^/apis/resource\.k8s\.io/v1/resourceslices/([^/]+)$")
_SELECTABLE = {
    "spec.nodeName": ("nodeName",),
    "spec.driver": ("driver",),
    "spec.pool.name": ("pool", "name"),
}


def plugin_permissions() -> frozenset[Permission]:
    """What the plugin's ClusterRole grants."""
    [role] = [d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole"]
    return frozenset(
        Permission(group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )


def model_round_trip(data: dict[str, Any], klass: str) -> Any:
    """``data`` read into the client's model ``klass`` and written out again (what the
    model knows of it; an unknown or misspelt field is lost on the way)."""
    api = client.ApiClient()
    model = api.deserialize(json.dumps(data), klass, "application/json")
    return api.sanitize_for_serialization(model)


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A C identifier of at most 32 characters, optionally after a DNS subdomain and a slash.
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z_][A-Za-z0-9_]{0,31}$"
)
# resource.Quantity: a number with a binary, decimal or exponent suffix.
_QUANTITY = re.compile(
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_NODE_SELECTIONS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def api_rules(body: dict[str, Any]) -> list[str]:
    """What the API server's validation of a ResourceSlice refuses beyond its schema
    (the rules resource.k8s.io/v1's field documentation states)."""
    errors = []
    meta = body.get("metadata") or {}
    if not (meta.get("name") or meta.get("generateName")):
        errors.append("metadata: name or generateName is required")
    if meta.get("name") and not _DNS_SUBDOMAIN.match(meta["name"]):
        errors.append(f"metadata/name: {meta['name']!r} is not a DNS subdomain")
    spec = body.get("spec") or {}
    selections = [k for k in _NODE_SELECTIONS if spec.get(k) not in (None, False, "")]
    if len(selections) != 1:
        errors.append(f"spec: exactly one of {', '.join(_NODE_SELECTIONS)}, not {selections}")
    if not _DNS_SUBDOMAIN.match(str(spec.get("driver"))) or len(str(spec.get("driver"))) > 63:
        errors.append(f"spec/driver: {spec.get('driver')!r} is not a DNS subdomain of 63")
    if spec.get("nodeName") and not _DNS_SUBDOMAIN.match(spec["nodeName"]):
        errors.append(f"spec/nodeName: {spec['nodeName']!r} is not a DNS subdomain")
    pool = spec.get("pool") or {}
    pool_name = str(pool.get("name"))
    if len(pool_name) > 253 or not all(map(_DNS_SUBDOMAIN.match, pool_name.split("/"))):
        errors.append(f"spec/pool/name: {pool_name!r} is not DNS subdomains joined by /")
    if not (isinstance(pool.get("resourceSliceCount"), int) and pool["resourceSliceCount"] >= 1):
        errors.append("spec/pool/resourceSliceCount: must be at least 1")
    if not (isinstance(pool.get("generation"), int) and pool["generation"] >= 0):
        errors.append("spec/pool/generation: must be at least 0")
    devices = spec.get("devices") or []
    if len(devices) > 128:
        errors.append(f"spec/devices: {len(devices)} devices > 128")
    for index, device in enumerate(devices):
        where = f"spec/devices/{index}"
        if not _DNS_LABEL.match(str(device.get("name"))) or len(str(device.get("name"))) > 63:
            errors.append(f"{where}/name: {device.get('name')!r} is not a DNS label")
        attributes = device.get("attributes") or {}
        capacity = device.get("capacity") or {}
        if len(attributes) + len(capacity) > 32:
            count = len(attributes) + len(capacity)
            errors.append(f"{where}: {count} attributes and capacities > 32")
        for name in [*attributes, *capacity]:
            if not _QUALIFIED.match(name):
                errors.append(f"{where}: {name!r} is not a qualified name")
        for name, value in attributes.items():
            given = [k for k, v in (value or {}).items() if v is not None]
            if len(given) != 1:
                errors.append(f"{where}/attributes/{name}: exactly one value, not {given}")
            for kind in ("string", "version"):
                if len(str((value or {}).get(kind) or "")) > 64:
                    errors.append(f"{where}/attributes/{name}: {kind} longer than 64")
        for name, value in capacity.items():
            if not _QUANTITY.match(str((value or {}).get("value"))):
                errors.append(f"{where}/capacity/{name}: {value} is not a quantity")
    return errors


def slice_errors(body: dict[str, Any]) -> list[str]:
    """Why the API server would refuse this ResourceSlice (empty: it would not)."""
    errors = schema_errors(body) or api_rules(body)
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
    granted: frozenset[Permission] = field(default_factory=plugin_permissions)
    forbidden: list[tuple[str, str]] = field(default_factory=list)
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
        # What the API server would hold: a claim the tests make up is a real one.
        errors = schema_errors(claim)
        if errors:
            raise ValueError(f"not a ResourceClaim of Kubernetes: {errors}")
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
                watch = "true" in parse_qs(parts.query).get("watch", [])
                with standin.lock:
                    standin.requests.append((method, parts.path))
                    if rbac(method, parts.path, watch=watch) in standin.granted:
                        code, answer = standin._answer(method, parts.path, parts.query, body)
                    else:
                        standin.forbidden.append((method, parts.path))
                        code, answer = 403, _status(403, "Forbidden", f"{method} {parts.path}")
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
