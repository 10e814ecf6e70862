"""Nova's side of the accelerator integration, call for call.

``NovaReplay`` makes the calls Nova makes to a Cyborg-compatible service, in
Nova's order (reference/cyborg-v2.md §3.5, reference/nova-observed.md), through
a keystoneauth Adapter as Nova's ``_CyborgClient`` does: service type
``accelerator``, the user's token plus the ``nova`` service user's token, no
microversion header, errors answered as statuses (``raise_exc=False``). It
plays nova-api (profile lookup), nova-conductor (create, one bind PATCH,
clean-up of a failed bind) and nova-compute (waiting for the events and
polling until the ARQs are resolved); the events themselves reach the fake
Nova over HTTP.

Placement is not replayed: the device providers of each request group are
taken from Exosuit's ``GET /v2/deployables`` (``rp_uuid``), filtered by the
group's resource class and required traits, where Nova would get them from
Placement's allocation candidates (which tests/placement checks against a real
Placement).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid

from tests.nova.fake_nova import FakeNova

ARQS = "/accelerator_requests"
RESOLVED = ("Bound", "BindFailed", "Deleting")


class NovaError(AssertionError):
    """Nova would fail the operation here (and log it)."""


@dataclasses.dataclass
class RequestGroup:
    """Nova's ``objects.RequestGroup`` for one device profile group."""

    requester_id: str
    resources: dict[str, int]
    required_traits: set[str]
    forbidden_traits: set[str]


@dataclasses.dataclass
class Server:
    uuid: str
    profile: str
    host: str | None = None
    arqs: list[dict] = dataclasses.field(default_factory=list)


