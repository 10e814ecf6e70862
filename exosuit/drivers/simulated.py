"""The simulated driver: devices seeded by host name (the same ones every run).

Used by ``exosuit serve``, demos and scale tests. Shapes:

* ``fake_fpga`` — Cyborg's fake driver: an FPGA, vendor 0xABCD, resource class
  FPGA, trait CUSTOM_FAKE_DEVICE, 16 TEST_PCI attach handles.
* ``nvidia_gpu`` — a whole NVIDIA GPU for PCI passthrough: resource class PGPU,
  traits OWNER_CYBORG, CUSTOM_NVIDIA_<PRODUCT ID> and, on a MIG-capable model,
  CUSTOM_NVIDIA_MIG_CAPABLE, one PCI attach handle: named, and its slices too, as
  nvidia_gpu names a real GPU (exosuit/drivers/gpu_naming.py).

The fake FPGA is programmable (``Programmable``), so that ``exosuit serve`` shows the
whole programming flow with no hardware: it loads images of format ``simulated`` by
writing the image's ids into a state file in the driver's state folder
(``<[agent] state_dir>/drivers/simulated/loaded.json``), and discovery then reports
the loaded function as the trait ``CUSTOM_FPGA_FUNCTION_ID_FAKE_<FUNCTION ID>`` and
the image in ``vendor_board_info`` (``bitstream_id``, ``function_id``). An image whose
first line is ``#exosuit-simulated fail=load`` fails to load (leaving the region
empty, as an interrupted partial reconfiguration would); ``fail=verify`` loads but
reads back another function id: the two failures an agent must roll back from.

So that ``exosuit serve`` shows the rest of a device's life cycle with no hardware too:

* services: the GPU lists the vGPU types (kind ``vgpu``) and MIG profiles (``mig``) its
  model has, none configured; the FPGA lists its loaded function (``fpga_function``);
* install step (``Installable``): marking a device ready records it as installed in
  ``<state_dir>/installed.json``, marking it inactive removes it; ``[simulated]
  fail_install`` names shapes or PCI addresses whose install fails, to show a failure;
* usage (``UsageReader``): figures seeded by host name and device, the same at every
  report (a GPU's utilisation and memory, an FPGA's error count);
* partitions (``Partitionable``): the GPU split into vGPU mdevs or MIG instances, the
  FPGA into fewer functions, as an operator's layout says (exosuit/drivers/simulated_partitions.py);
* health (``HealthReader``): every device is healthy unless the fault file,
  ``<state_dir>/health.json`` (``HEALTH_FILE``; ``<[agent] state_dir>/drivers/simulated/``),
  says otherwise: an object from a PCI address or a shape (``fake_fpga``, ``nvidia_gpu``)
  to ``{"state": "warning" | "unhealthy" | "ok", "reason": "…"}``, read at every
  discovery, so that a fault can be injected into a running ``exosuit serve`` and taken
  away again (doc/devices.md, "Health");
* containers (``ContainerDevice``): each attach handle is one device node of its own in
  the container, ``/dev/exosuit-simulated/<fpga|gpu>-<domain>-<bus>-<device>-<function>``,
  backed by the host's ``/dev/null`` (there is no hardware: a container engine must
  find a real node to copy), with ``PCI_ADDRESS``, ``SIMULATED`` and, on the FPGA, the
  loaded function (``FPGA_FUNCTION``), so that ``exosuit serve`` and podman show the
  whole CDI flow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
from collections.abc import Mapping
from typing import Any

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import (
    PROGRAM_FORMATS,
    AttachHandle,
    ContainerEdits,
    Deployable,
    Device,
    DeviceNode,
    Health,
    ImageFile,
    InstallError,
    LoadedImage,
    ProgramError,
    Service,
    pci_cpid,
    trait_suffix,
)
from exosuit.drivers.gpu_naming import whole_gpu
from exosuit.drivers.simulated_partitions import SimulatedPartitions, with_partitions
from exosuit.drivers.state import read_state, write_state
from exosuit.files import atomic_write

__all__ = [
    "DEVICE_NODE_DIR",
    "FORMAT",
    "HEALTH_FILE",
    "INSTALLED_FILE",
    "SHAPES",
    "STATE_FILE",
    "SimulatedDriver",
    "function_id_trait",
]

FORMAT = "simulated"
# Where the container sees each simulated handle's node (its host node is /dev/null).
DEVICE_NODE_DIR = "/dev/exosuit-simulated"
STATE_FILE = "loaded.json"
INSTALLED_FILE = "installed.json"
# Injected faults: PCI address or shape → {"state", "reason"} (the module's docstring).
HEALTH_FILE = "health.json"
FAKE_DRIVER = "fake"
FUNCTION_TRAIT_PREFIX = "CUSTOM_FPGA_FUNCTION_ID_FAKE_"
_DIRECTIVE = b"#exosuit-simulated "

_GPU_MODELS = [
    ("1eb8", "Tesla T4"),
    ("20b0", "A100-SXM4-40GB"),
    ("2330", "H100-SXM5-80GB"),
    ("26b9", "L40S"),
]
# Per model: its memory (MiB), its vGPU types (type, name, instances per GPU) and its
# GPU-instance profiles (profile, instances per GPU, MiB), as the vGPU and MIG
# documentation lists them for these boards; none configured on a simulated GPU.
_GPU_MEMORY_MIB = {
    "Tesla T4": 15360,
    "A100-SXM4-40GB": 40960,
    "H100-SXM5-80GB": 81559,
    "L40S": 46068,
}
_VGPU_TYPES = {
    "Tesla T4": [
        ("nvidia-223", "GRID T4-1B", 16),
        ("nvidia-224", "GRID T4-2B", 8),
        ("nvidia-230", "GRID T4-1Q", 16),
        ("nvidia-232", "GRID T4-4Q", 4),
        ("nvidia-234", "GRID T4-16Q", 1),
    ],
    "A100-SXM4-40GB": [
        ("nvidia-471", "GRID A100-4C", 10),
        ("nvidia-472", "GRID A100-5C", 8),
        ("nvidia-474", "GRID A100-10C", 4),
    ],
}
_MIG_PROFILES = {
    "A100-SXM4-40GB": [
        ("1g.5gb", 7, 4864),
        ("2g.10gb", 3, 9856),
        ("3g.20gb", 2, 19968),
        ("4g.20gb", 1, 19968),
        ("7g.40gb", 1, 40192),
    ],
    "H100-SXM5-80GB": [
        ("1g.10gb", 7, 9856),
        ("1g.20gb", 4, 19968),
        ("2g.20gb", 3, 19968),
        ("3g.40gb", 2, 40192),
        ("4g.40gb", 1, 40192),
        ("7g.80gb", 1, 80384),
    ],
}
MIB = 1024 * 1024


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-]", "_", name)


class SimulatedDriver(SimulatedPartitions):
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Programmable],
    [exosuit.drivers.base.Installable], [exosuit.drivers.base.UsageReader],
    [exosuit.drivers.base.HealthReader], [exosuit.drivers.base.ContainerDevice] and,
    through its partitions' module (exosuit/drivers/simulated_partitions.py),
    [exosuit.drivers.base.Partitionable]."""

    name = "simulated"
    OPTIONS = [
        cfg.DictOpt(
            "devices",
            default={"fake_fpga": "1", "nvidia_gpu": "1"},
            help="SHAPE:COUNT pairs of simulated devices. Shapes: fake_fpga, nvidia_gpu.",
        ),
        cfg.ListOpt(
            "fail_install",
            default=[],
            help="Shapes (fake_fpga, nvidia_gpu) or PCI addresses of simulated devices "
            "whose install step fails when an operator marks them ready, to see a failed "
            "activation (the device stays inactive with the reason).",
        ),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.state_dir = context.state_dir
        shapes = context.settings.get("devices")
        self.shapes = {k: int(v) for k, v in (shapes or {"fake_fpga": 1, "nvidia_gpu": 1}).items()}
        unknown = set(self.shapes) - set(SHAPES)
        if unknown:
            raise ValueError(
                f"unknown simulated device shape(s): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(SHAPES))}"
            )

    def discover(self) -> list[Device]:
        rng = random.Random(f"exosuit-simulated:{self.hostname}")
        buses = iter(rng.sample(range(0x10, 0xFF), 0xFF - 0x10))
        loaded = self._read_state()
        layouts = self.partition_layouts()
        made = self.made()
        devices = []
        for shape in sorted(self.shapes):
            for index in range(int(self.shapes[shape])):
                device = SHAPES[shape](self.hostname, index, next(buses), rng)
                devices.append(
                    with_partitions(_with_loaded(device, loaded), layouts, self.hostname, made)
                )
        return devices

    # -- Programmable ------------------------------------------------------------------

    def program(self, device: Device, deployable: Deployable, image: ImageFile) -> None:
        """Implements [exosuit.drivers.base.Programmable]: record the image as loaded."""
        if not _programmable(deployable):
            raise ProgramError(f"{deployable.name} is not a programmable simulated device")
        if image.format != FORMAT:
            raise ProgramError(
                f"the simulated FPGA loads images of format {FORMAT!r}, not {image.format!r}"
            )
        if self.state_dir is None:
            raise ProgramError("the simulated driver has no state folder to keep images in")
        failure = _directive(image.path).get("fail")
        state = self._read_state()
        # Like a real bitstream, an image carries its function: an image loaded before
        # (a rollback, named without its ids) loads the function it had then.
        known = self._read_known().get(image.sha256, {})
        entry: dict[str, Any] | None = {
            "image_uuid": image.uuid,
            "sha256": image.sha256,
            "function_id": image.function_id or known.get("function_id"),
            "interface_id": image.interface_id or known.get("interface_id"),
        }
        if failure == "load":
            entry = None  # an interrupted load leaves the region empty
        elif failure == "verify" and entry is not None:
            entry["function_id"] = f"not-{image.function_id or 'any'}"
        if entry is None:
            state.pop(deployable.name, None)
        else:
            state[deployable.name] = entry
        known = self._read_known()
        if failure is None and (image.function_id or image.interface_id):
            known[image.sha256] = {
                "function_id": image.function_id,
                "interface_id": image.interface_id,
            }
        self._write_state(state, known)
        if failure == "load":
            raise ProgramError(f"the simulated FPGA refused image {image.uuid} (fail=load)")

    def loaded(self, device: Device, deployable: Deployable) -> LoadedImage | None:
        """Implements [exosuit.drivers.base.Programmable]: what the state file says."""
        entry = self._read_state().get(deployable.name)
        if entry is None:
            return None
        return LoadedImage(
            function_id=entry.get("function_id"),
            interface_id=entry.get("interface_id"),
            image_uuid=entry.get("image_uuid"),
        )

    # -- Installable -------------------------------------------------------------------

    def install(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: record the device as installed
        (failing for the shapes and addresses of ``fail_install``)."""
        failing = {str(f).strip() for f in settings.get("fail_install") or ()}
        shape = _shape_of(device)
        if failing & {shape, device.pci_address}:
            raise InstallError(
                f"simulated install failure of {device.pci_address} ({shape}): "
                "[simulated] fail_install names it"
            )
        if self.state_dir is None:
            raise InstallError("the simulated driver has no state folder to keep installs in")
        installed = self._installed()
        if device.pci_address not in installed:
            self._save_installed(sorted({*installed, device.pci_address or ""}))

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: forget the install."""
        installed = self._installed()
        if device.pci_address in installed:
            self._save_installed([a for a in installed if a != device.pci_address])

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Installable]: recorded as installed."""
        return device.pci_address in self._installed()

    def _installed(self) -> list[str]:
        found: list[str] = read_state(self.state_dir, INSTALLED_FILE).get("installed", [])
        return found

    def _save_installed(self, addresses: list[str]) -> None:
        write_state(self.state_dir, INSTALLED_FILE, {"version": 1, "installed": addresses})

    # -- UsageReader -------------------------------------------------------------------

    def usage(self, device: Device) -> Mapping[str, float]:
        """Implements [exosuit.drivers.base.UsageReader]: figures seeded by host name and
        device address, the same at every report."""
        rng = random.Random(f"exosuit-simulated-usage:{self.hostname}:{device.pci_address}")
        if device.type == "GPU":
            total = _GPU_MEMORY_MIB.get(device.model, 16384) * MIB
            return {
                "utilization_percent": float(rng.randint(0, 100)),
                "memory_used_bytes": float(rng.randint(0, total // MIB) * MIB),
                "memory_total_bytes": float(total),
            }
        return {"errors_total": float(rng.choice((0, 0, 0, 1)))}

    # -- HealthReader ------------------------------------------------------------------

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: what the fault file says of the
        device (its PCI address first, then its shape), else healthy. A fault file that
        is not as documented raises ValueError (the agent reports the device without
        health, and logs why)."""
        faults = read_state(self.state_dir, HEALTH_FILE)
        if not isinstance(faults, dict):
            raise ValueError(f"{HEALTH_FILE}: not an object of PCI addresses or shapes")
        fault = faults.get(device.pci_address or "", faults.get(_shape_of(device)))
        if fault is None:
            return Health()
        if not isinstance(fault, dict) or not isinstance(fault.get("state"), str):
            raise ValueError(
                f'{HEALTH_FILE}: a fault is {{"state": "warning" | "unhealthy" | "ok", '
                f'"reason": "..."}}, not {fault!r}'
            )
        state = fault["state"].strip().lower()
        if state == "ok":
            return Health()
        reason = str(fault.get("reason") or "simulated fault")
        return Health(state, (reason,))

    # -- ContainerDevice ---------------------------------------------------------------

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice]: a node of its own per
        handle, backed by /dev/null, and the handle's environment."""
        info = dict(attach_handle.attach_info)
        if not any(
            dict(handle.attach_info) == info
            for deployable in device.deployables
            for handle in deployable.attach_handles
        ):
            raise ValueError(f"{info} is not an attach handle of {device.pci_address}")
        address = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
        kind = "gpu" if device.type == "GPU" else "fpga"
        name = f"{kind}-{address.replace(':', '-').replace('.', '-')}"
        env = {"PCI_ADDRESS": address, "SIMULATED": "true"}
        function = device.vendor_board_info.get("function_id")
        if kind == "fpga" and function:
            env["FPGA_FUNCTION"] = function
        return ContainerEdits(
            device_nodes=(DeviceNode(f"{DEVICE_NODE_DIR}/{name}", host_path="/dev/null"),),
            env=env,
        )

    # -- the state file ----------------------------------------------------------------

    def _read_state(self) -> dict[str, dict[str, Any]]:
        """Deployable name → the image loaded on it. A missing file: nothing loaded."""
        loaded: dict[str, dict[str, Any]] = self._read_file().get("loaded", {})
        return loaded

    def _read_known(self) -> dict[str, dict[str, Any]]:
        """Image SHA-256 → the ids it was loaded with."""
        known: dict[str, dict[str, Any]] = self._read_file().get("images", {})
        return known

    def _read_file(self) -> dict[str, Any]:
        if self.state_dir is None:
            return {}
        try:
            with open(os.path.join(self.state_dir, STATE_FILE)) as f:
                data: dict[str, Any] = json.load(f)
        except FileNotFoundError:
            return {}
        return data

    def _write_state(
        self, loaded: dict[str, dict[str, Any]], known: dict[str, dict[str, Any]]
    ) -> None:
        """Atomically (exosuit/files.py): a crash leaves the old or the new."""
        assert self.state_dir is not None
        data = json.dumps({"version": 1, "loaded": loaded, "images": known}, sort_keys=True)
        atomic_write(os.path.join(self.state_dir, STATE_FILE), data)


