"""A programmable host for the programming tests: FPGAs whose deployable carries the
``program_formats`` attribute (as a programmable driver reports it), images in the
catalogue's table, and the agent's side of the protocol."""

from __future__ import annotations

import hashlib
import uuid

import sqlalchemy as sa

from exosuit.db import inventory, models
from exosuit.db import programs as programs_db
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from tests.helpers.inventory import snapshot

HOST = "prog-host"
PCI = "0000:5e:00.0"
FUNCTION = "f0f0f0f0-0000-4000-8000-000000000001"
INTERFACE = "1f1f1f1f-0000-4000-8000-000000000002"


def programmable_fpga(
    address: str = PCI,
    *,
    handles: int = 4,
    formats: str | None = "simulated",
    traits: tuple[str, ...] = ("CUSTOM_FPGA_SIM",),
    hostname: str = HOST,
) -> Device:
    """An FPGA with one deployable of ``handles`` attach handles whose driver loads
    ``formats`` (None: a driver that cannot program)."""
    bus = address.split(":")[1]
    extra = (("program_formats", formats),) if formats is not None else ()
    return Device(
        type="FPGA",
        vendor="0x1234",
        model="Simulated FPGA",
        driver_name="simulated",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        deployables=(
            Deployable(
                name=f"{hostname}_{address}",
                num_accelerators=handles,
                resource_class="FPGA",
                traits=traits,
                driver_name="simulated",
                extra_attributes=extra,
                attach_handles=tuple(
                    AttachHandle(
                        "PCI",
                        {"domain": "0000", "bus": bus, "device": "00", "function": str(i)},
                    )
                    for i in range(handles)
                ),
            ),
        ),
    )


def report(db, devices, hostname: str = HOST) -> None:
    db.write(inventory.apply_snapshot, hostname, snapshot(hostname, devices))


def image(
    *, fmt: str = "simulated", function_id: str | None = FUNCTION, data: bytes | None = None
) -> programs_db.Image:
    """An image as a source would describe it (not stored anywhere)."""
    data = data if data is not None else uuid.uuid4().bytes * 8
    return programs_db.Image(
        uuid=str(uuid.uuid4()),
        source="exosuit",
        format=fmt,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        function_id=function_id,
        interface_id=INTERFACE,
    )


def deployable(db, hostname: str = HOST) -> dict:
    """The host's (first) deployable row with its device's status."""
    dep, dev = models.deployables, models.devices
    with db.engine.connect() as conn:
        row = (
            conn.execute(
                sa.select(dep, dev.c.status, dev.c.status_reason, dev.c.uuid.label("device_uuid"))
                .join(dev, dep.c.device_id == dev.c.id)
                .where(dev.c.hostname == hostname)
                .order_by(dep.c.id)
            )
            .mappings()
            .first()
        )
    assert row is not None
    return dict(row)


# -- through the API ---------------------------------------------------------------------------

V2_6 = "2.6"
DEPLOYABLES = "/v2/deployables"


def upload_image(
    admin,
    data: bytes | None = None,
    *,
    fmt: str = "simulated",
    function_id: str | None = FUNCTION,
    visibility: str = "public",
) -> dict:
    """A catalogue image with its data (POST /v2/images, PUT …/file): active."""
    data = data if data is not None else uuid.uuid4().bytes * 64
    body = {"name": f"image-{uuid.uuid4().hex[:6]}", "format": fmt, "visibility": visibility}
    if function_id is not None:
        body.update(function_id=function_id, interface_id=INTERFACE)
    r = admin.post("/v2/images", body, version=V2_6)
    assert r.status_code == 201, r.text
    image_ = r.json
    r = admin.put(f"/v2/images/{image_['uuid']}/file", data, version=V2_6)
    assert r.status_code == 204, r.text
    return {**image_, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def program_body(image_uuid: str) -> list:
    return [{"path": "/program", "op": "replace", "value": [{"image_uuid": image_uuid}]}]


def agent_report(agent, program_uuid: str, state: str, host: str = HOST, **fields):
    return agent.put(f"/agent/v1/hosts/{host}/programs/{program_uuid}", {"state": state, **fields})


def error_code(response) -> str:
    import json

    return json.loads(response.json["error_message"])["code"]
