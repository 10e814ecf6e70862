"""Build inventory snapshots for tests."""

from __future__ import annotations

from exosuit import schemas
from exosuit.agent.snapshot import build_snapshot
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid


def fpga(
    address: str, *, handles: int = 16, name: str | None = None, traits=("CUSTOM_FAKE_DEVICE",)
) -> Device:
    """A Cyborg-fake-driver-shaped FPGA at ``address`` with ``handles`` attach handles."""
    bus = address.split(":")[1]
    return Device(
        type="FPGA",
        vendor="0xABCD",
        model="Fake FPGA",
        driver_name="fake",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        deployables=(
            Deployable(
                name=name or f"fake_{address}",
                num_accelerators=handles,
                resource_class="FPGA",
                traits=tuple(traits),
                driver_name="fake",
                attach_handles=tuple(
                    AttachHandle(
                        "TEST_PCI",
                        {
                            "domain": "0000",
                            "bus": bus,
                            "device": f"{i // 8:02x}",
                            "function": str(i % 8),
                        },
                    )
                    for i in range(handles)
                ),
            ),
        ),
    )


class _Static:
    name = "static"

    def __init__(self, devices):
        self.devices = list(devices)

    def discover(self):
        return self.devices


def snapshot(hostname: str, devices) -> dict:
    return build_snapshot(hostname, [_Static(devices)])


def rehash(body: dict) -> dict:
    body["hash"] = schemas.snapshot_hash(body["devices"], body.get("driver_errors", []))
    return body