def function_id_trait(function_id: str) -> str | None:
    """``CUSTOM_FPGA_FUNCTION_ID_FAKE_<ID>`` for the fake FPGA's loaded function id."""
    suffix = trait_suffix(function_id)
    return FUNCTION_TRAIT_PREFIX + suffix if suffix else None


def _programmable(deployable: Deployable) -> bool:
    return any(k == PROGRAM_FORMATS for k, _ in deployable.extra_attributes)


def _directive(path: str) -> dict[str, str]:
    """``#exosuit-simulated fail=load`` on an image's first line → ``{"fail": "load"}``."""
    try:
        with open(path, "rb") as f:
            first = f.readline(4096)
    except OSError as error:
        raise ProgramError(f"cannot read the image: {error}") from None
    if not first.startswith(_DIRECTIVE):
        return {}
    words = first[len(_DIRECTIVE) :].decode(errors="replace").split()
    return dict(w.split("=", 1) for w in words if "=" in w)


def _shape_of(device: Device) -> str:
    return "nvidia_gpu" if device.type == "GPU" else "fake_fpga"


def _with_loaded(device: Device, loaded: dict[str, dict[str, Any]]) -> Device:
    """The fake FPGA with what is loaded on it: the function trait, the image and the
    ``fpga_function`` service."""
    deployables = []
    services = []
    info = dict(device.vendor_board_info)
    for deployable in device.deployables:
        entry = loaded.get(deployable.name) if _programmable(deployable) else None
        if entry is None:
            deployables.append(deployable)
            continue
        trait = function_id_trait(entry["function_id"]) if entry.get("function_id") else None
        traits = deployable.traits + ((trait,) if trait else ())
        deployables.append(dataclasses.replace(deployable, traits=traits))
        info["bitstream_id"] = entry["image_uuid"]
        if entry.get("function_id"):
            info["function_id"] = entry["function_id"]
            details = {"region": deployable.name, "image_uuid": entry["image_uuid"]}
            if entry.get("interface_id"):
                details["interface_id"] = entry["interface_id"]
            services.append(Service("fpga_function", entry["function_id"], True, details))
    return dataclasses.replace(
        device,
        deployables=tuple(deployables),
        vendor_board_info=info,
        services=device.services + tuple(services),
    )