class NovaReplay:
    def __init__(self, accelerator, nova: FakeNova, admin, *, timeout: float = 30.0) -> None:
        self.accelerator = accelerator  # Nova's Adapter: user token + service token
        self.admin = admin  # an admin's Adapter (stands in for Placement: see the docstring)
        self.nova = nova
        self.timeout = timeout
        self.calls: list[tuple[str, str, int]] = []
        self.servers: list[Server] = []

    # -- HTTP ----------------------------------------------------------------------------

    def _call(self, method: str, url: str, **kwargs):
        response = self.accelerator.request(url, method, raise_exc=False, **kwargs)
        self.calls.append((method, response.request.path_url, response.status_code))
        return response

    def _ok(self, response, what: str):
        # Nova's _call_cyborg: a falsy response (status >= 400) is an error.
        if not response:
            raise NovaError(f"{what}: {response.status_code} {response.text}")
        return response

    # -- nova-api ------------------------------------------------------------------------

    def request_groups(self, profile: str) -> list[RequestGroup]:
        """``get_device_profile_request_groups``: one numbered group per profile group;
        ``resources:`` and ``trait:`` keys only (``accel:`` keys are skipped)."""
        r = self._ok(
            self._call("GET", "/device_profiles", params={"name": profile}), "device profile"
        )
        profiles = r.json().get("device_profiles")
        if not profiles or len(profiles) != 1:
            raise NovaError(f"Expected 1 device profile {profile}, got {profiles}")
        groups = []
        for index, group in enumerate(profiles[0]["groups"]):
            rg = RequestGroup(f"device_profile_{index}", {}, set(), set())
            for key, value in group.items():
                prefix, _, name = key.partition(":")
                if prefix == "resources":
                    rg.resources[name] = int(value)
                elif prefix == "trait":
                    (rg.required_traits if value == "required" else rg.forbidden_traits).add(name)
            groups.append(rg)
        return groups

    # -- "Placement" ---------------------------------------------------------------------

    def schedule(self, groups: list[RequestGroup], host: str) -> dict[str, list[str]]:
        """requester_id → [provider uuid]: a distinct device of ``host`` per group whose
        resource class and traits fit (what allocation candidates would offer)."""
        deployables = self.admin.get("/deployables").json()["deployables"]
        taken: set[str] = set()
        mapping = {}
        for group in groups:
            for dep in deployables:
                # Cyborg's shape: a JSON string of one-key objects.
                attributes = {
                    k: v for a in json.loads(dep["attributes_list"]) for k, v in a.items()
                }
                traits = {v for k, v in attributes.items() if k.startswith("trait")}
                if (
                    dep["name"].startswith(f"{host}_")
                    and dep["rp_uuid"] not in taken
                    and set(group.resources) <= {attributes.get("rc")}
                    and group.required_traits <= traits
                    and not group.forbidden_traits & traits
                ):
                    mapping[group.requester_id] = [dep["rp_uuid"]]
                    taken.add(dep["rp_uuid"])
                    break
            else:
                raise NovaError(f"No valid host: nothing on {host} for {group}")
        return mapping

    # -- nova-conductor ------------------------------------------------------------------

    def create_and_bind(
        self, server: Server, host: str, rg_rp_map: dict[str, list[str]]
    ) -> list[dict]:
        """``create_arqs_and_match_resource_providers`` then ``bind_arqs``: one PATCH
        for every ARQ. A failed bind deletes the ARQs (``delete_arqs_by_uuid``) and
        raises, as the conductor aborts the build."""
        r = self._ok(
            self._call("POST", ARQS, json={"device_profile_name": server.profile}), "create ARQs"
        )
        arqs = r.json().get("arqs")
        if not arqs:
            raise NovaError(f"device profile name {server.profile}")
        bindings = {}
        for arq in arqs:
            rp = rg_rp_map[f"device_profile_{arq['device_profile_group_id']}"][0]
            bindings[arq["uuid"]] = {
                "hostname": host,
                "device_rp_uuid": rp,
                "instance_uuid": server.uuid,
            }
        patch = {
            u: [
                {"path": "/" + field, "op": "add", "value": value}
                for field, value in binding.items()
            ]
            for u, binding in bindings.items()
        }
        server.arqs = arqs
        r = self._call("PATCH", ARQS, json=patch)
        if not r:
            self._call("DELETE", ARQS, params={"arqs": ",".join(bindings)})
            raise NovaError(f"Binding failed for ARQ UUIDs: {','.join(bindings)}: {r.text}")
        return arqs

    # -- nova-compute --------------------------------------------------------------------

    def arqs_for_instance(self, server: Server, only_resolved: bool = False) -> list[dict]:
        r = self._ok(self._call("GET", ARQS, params={"instance": server.uuid}), "get ARQs")
        arqs = r.json().get("arqs")
        if not arqs:
            raise NovaError(f"Cyborg returned no accelerator requests for {server.uuid}")
        if only_resolved:
            arqs = [a for a in arqs if a["state"] in RESOLVED]
        return arqs

    def wait_for_bound(self, server: Server) -> list[dict]:
        """``_get_bound_arq_resources``: the ARQs not resolved at the first look are
        waited for by event (``arq_binding_timeout``) while the service is polled with
        ``bind_state=resolved`` until it stops answering 423; the ARQs read back."""
        uuids = [a["uuid"] for a in self.arqs_for_instance(server)]
        early = {a["uuid"] for a in self.arqs_for_instance(server, only_resolved=True)}
        waiting = set(uuids) - early
        deadline = time.monotonic() + self.timeout
        while True:
            r = self._call("GET", ARQS, params={"instance": server.uuid, "bind_state": "resolved"})
            received = {e["tag"] for e in self.nova.accepted if e["server_uuid"] == server.uuid}
            if r.status_code != 423 and waiting <= received:
                break
            if r.status_code not in (200, 423):
                raise NovaError(f"poll: {r.status_code} {r.text}")
            if time.monotonic() > deadline:
                raise NovaError(
                    f"ARQs of {server.uuid} not bound in time: {r.status_code}, "
                    f"events for {sorted(received)}"
                )
            time.sleep(0.05)
        arqs = self.arqs_for_instance(server)
        failed = [a["uuid"] for a in arqs if a["state"] != "Bound"]
        if failed:
            raise NovaError(f"ARQs {failed} of {server.uuid} failed to bind")
        return arqs

    def delete_arqs(self, server: Server) -> None:
        """Server delete, shelve-offload, first step of an evacuation."""
        r = self._call("DELETE", ARQS, params={"instance": server.uuid})
        self._ok(r, "delete ARQs")
        assert r.status_code == 204, r.text

    # -- whole operations ----------------------------------------------------------------

    def boot(self, profile: str, host: str) -> Server:
        server = Server(str(uuid.uuid4()), profile)
        self.servers.append(server)
        self.nova.add_server(server.uuid, None)  # building: not on a host yet
        groups = self.request_groups(profile)
        self.build_on(server, host, groups)
        return server

    def build_on(self, server: Server, host: str, groups: list[RequestGroup] | None = None):
        """conductor: schedule, create and bind; compute: claim (the server is on its host
        from then on, for Nova's events API), wait for the binds."""
        groups = groups if groups is not None else self.request_groups(server.profile)
        self.create_and_bind(server, host, self.schedule(groups, host))
        server.host = host
        self.nova.add_server(server.uuid, host)
        return self.wait_for_bound(server)

    def evacuate(self, server: Server, host: str) -> list[dict]:
        """conductor: delete the ARQs, create and bind on the new host; compute waits."""
        self.delete_arqs(server)
        return self.build_on(server, host)

    def shelve_offload(self, server: Server) -> list[str]:
        """api: collect the ARQ uuids; compute offload: delete them."""
        uuids = [a["uuid"] for a in self.arqs_for_instance(server)]
        self.delete_arqs(server)
        server.host = None
        self.nova.add_server(server.uuid, None)
        return uuids

    def unshelve(self, server: Server, host: str) -> list[dict]:
        return self.build_on(server, host)
