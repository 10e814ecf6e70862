"""The whole URL map on one screen, and the dispatcher that walks it.

Paths without a ``/v2`` prefix are served by v2, as Cyborg does. A known path
with an unknown method gets a 405 with ``Allow`` generated from this table. Routes
added by a microversion are wrapped by ``since``: below it they are not found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from exosuit.api import openapi
from exosuit.api.handlers import (
    agent,
    agent_activations,
    agent_arqs,
    agent_claims,
    agent_images,
    agent_partitions,
    agent_programs,
    arqs,
    attach_handles,
    attributes,
    audit,
    claims,
    dashboard,
    deployables,
    device_profiles,
    devices,
    discoveries,
    drivers,
    hosts,
    images,
    jobs,
    metrics,
    partitions,
    permissions,
    root,
    servers,
    services,
    summary,
    usage_history,
)

__all__ = ["ROUTES", "STRICT_QUERIES", "Route", "Router", "Since", "since"]

Handler = Callable[..., Any]


class Since(dict[str, Handler]):
    """The methods of a route that exists from microversion ``version`` on (but those
    of ``always``, which a route had before)."""

    def __init__(
        self,
        version: tuple[int, int],
        methods: dict[str, Handler],
        always: dict[str, Handler] | None = None,
    ) -> None:
        super().__init__({**methods, **(always or {})})
        self.version = version
        self.always = frozenset(always or ())


def since(
    version: tuple[int, int],
    methods: dict[str, Handler],
    *,
    always: dict[str, Handler] | None = None,
) -> Since:
    """Routes that exist from microversion ``version`` on. Below it they answer
    exactly as an unknown path does (404 ``exosuit.not_found``, whatever the method:
    Placement's masking). ``always``: methods of the same path that exist in every
    version (a method added to an existing path is masked alone)."""
    return Since(version, methods, always)


# Microversion 2.5 (fleet views): hosts, attach handles, jobs, summary.
V2_5 = (2, 5)
# Microversion 2.6 (programming): a program's state.
V2_6 = (2, 6)
# Microversion 2.7 (devices: activation, services, drivers, discover now).
V2_7 = (2, 7)
# Microversion 2.8 (standalone claims).
V2_8 = (2, 8)
# Microversion 2.9 (running a fleet: health, drain, partitions, audit).
V2_9 = (2, 9)
# Microversion 2.10 (say no to what cannot be honoured; device CRUD, attach and detach).
V2_10 = (2, 10)
# Microversion 2.11 (the console's reads: the caller's permissions, usage and allocation
# history).
V2_11 = (2, 11)

# Microversion 2.10: a GET's unknown query parameter is a 400 (Placement's habit); the
# parameters a handler accepts are the ``query`` of its OPERATIONS entry
# (exosuit/api/describe.py), the same declaration /openapi.json shows.
STRICT_QUERIES = (2, 10)

# path template → {method: handler}
ROUTES: dict[str, dict[str, Handler]] = {
    "/": {"GET": root.root},
    "/v2": {"GET": root.v2},
    "/v2/device_profiles": {
        "GET": device_profiles.list_profiles,
        "POST": device_profiles.create_profile,
        "DELETE": device_profiles.delete_profiles,
    },
    "/v2/device_profiles/{ident}": {
        "GET": device_profiles.get_profile,
        "DELETE": device_profiles.delete_profile,
    },
    "/v2/accelerator_requests": {
        "GET": arqs.list_arqs,
        "POST": arqs.create_arqs,
        "PATCH": arqs.patch_arqs,
        "DELETE": arqs.delete_arqs,
    },
    "/v2/accelerator_requests/{uuid}": {
        "GET": arqs.get_arq,
        # openstacksdk and python-cyborgclient PATCH here with the bind/unbind map.
        "PATCH": arqs.patch_arq,
        "DELETE": arqs.delete_arq,
    },
    "/v2/deployables": {"GET": deployables.list_deployables},
    "/v2/deployables/{uuid}": {"GET": deployables.get_deployable},
    "/v2/deployables/{uuid}/program": since(
        V2_6, {"GET": deployables.get_program}, always={"PATCH": deployables.program_deployable}
    ),
    # openstacksdk's patch_deployable adds the UUID again (doc/compatibility.md).
    "/v2/deployables/{uuid}/program/{again}": {"PATCH": deployables.program_deployable_again},
    "/v2/devices": {"GET": devices.list_devices},
    # Microversion 2.10: a lost device is deleted by hand (doc/devices.md).
    "/v2/devices/{uuid}": since(
        V2_10, {"DELETE": devices.delete_device}, always={"GET": devices.get_device}
    ),
    "/v2/devices/{uuid}/enable": {"POST": devices.enable_device},
    "/v2/devices/{uuid}/disable": {"POST": devices.disable_device},
    # Microversion 2.9: drain (doc/devices.md).
    "/v2/devices/{uuid}/drain": since(V2_9, {"POST": devices.drain_device}),
    "/v2/devices/{uuid}/undrain": since(V2_9, {"POST": devices.undrain_device}),
    # Microversion 2.9: clear a device's health, or hold it back (doc/devices.md, Health).
    "/v2/devices/{uuid}/health": since(V2_9, {"POST": devices.set_device_health}),
    # Microversion 2.9: partition layouts (doc/devices.md, "Partitions").
    "/v2/devices/{uuid}/partitions": since(
        V2_9, {"GET": partitions.get_partitions, "PUT": partitions.set_partitions}
    ),
    # Microversion 2.11: a device's usage over time (doc/dashboard.md, "Charts").
    "/v2/devices/{uuid}/usage_history": since(V2_11, {"GET": usage_history.get_usage_history}),
    "/v2/attributes": {
        "GET": attributes.list_attributes,
        "POST": attributes.create_attribute,
    },
    "/v2/attributes/{uuid}": {
        "GET": attributes.get_attribute,
        "DELETE": attributes.delete_attribute,
    },
    "/v2/hosts": since(V2_5, {"GET": hosts.list_hosts}),
    "/v2/hosts/{hostname}": since(V2_5, {"GET": hosts.get_host}),
    "/v2/hosts/{hostname}/drain": since(V2_9, {"POST": hosts.drain_host}),
    "/v2/hosts/{hostname}/undrain": since(V2_9, {"POST": hosts.undrain_host}),
    "/v2/attach_handles": since(V2_5, {"GET": attach_handles.list_attach_handles}),
    "/v2/attach_handles/{uuid}": since(V2_5, {"GET": attach_handles.get_attach_handle}),
    "/v2/jobs": since(V2_5, {"GET": jobs.list_jobs}),
    "/v2/jobs/{id}": since(V2_5, {"GET": jobs.get_job}),
    "/v2/jobs/{id}/retry": since(V2_5, {"POST": jobs.retry_job}),
    "/v2/summary": since(V2_5, {"GET": summary.get_summary}),
    # Microversion 2.11: the caller's identity and permissions (doc/dashboard.md, "Roles").
    "/v2/permissions": since(V2_11, {"GET": permissions.get_permissions}),
    # Microversion 2.6: the image catalogue (doc/programming.md).
    "/v2/images": since(V2_6, {"GET": images.list_images, "POST": images.create_image}),
    "/v2/images/{uuid}": since(V2_6, {"GET": images.get_image, "DELETE": images.delete_image}),
    "/v2/images/{uuid}/file": since(
        V2_6, {"GET": images.download_image, "PUT": images.upload_image}
    ),
    "/v2/images/{uuid}/members": since(V2_6, {"GET": images.list_members}),
    "/v2/images/{uuid}/members/{project_id}": since(
        V2_6, {"PUT": images.add_member, "DELETE": images.remove_member}
    ),
    # Microversion 2.7: devices' activation, services, drivers, discover now
    # (doc/devices.md).
    "/v2/device_activations": since(V2_7, {"POST": devices.activate_devices}),
    "/v2/services": since(V2_7, {"GET": services.list_services}),
    # Microversion 2.10: an operator's labels on devices (doc/devices.md, "Labels").
    "/v2/device_labels": since(V2_10, {"POST": devices.label_devices}),
    "/v2/drivers": since(V2_7, {"GET": drivers.list_drivers}),
    "/v2/drivers/{name}/install": since(V2_7, {"POST": drivers.install_driver}),
    "/v2/drivers/{name}/update": since(V2_7, {"POST": drivers.update_driver}),
    "/v2/drivers/{name}/uninstall": since(V2_7, {"POST": drivers.uninstall_driver}),
    "/v2/discoveries": since(
        V2_7, {"GET": discoveries.list_discoveries, "POST": discoveries.create_discovery}
    ),
    "/v2/discoveries/{uuid}": since(V2_7, {"GET": discoveries.get_discovery}),
    # Microversion 2.8: standalone claims (doc/standalone.md).
    "/v2/claims": since(V2_8, {"GET": claims.list_claims, "POST": claims.create_claim}),
    "/v2/claims/{uuid}": since(V2_8, {"GET": claims.get_claim, "DELETE": claims.delete_claim}),
    "/v2/claims/{uuid}/renew": since(V2_8, {"POST": claims.renew_claim}),
    # Microversion 2.9: the audit trail (doc/audit.md).
    "/v2/audit_events": since(V2_9, {"GET": audit.list_audit_events}),
    "/v2/audit_events/{id}": since(V2_9, {"GET": audit.get_audit_event}),
    # Microversion 2.10: a profile's devices for a server (doc/standalone.md, "Servers").
    "/v2/servers/{server}/attach": since(V2_10, {"POST": servers.attach_server}),
    "/v2/servers/{server}/detach": since(V2_10, {"POST": servers.detach_server}),
    # Microversion 2.11: attach handles held and free by device model over time.
    "/v2/allocation_history": since(V2_11, {"GET": usage_history.get_allocation_history}),
    "/agent/v1/hosts/{hostname}/inventory": {"PUT": agent.put_inventory},
    "/agent/v1/hosts/{hostname}/accelerator_requests/{uuid}": {
        "PUT": agent_arqs.put_host_work,
    },
    "/agent/v1/hosts/{hostname}/desired_state": {"GET": agent.get_desired_state},
    "/agent/v1/hosts/{hostname}/programs/{uuid}": {"PUT": agent_programs.put_program},
    "/agent/v1/hosts/{hostname}/activations/{device_uuid}": {
        "PUT": agent_activations.put_activation
    },
    "/agent/v1/hosts/{hostname}/claims/{claim_uuid}": {"PUT": agent_claims.put_claim},
    "/agent/v1/hosts/{hostname}/partitions/{device_uuid}": {"PUT": agent_partitions.put_partition},
    "/agent/v1/images/{image_uuid}/data": {"GET": agent_images.get_image_data},
    "/healthz": {"GET": root.healthz},
    "/metrics": {"GET": metrics.metrics},
    # This API's OpenAPI 3.1 document (exosuit/api/openapi.py), public as /v2.
    "/openapi.json": {"GET": openapi.document},
    # POST: sign in with Keystone (public, as the page: it is how a token is obtained).
    "/dashboard": {"GET": dashboard.page, "POST": dashboard.sign_in},
    "/dashboard/static/{name}": {"GET": dashboard.static},
}

# Top-level path segments that are not re-routed under /v2.
_TOP_LEVEL = ("v2", "agent", "healthz", "metrics", "dashboard", "openapi.json")


class Route:
    __slots__ = (
        "template",
        "regex",
        "methods",
        "versioned",
        "allow",
        "since",
        "always",
        "accepted",
    )

    def __init__(self, template: str, methods: dict[str, Handler]) -> None:
        self.template = template
        pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
        self.regex = re.compile(f"^{pattern}$")
        self.methods = methods
        # The microversion the route appeared in (None: it always existed), but for
        # the methods it always had.
        self.since = methods.version if isinstance(methods, Since) else None
        self.always = methods.always if isinstance(methods, Since) else frozenset()
        # Everything under /v2 carries microversion headers (Cyborg's v2 controller).
        self.versioned = template == "/v2" or template.startswith("/v2/")
        self.allow = ", ".join(sorted(methods))
        # method → the query parameters its handler declares (its OPERATIONS entry).
        self.accepted = {
            method: frozenset(q["name"] for q in openapi.described(handler).query)
            for method, handler in methods.items()
        }

    def unknown_query(self, method: str, names: Iterable[str]) -> str | None:
        """Why a ``method`` request with the query parameters ``names`` is refused
        (microversion 2.10 and later: a parameter its handler does not declare), naming
        them and the accepted ones; None when every one is declared."""
        accepted = self.accepted.get(method, frozenset())
        unknown = sorted(set(names) - accepted)
        if not unknown:
            return None
        where = f"{method} {self.template}"
        said = ", ".join(repr(name) for name in unknown)
        if not accepted:
            return f"Unknown query parameter(s) {said}: {where} takes no query parameters."
        return (
            f"Unknown query parameter(s) {said}: {where} accepts only "
            f"{', '.join(sorted(accepted))}."
        )

    def since_for(self, method: str) -> tuple[int, int] | None:
        """The microversion below which ``method`` is answered as an unknown path (None:
        never). A route added by a microversion masks every method; a path that gained a
        method masks that one only (an unknown method still gets its 405)."""
        if self.since is None or method in self.always:
            return None
        if self.always and method not in self.methods:
            return None
        return self.since


def normalize_path(path: str) -> str:
    if len(path) > 1:
        path = path.rstrip("/") or "/"
    if path != "/":
        first = path.split("/", 2)[1]
        if first not in _TOP_LEVEL:
            path = "/v2" + path
    return path


class Router:
    def __init__(self, routes: dict[str, dict[str, Handler]] | None = None) -> None:
        routes = ROUTES if routes is None else routes
        # Every route, in the table's order (the OpenAPI document is built from them).
        self.routes = [Route(template, methods) for template, methods in routes.items()]
        self._static: dict[str, Route] = {}
        self._dynamic: list[Route] = []
        for route in self.routes:
            if "{" in route.template:
                self._dynamic.append(route)
            else:
                self._static[route.template] = route

    def match(self, path: str) -> tuple[Route, dict[str, str]] | None:
        route = self._static.get(path)
        if route is not None:
            return route, {}
        for route in self._dynamic:
            m = route.regex.match(path)
            if m:
                return route, m.groupdict()
        return None