def _topology(bus: int) -> dict[str, Any]:
    """Where a simulated card on ``bus`` sits: in the slot of a root port on the bus before
    its own (``0000:3a:00.0`` above ``0000:3b:00.0``, as on many servers), its IOMMU group
    numbered after its bus. Derived from the bus alone, so the host's other seeded
    figures stay what they were."""
    return {"pcie_root": f"0000:{bus - 1:02x}:00.0", "iommu_group": bus}


def _fake_fpga(hostname: str, index: int, bus: int, rng: random.Random) -> Device:
    bus_hex = "0c" if index == 0 else f"{bus:02x}"
    suffix = "" if index == 0 else str(index)
    handles = tuple(
        AttachHandle(
            "TEST_PCI",
            {"domain": "0000", "bus": bus_hex, "device": f"{i // 8:02x}", "function": str(i % 8)},
        )
        for i in range(1, 17)
    )
    address = f"0000:{bus_hex}:00.0"
    return Device(
        type="FPGA",
        vendor="0xABCD",
        model="Fake FPGA",
        driver_name=FAKE_DRIVER,
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        **_topology(int(bus_hex, 16)),
        firmware_version="1.0",
        std_board_info={"device_id": "0xabcd", "class": "Fake class"},
        deployables=(
            Deployable(
                name=_sanitize(f"{hostname}_FakeDevice{suffix}"),
                num_accelerators=16,
                resource_class="FPGA",
                traits=("CUSTOM_FAKE_DEVICE",),
                attach_handles=handles,
                driver_name=FAKE_DRIVER,
                extra_attributes=((PROGRAM_FORMATS, FORMAT),),
            ),
        ),
    )


