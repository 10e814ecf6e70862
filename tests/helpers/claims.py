"""What the claim tests share: an API world with hosts, devices and profiles."""

from __future__ import annotations

import json

from exosuit.api.deploy import loadapp
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from tests.conftest import PERSONAS, ApiClient, make_test_conf
from tests.helpers.inventory import fpga, snapshot

V = "2.8"
CLAIMS = "/v2/claims"
ARQS = "/v2/accelerator_requests"


def gpu(address: str, *, traits=("CUSTOM_NVIDIA_1EB8",)) -> Device:
    """A whole GPU (PGPU), one attach handle."""
    return Device(
        type="GPU",
        vendor="10de",
        model="Tesla T4",
        driver_name="nvidia_gpu",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=1,
        deployables=(
            Deployable(
                name=f"gpu_{address}",
                num_accelerators=1,
                resource_class="PGPU",
                traits=tuple(traits),
                driver_name="nvidia_gpu",
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
            ),
        ),
    )


class World:
    """The API in-process, as an admin (``admin``), a project member (``member``) and an
    agent (``agent``)."""

    def __init__(self, api: ApiClient, database) -> None:
        self.api = api
        self.database = database
        self.admin = api.as_(PERSONAS["admin"])
        self.member = api.as_(PERSONAS["member"])
        self.agent = api.as_(PERSONAS["service"])
        self.nova = api.as_(PERSONAS["nova"])

    def report(self, hostname: str, devices) -> None:
        r = self.agent.put(f"/agent/v1/hosts/{hostname}/inventory", snapshot(hostname, devices))
        assert r.status_code == 200, r.text

    def profile(self, name: str, *groups: dict) -> None:
        r = self.admin.post("/v2/device_profiles", [{"name": name, "groups": list(groups)}])
        assert r.status_code == 201, r.text

    def claim(self, body: dict, expect: int = 201, as_=None) -> dict:
        r = (as_ or self.member).post(CLAIMS, body, version=V)
        assert r.status_code == expect, r.text
        return r.json

    def show(self, uuid: str) -> dict:
        r = self.admin.get(f"{CLAIMS}/{uuid}", version=V)
        assert r.status_code == 200, r.text
        return r.json

    def release(self, uuid: str, as_=None) -> None:
        r = (as_ or self.member).delete(f"{CLAIMS}/{uuid}", version=V)
        assert r.status_code == 204, r.text

    def handles(self, **query) -> list[dict]:
        path = "/v2/attach_handles"
        if query:
            path += "?" + "&".join(f"{k}={v}" for k, v in query.items())
        r = self.admin.get(path, version=V)
        assert r.status_code == 200, r.text
        return r.json["attach_handles"]

    def held(self) -> int:
        return sum(h["in_use"] for h in self.handles())

    def desired(self, hostname: str) -> dict:
        r = self.agent.get(f"/agent/v1/hosts/{hostname}/desired_state")
        assert r.status_code == 200, r.text
        return r.json

    def device(self, uuid: str) -> dict:
        r = self.admin.get(f"/v2/devices/{uuid}", version=V)
        assert r.status_code == 200, r.text
        return r.json

    def devices(self, hostname: str) -> list[dict]:
        r = self.admin.get(f"/v2/devices?hostname={hostname}", version=V)
        assert r.status_code == 200, r.text
        return r.json["devices"]


def make_world(database, tmp_path, **conf) -> World:
    settings = {"state_path": str(tmp_path), **conf}
    return World(ApiClient(loadapp(make_test_conf(**settings), database)), database)


def fault(response) -> dict:
    """The inner fault of Cyborg's error envelope."""
    return json.loads(response.json["error_message"])


__all__ = ["ARQS", "CLAIMS", "V", "World", "fault", "fpga", "gpu", "make_world"]
