"""The simulated driver: devices seeded by host name (the same ones every run).

Used by ``exosuit serve``, demos and scale tests. Shapes:

* ``fake_fpga`` — Cyborg's fake driver: an FPGA, vendor 0xABCD, resource class
  FPGA, trait CUSTOM_FAKE_DEVICE, 16 TEST_PCI attach handles.
* ``nvidia_gpu`` — a whole NVIDIA GPU for PCI passthrough: resource class PGPU,
  traits OWNER_CYBORG and CUSTOM_NVIDIA_<PRODUCT ID>, one PCI attach handle.
"""

from __future__ import annotations

import random
import re

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid

__all__ = ["SHAPES", "SimulatedDriver"]

_GPU_MODELS = [
    ("1eb8", "Tesla T4"),
    ("20b0", "A100-SXM4-40GB"),
    ("2330", "H100-SXM5-80GB"),
    ("26b9", "L40S"),
]


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-]", "_", name)


class SimulatedDriver:
    """Implements [exosuit.drivers.base.Driver]."""

    name = "simulated"
    OPTIONS = [
        cfg.DictOpt(
            "devices",
            default={"fake_fpga": "1", "nvidia_gpu": "1"},
            help="SHAPE:COUNT pairs of simulated devices. Shapes: fake_fpga, nvidia_gpu.",
        ),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        shapes = context.settings.get("devices")
        self.shapes = {k: int(v) for k, v in (shapes or {"fake_fpga": 1, "nvidia_gpu": 1})
                       .items()}
        unknown = set(self.shapes) - set(SHAPES)
        if unknown:
            raise ValueError(f"unknown simulated device shape(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(SHAPES))}")

    def discover(self) -> list[Device]:
        rng = random.Random(f"exosuit-simulated:{self.hostname}")
        buses = iter(rng.sample(range(0x10, 0xff), 0xff - 0x10))
        devices = []
        for shape in sorted(self.shapes):
            for index in range(int(self.shapes[shape])):
                devices.append(SHAPES[shape](self.hostname, index, next(buses), rng))
        return devices


def _fake_fpga(hostname: str, index: int, bus: int, rng: random.Random) -> Device:
    bus_hex = "0c" if index == 0 else f"{bus:02x}"
    suffix = "" if index == 0 else str(index)
    handles = tuple(
        AttachHandle("TEST_PCI", {"domain": "0000", "bus": bus_hex,
                                  "device": f"{i // 8:02x}", "function": str(i % 8)})
        for i in range(1, 17)
    )
    address = f"0000:{bus_hex}:00.0"
    return Device(
        type="FPGA",
        vendor="0xABCD",
        model="Fake FPGA",
        driver_name="fake",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        firmware_version="1.0",
        std_board_info={"device_id": "0xabcd", "class": "Fake class"},
        deployables=(
            Deployable(
                name=_sanitize(f"{hostname}_FakeDevice{suffix}"),
                num_accelerators=16,
                resource_class="FPGA",
                traits=("CUSTOM_FAKE_DEVICE",),
                attach_handles=handles,
                driver_name="fake",
            ),
        ),
    )


def _nvidia_gpu(hostname: str, index: int, bus: int, rng: random.Random) -> Device:
    product_id, model = rng.choice(_GPU_MODELS)
    address = f"0000:{bus:02x}:00.0"
    return Device(
        type="GPU",
        vendor="10de",
        model=model,
        driver_name="nvidia_gpu",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=index % 2,
        firmware_version=f"9{rng.randint(0, 9)}.{rng.randint(0, 99):02d}.{rng.randint(0, 99):02d}",
        std_board_info={"product_id": product_id, "controller": "3D controller"},
        vendor_board_info={"serial": f"SIM{rng.randrange(10**12):012d}"},
        deployables=(
            Deployable(
                name=_sanitize(f"{hostname}_{address}"),
                num_accelerators=1,
                resource_class="PGPU",
                traits=("OWNER_CYBORG", f"CUSTOM_NVIDIA_{product_id.upper()}"),
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
                driver_name="nvidia_gpu",
            ),
        ),
    )


SHAPES = {"fake_fpga": _fake_fpga, "nvidia_gpu": _nvidia_gpu}
