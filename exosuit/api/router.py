"""The whole URL map on one screen, and the dispatcher that walks it.

Paths without a ``/v2`` prefix are served by v2, as Cyborg does. A known path
with an unknown method gets a 405 with ``Allow`` generated from this table.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

__all__ = ["ROUTES", "Router"]

# path template → {method: "module:function"} (modules under exosuit.api.handlers)
ROUTES: dict[str, dict[str, str]] = {
    "/": {"GET": "root:root"},
    "/v2": {"GET": "root:v2"},
    "/v2/device_profiles": {
        "GET": "device_profiles:list_profiles",
        "POST": "device_profiles:create_profile",
        "DELETE": "device_profiles:delete_profiles",
    },
    "/v2/device_profiles/{ident}": {
        "GET": "device_profiles:get_profile",
        "DELETE": "device_profiles:delete_profile",
    },
    "/v2/accelerator_requests": {
        "GET": "arqs:list_arqs",
        "POST": "arqs:create_arqs",
        "PATCH": "arqs:patch_arqs",
        "DELETE": "arqs:delete_arqs",
    },
    "/v2/accelerator_requests/{uuid}": {
        "GET": "arqs:get_arq",
        # openstacksdk and python-cyborgclient PATCH here with the bind/unbind map.
        "PATCH": "arqs:patch_arq",
        "DELETE": "arqs:delete_arq",
    },
    "/v2/deployables": {"GET": "deployables:list_deployables"},
    "/v2/deployables/{uuid}": {"GET": "deployables:get_deployable"},
    "/v2/deployables/{uuid}/program": {"PATCH": "deployables:program_deployable"},
    "/v2/devices": {"GET": "devices:list_devices"},
    "/v2/devices/{uuid}": {"GET": "devices:get_device"},
    "/v2/devices/{uuid}/enable": {"POST": "devices:enable_device"},
    "/v2/devices/{uuid}/disable": {"POST": "devices:disable_device"},
    "/v2/attributes": {
        "GET": "attributes:list_attributes",
        "POST": "attributes:create_attribute",
    },
    "/v2/attributes/{uuid}": {
        "GET": "attributes:get_attribute",
        "DELETE": "attributes:delete_attribute",
    },
    "/agent/v1/hosts/{hostname}/inventory": {"PUT": "agent:put_inventory"},
    "/agent/v1/hosts/{hostname}/accelerator_requests/{uuid}": {
        "PUT": "agent_arqs:put_host_work",
    },
    "/healthz": {"GET": "root:healthz"},
    "/metrics": {"GET": "metrics:metrics"},
}

# Top-level path segments that are not re-routed under /v2.
_TOP_LEVEL = ("v2", "agent", "healthz", "metrics")

Handler = Callable


class Route:
    __slots__ = ("template", "regex", "methods", "versioned", "allow")

    def __init__(self, template: str, methods: dict[str, Handler]) -> None:
        self.template = template
        pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
        self.regex = re.compile(f"^{pattern}$")
        self.methods = methods
        # Everything under /v2 carries microversion headers (Cyborg's v2 controller).
        self.versioned = template == "/v2" or template.startswith("/v2/")
        self.allow = ", ".join(sorted(methods))


def _resolve(spec: str) -> Handler:
    module_name, _, func_name = spec.partition(":")
    module = importlib.import_module(f"exosuit.api.handlers.{module_name}")
    return getattr(module, func_name)


def normalize_path(path: str) -> str:
    if len(path) > 1:
        path = path.rstrip("/") or "/"
    if path != "/":
        first = path.split("/", 2)[1]
        if first not in _TOP_LEVEL:
            path = "/v2" + path
    return path


class Router:
    def __init__(self, routes: dict[str, dict[str, str]] | None = None) -> None:
        routes = ROUTES if routes is None else routes
        self._static: dict[str, Route] = {}
        self._dynamic: list[Route] = []
        for template, methods in routes.items():
            route = Route(template, {m: _resolve(spec) for m, spec in methods.items()})
            if "{" in template:
                self._dynamic.append(route)
            else:
                self._static[template] = route

    def match(self, path: str) -> tuple[Route, dict[str, str]] | None:
        route = self._static.get(path)
        if route is not None:
            return route, {}
        for route in self._dynamic:
            m = route.regex.match(path)
            if m:
                return route, m.groupdict()
        return None