def _nvidia_gpu(hostname: str, index: int, bus: int, rng: random.Random) -> Device:
    product_id, model = rng.choice(_GPU_MODELS)
    address = f"0000:{bus:02x}:00.0"
    whole = whole_gpu(product_id, model in _MIG_PROFILES)
    return Device(
        type="GPU",
        vendor="10de",
        model=model,
        driver_name="nvidia_gpu",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=index % 2,
        **_topology(bus),
        firmware_version=f"9{rng.randint(0, 9)}.{rng.randint(0, 99):02d}.{rng.randint(0, 99):02d}",
        std_board_info={"product_id": product_id, "controller": "3D controller"},
        vendor_board_info={"serial": f"SIM{rng.randrange(10**12):012d}"},
        services=_gpu_services(model),
        deployables=(
            Deployable(
                name=_sanitize(f"{hostname}_{address}"),
                num_accelerators=1,
                resource_class=whole.resource_class,
                traits=whole.traits,
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
                driver_name="nvidia_gpu",
            ),
        ),
    )


def _gpu_services(model: str) -> tuple[Service, ...]:
    """The vGPU types and MIG profiles of the model, none configured."""
    vgpus = [
        Service(
            "vgpu",
            type_id,
            False,
            {"description": name, "available_instances": str(count), "instances": "0"},
        )
        for type_id, name, count in _VGPU_TYPES.get(model, [])
    ]
    migs = [
        Service(
            "mig",
            profile,
            False,
            {"instances": "0", "max_instances": str(count), "memory_mib": str(mib)},
        )
        for profile, count, mib in _MIG_PROFILES.get(model, [])
    ]
    return tuple(vgpus + migs)


SHAPES = {"fake_fpga": _fake_fpga, "nvidia_gpu": _nvidia_gpu}
