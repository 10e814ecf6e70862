"""A minimal stand-in for Neutron: what real Nova calls while it builds, reboots,
rebuilds, shelves, evacuates and deletes servers, with and without SmartNIC ports.

Neutron is not the subject of these tests and does not run here as the real thing:
its ML2 SR-IOV mechanism driver (``sriovnicswitch``) binds an ``accelerator-direct``
port only for a live SR-IOV NIC agent on the port's host (``mech_driver.py``: the
host's agents of type "NIC Switch agent", alive), and that agent needs SR-IOV NICs,
which this machine does not have. So an in-process WSGI application answers, from
memory, the calls python-neutronclient makes for Nova (shapes from Neutron's API
reference):

Neutron (``/v2.0``): ``GET extensions``; ``GET networks[/{id}]``, ``GET subnets``,
``GET ports[/{id}]`` with equality filters, ``PUT ports/{id}`` (Nova's binding:
``binding:host_id``, ``binding:profile``, ``device_id``, ``device_owner``; a bound
``accelerator-direct`` port gets ``binding:vif_type`` ``hw_veb`` as the SR-IOV
mechanism driver gives it), ``GET floatingips``, ``GET security-groups``. Ports are
created by the tests (``create_port``), as an operator would with ``openstack port
create --vnic-type accelerator-direct --device-profile …``.

Not covered: Neutron's own validation, its port binding (ML2 and the SR-IOV agent),
DHCP, security groups applied to ports, quotas. Every request is recorded
(``requests``) and an unknown one answers 404 and is recorded in ``unknown``.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import uuid

import webob
from cheroot import wsgi as cheroot_wsgi

__all__ = ["NETWORK", "PHYSNET", "NeutronStandIn"]

PHYSNET = "physnet1"
NETWORK = "6b0d5f3e-1c39-4c7b-9d5e-2f1a0c3b4d51"
SUBNET = "9e4c2a1b-7d3f-4e8a-b6c5-1f0e9d8c7b6a"
EXTENSIONS = ("binding", "port-device-profile", "security-group", "external-net", "provider")


class NeutronStandIn:
    """The application, its state, and a cheroot server on a loopback port."""

    def __init__(self, project_id: str) -> None:
        self.project_id = project_id
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, object]] = []
        self.unknown: list[tuple[str, str]] = []
        self.networks = {
            NETWORK: {
                "id": NETWORK,
                "name": "sriov-net",
                "status": "ACTIVE",
                "admin_state_up": True,
                "shared": True,
                "tenant_id": project_id,
                "project_id": project_id,
                "subnets": [SUBNET],
                "mtu": 1500,
                "router:external": False,
                "port_security_enabled": False,
                "provider:network_type": "vlan",
                "provider:physical_network": PHYSNET,
                "provider:segmentation_id": 100,
            }
        }
        self.subnets = {
            SUBNET: {
                "id": SUBNET,
                "name": "sriov-subnet",
                "network_id": NETWORK,
                "tenant_id": project_id,
                "project_id": project_id,
                "ip_version": 4,
                "cidr": "10.0.0.0/24",
                "gateway_ip": "10.0.0.1",
                "enable_dhcp": False,
                "dns_nameservers": [],
                "host_routes": [],
                "allocation_pools": [{"start": "10.0.0.2", "end": "10.0.0.254"}],
            }
        }
        self.ports: dict[str, dict] = {}
        self.server = cheroot_wsgi.Server(
            ("127.0.0.1", 0), self, numthreads=8, server_name="neutron-standin"
        )
        self.server.prepare()
        self.url = f"http://127.0.0.1:{self.server.bind_addr[1]}"
        self._thread = threading.Thread(
            target=self.server.serve, name="neutron-standin", daemon=True
        )

    def start(self) -> NeutronStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self._thread.join(10)

    # -- what the tests (as an operator) create --------------------------------------------
    def create_port(self, *, device_profile: str | None, vnic_type: str = "accelerator-direct"):
        port_id = str(uuid.uuid4())
        number = len(self.ports) + 2
        port = {
            "id": port_id,
            "name": f"port-{number}",
            "network_id": NETWORK,
            "tenant_id": self.project_id,
            "project_id": self.project_id,
            "mac_address": f"fa:16:3e:00:00:{number:02x}",
            "admin_state_up": True,
            "status": "DOWN",
            "device_id": "",
            "device_owner": "",
            "fixed_ips": [{"subnet_id": SUBNET, "ip_address": f"10.0.0.{number}"}],
            "security_groups": [],
            "port_security_enabled": False,
            "binding:vnic_type": vnic_type,
            "binding:host_id": "",
            "binding:profile": {},
            "binding:vif_type": "unbound",
            "binding:vif_details": {},
            "device_profile": device_profile,
            "resource_request": None,
            "tags": [],
            "dns_name": "",
            "extra_dhcp_opts": [],
        }
        with self.lock:
            self.ports[port_id] = port
        return port_id

    def port(self, port_id: str) -> dict:
        with self.lock:
            return copy.deepcopy(self.ports[port_id])

    # -- WSGI -------------------------------------------------------------------------------
    def __call__(self, environ, start_response):
        req = webob.Request(environ)
        path = re.sub(r"\.json$", "", req.path_info)
        body = None
        if req.body:
            body = json.loads(req.body)
        with self.lock:
            self.requests.append((req.method, req.path_qs, body))
            status, payload = self._route(req.method, path, req.GET, body)
        if status == 404 and payload is None:
            self.unknown.append((req.method, req.path_qs))
            payload = {"NeutronError": {"message": f"no stand-in for {req.method} {path}"}}
        if status == 204:
            response = webob.Response(status=204)
        else:
            response = webob.Response(status=status, json_body=payload)
        return response(environ, start_response)

    def _route(self, method: str, path: str, query, body):
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["v2.0"]:
            return self._neutron(method, parts[1:], query, body)
        if not parts:
            return 200, {"versions": [{"id": "v2.0", "status": "CURRENT", "links": []}]}
        return 404, None

    # -- Neutron ----------------------------------------------------------------------------
    def _neutron(self, method: str, parts: list[str], query, body):
        collection = parts[0] if parts else ""
        item = parts[1] if len(parts) > 1 else None
        if method == "GET" and collection == "extensions":
            return 200, {
                "extensions": [
                    {"alias": a, "name": a, "description": "", "updated": "", "links": []}
                    for a in EXTENSIONS
                ]
            }
        stores = {"networks": self.networks, "subnets": self.subnets, "ports": self.ports}
        if method == "GET" and collection in stores:
            store = stores[collection]
            singular = collection[:-1]
            if item is not None:
                if item not in store:
                    return 404, {"NeutronError": {"type": f"{singular}NotFound", "message": ""}}
                return 200, {singular: store[item]}
            return 200, {collection: [r for r in store.values() if _matches(r, query)]}
        if method == "PUT" and collection == "ports" and item in self.ports:
            port = self.ports[item]
            changes = (body or {}).get("port", {})
            port.update(changes)
            if port["binding:host_id"]:
                port["binding:vif_type"] = (
                    "hw_veb" if port["binding:vnic_type"].startswith("accelerator") else "ovs"
                )
                port["binding:vif_details"] = {"vlan": "100", "connectivity": "l2"}
                port["status"] = "ACTIVE"
            else:
                port["binding:vif_type"] = "unbound"
                port["binding:vif_details"] = {}
                port["status"] = "DOWN"
            return 200, {"port": port}
        if method == "GET" and collection in ("floatingips", "security-groups"):
            key = collection.replace("-", "_")
            return 200, {key: []}
        return 404, None


def _matches(record: dict, query) -> bool:
    for key in set(query.keys()) - {"fields", "limit", "marker", "sort_key", "sort_dir"}:
        wanted = query.getall(key)
        value = record.get(key)
        if isinstance(value, bool):
            value = str(value)
        if str(value) not in wanted and value not in wanted:
            return False
    return True
