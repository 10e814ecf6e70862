"""The Kubernetes API calls Exosuit's code makes, found in the code, as RBAC names them.

``calls_in_code`` reads exosuit/kubernetes/ and exosuit/kubelet/ (their syntax trees):
the API classes of the ``kubernetes`` client they build (``client.ResourceV1Api(…)``)
and every call of one of those classes' API methods (``list_resource_slice``,
``read_node`` …). Each method's HTTP method and path come from the client itself (the
request its ``_<method>_serialize`` builds), and ``rbac`` turns a request into the
(API group, resource, verb) an RBAC rule must grant.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

__all__ = ["ApiCall", "Permission", "SOURCES", "calls_in_code", "rbac"]

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (ROOT / "exosuit" / "kubernetes", ROOT / "exosuit" / "kubelet")
_REQUEST = re.compile(r"method='(\w+)',\s*resource_path='([^']+)'")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
# Each API method's three forms (the plain one, the answer with its status and headers,
# the raw response), and the client's own request calls, which no method names.
_VARIANTS = ("", "_with_http_info", "_without_preload_content")
_RAW = {"call_api", "param_serialize"}


@dataclass(frozen=True, order=True)
class Permission:
    group: str
    resource: str
    verb: str


@dataclass(frozen=True)
class ApiCall:
    """One call in the code: where, which method of which API class, its request."""

    where: str
    api: str
    method: str
    http_method: str
    path: str
    watch: bool

    @property
    def permission(self) -> Permission:
        return rbac(self.http_method, self.path, watch=self.watch)


def rbac(http_method: str, path: str, *, watch: bool = False) -> Permission:
    """The permission a request needs: its path (a template of the client's or a real
    one) gives the group and the resource (``resource/subresource``), its method and
    whether it names one object give the verb."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":  # the core group: /api/v1/…
        group, rest = "", parts[2:]
    else:  # /apis/<group>/<version>/…
        group, rest = parts[1], parts[3:]
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    one = len(rest) > 1
    if http_method == "GET":
        verb = "watch" if watch else ("get" if one else "list")
    elif http_method == "DELETE":
        verb = "delete" if one else "deletecollection"
    else:
        verb = _VERBS[http_method]
    return Permission(group, resource, verb)


def _api_classes() -> dict[str, type]:
    found = {name: getattr(client, name) for name in dir(client) if name.endswith("Api")}
    return {
        name: value
        for name, value in found.items()
        if inspect.isclass(value) and value.__module__.startswith("kubernetes.client.api.")
    }


def _request(api: type, method: str) -> tuple[str, str]:
    serialize = getattr(api, f"_{method}_serialize")
    [(http_method, path)] = _REQUEST.findall(inspect.getsource(serialize))
    return http_method, path


def calls_in_code() -> list[ApiCall]:
    """Every call of a Kubernetes API method in the plugin's and the publisher's code.
    A method name that two of the API classes the code builds both have is an error
    (the call's class could not be told)."""
    classes = _api_classes()
    files = sorted(p for source in SOURCES for p in source.glob("*.py"))
    trees = {path: ast.parse(path.read_text()) for path in files}
    built = {
        node.func.attr
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in classes
    }
    methods: dict[str, list[str]] = {}
    for name in sorted(built):
        for method in dir(classes[name]):
            if hasattr(classes[name], f"_{method}_serialize"):
                for variant in _VARIANTS:
                    methods.setdefault(method + variant, []).append(name)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr in _RAW:
                raise AssertionError(f"{path}:{node.lineno}: a request this scan cannot name")
            owners = methods.get(node.func.attr)
            if not owners:
                continue
            if len(owners) > 1:
                raise AssertionError(f"{path}:{node.lineno}: {node.func.attr} of {owners}?")
            method = node.func.attr
            for variant in _VARIANTS[1:]:
                method = method.removesuffix(variant)
            http_method, template = _request(classes[owners[0]], method)
            watch = any(
                k.arg == "watch" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                for k in node.keywords
            )
            found.append(
                ApiCall(
                    f"{path.relative_to(ROOT)}:{node.lineno}",
                    owners[0],
                    method,
                    http_method,
                    template,
                    watch,
                )
            )
    return found
