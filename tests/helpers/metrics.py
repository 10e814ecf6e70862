"""What the metrics tests share: a fleet seeded through the API (devices on two hosts, a
VM's ARQ and a standalone claim holding some of them, usage reported) and a parsed
scrape of /metrics."""

from __future__ import annotations

import dataclasses
import gzip
import uuid

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from exosuit import schemas
from tests.helpers.claims import ARQS, World, fpga, gpu, make_world
from tests.helpers.inventory import snapshot

HOST = "metrics-a"
OTHER = "metrics-b"
FPGA_A = "0000:5e:00.0"
GPU_A = "0000:3b:00.0"
FPGA_B = "0000:5f:00.0"
DEVICE_LABELS = ("hostname", "device_uuid", "type", "vendor", "model", "pci_address")


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Scrape:
    """A /metrics answer, parsed by prometheus-client's own parser (text or OpenMetrics):
    ``types`` (family → type) and ``samples``."""

    def __init__(self, text: str, openmetrics: bool = False) -> None:
        parse = openmetrics_families if openmetrics else text_string_to_metric_families
        self.text = text
        self.types: dict[str, str] = {}
        self.samples: list[Sample] = []
        for family in parse(text):
            self.types[family.name] = family.type
            for s in family.samples:
                self.samples.append(Sample(s.name, dict(s.labels), s.value))

    def of(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        (found,) = self.of(name, **labels)
        return found.value

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


def scrape(api, **headers: str) -> Scrape:
    r = api.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    body = r.body
    if r.headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return Scrape(body.decode(), r.content_type.startswith("application/openmetrics-text"))


def identity(address: str) -> str:
    return schemas.device_identity(fpga(address).to_snapshot()["controlpath_id"])


@dataclasses.dataclass
class Fleet:
    """The seeded world: who holds what."""

    world: World
    devices: dict[str, dict]  # pci address (host A's GPU and FPGA; host B's FPGA) → device
    claim: dict
    arq_uuid: str
    instance: str


def seed(database, tmp_path) -> Fleet:
    world = make_world(database, tmp_path)
    gpu_usage = {"utilization_percent": 42, "memory_used_bytes": 1024, "memory_total_bytes": 4096}
    body = snapshot(HOST, [fpga(FPGA_A, handles=2), gpu(GPU_A)])
    body["usage"] = {identity(GPU_A): gpu_usage, identity(FPGA_A): {"errors_total": 1}}
    r = world.agent.put(f"/agent/v1/hosts/{HOST}/inventory", body)
    assert r.status_code == 200, r.text
    # Host B's FPGA reports figures named like the fixed per-device families: left out.
    body = snapshot(OTHER, [fpga(FPGA_B, handles=4)])
    body["usage"] = {identity(FPGA_B): {"info": 7, "holder": 7, "attach_handles": 7}}
    r = world.agent.put(f"/agent/v1/hosts/{OTHER}/inventory", body)
    assert r.status_code == 200, r.text
    world.profile("fpga", {"resources:FPGA": "1"})
    world.profile("gpu", {"resources:PGPU": "1"})
    claim = world.claim({"device_profile_name": "fpga", "hostname": HOST, "consumer": "job"})
    (arq,) = world.nova.post(ARQS, {"device_profile_name": "gpu"}).json["arqs"]
    (deployable,) = [
        d for d in world.admin.get("/v2/deployables").json["deployables"] if "gpu" in d["name"]
    ]
    instance = str(uuid.uuid4())
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": deployable["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    assert world.nova.patch(ARQS, {arq["uuid"]: ops}).status_code == 202
    devices = {d["pci_address"]: d for d in world.devices(HOST)}
    devices.update({d["pci_address"]: d for d in world.devices(OTHER)})
    return Fleet(world, devices, claim, arq["uuid"], instance)


__all__ = [
    "DEVICE_LABELS",
    "FPGA_A",
    "FPGA_B",
    "GPU_A",
    "HOST",
    "OTHER",
    "Fleet",
    "Sample",
    "Scrape",
    "scrape",
    "seed",
]
