"""The intel_fpga driver: Intel FPGA cards (PAC Arria 10, N3000, D5005, N6000 …).

It reads both layouts the kernel has had for these cards:

* DFL, the upstream driver (``dfl-pci``; Documentation/fpga/dfl.rst,
  Documentation/ABI/testing/sysfs-platform-dfl-fme, sysfs-platform-dfl-port,
  sysfs-class-fpga-region): each card's container region
  ``/sys/class/fpga_region/regionN`` holds ``dfl-fme.N`` (``bitstream_id``,
  ``bitstream_metadata``, ``ports_num``) and ``dfl-port.M`` (``afu_id``); the FME's
  partial-reconfiguration regions ``dfl-fme.N/dfl-fme-region.K/fpga_region/regionJ``
  carry ``compat_id`` (the PR interface id).
* intel-fpga, the older out-of-tree OPAE driver Cyborg reads:
  ``/sys/class/fpga/intel-fpga-dev.N`` holds ``intel-fpga-fme.N`` (``pr/interface_id``)
  and ``intel-fpga-port.M`` (``afu_id``).

Shape (Cyborg's ``intel_fpga_driver``): one device per physical function, one
deployable, resource class FPGA. Without SR-IOV VFs the deployable has one PCI
attach handle (the PF); with VFs, ``num_accelerators`` is the number of VFs and
each VF is a PCI attach handle. Traits: CUSTOM_FPGA_INTEL, the board
(CUSTOM_FPGA_INTEL_<BOARD>, see ``BOARDS``), CUSTOM_FPGA_FUNCTION_ID_INTEL_<AFU ID>
per port and CUSTOM_FPGA_REGION_INTEL_<INTERFACE ID>, every one a valid Placement
trait name (``trait_suffix``). doc/drivers/intel_fpga.md has the details.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable

from exosuit.drivers import DriverContext
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.drivers.sysfs import PciFunction, Sysfs

__all__ = [
    "BOARDS",
    "INTEL_VENDOR_ID",
    "IntelFpgaDriver",
    "function_id_trait",
    "region_trait",
    "trait_suffix",
]

DRIVER_NAME = "intel_fpga"
INTEL_VENDOR_ID = "8086"
# Cyborg reports this driver's vendor as read from sysfs, "0x8086"; kept so that
# existing Cyborg clients see the same value (doc/drivers.md).
VENDOR = "0x8086"
MAX_TRAIT_LENGTH = 255

# (PCI device id, PCI subsystem device id or None for any) → (trait suffix, model).
# Physical functions of the boards the upstream dfl-pci driver lists
# (drivers/fpga/dfl-pci.c; bcce boards are told apart by their subsystem device id).
BOARDS: dict[tuple[str, str | None], tuple[str, str]] = {
    ("09c4", None): ("PAC_ARRIA10", "Intel PAC Arria 10 GX"),
    ("0b30", None): ("PAC_N3000", "Intel PAC N3000"),
    ("0b2b", None): ("PAC_D5005", "Intel PAC D5005"),
    ("bcce", "138d"): ("PAC_D5005", "Intel PAC D5005"),
    ("bcce", "1770"): ("N6000", "Intel FPGA N6000"),
    ("bcce", "1771"): ("N6001", "Intel FPGA N6001"),
    ("bcce", "17d4"): ("C6100", "Intel FPGA C6100"),
}
# Device ids that are FPGA physical functions even when no driver is bound.
_PF_DEVICE_IDS = frozenset(device for device, _ in BOARDS) | {"bcbd", "bcc0"}

_DFL_FME = re.compile(r"^dfl-fme\.\d+$")
_DFL_PORT = re.compile(r"^dfl-port\.\d+$")
_OPAE_FME = re.compile(r"^intel-fpga-fme\.\d+$")
_OPAE_PORT = re.compile(r"^intel-fpga-port\.\d+$")
_GUID = re.compile(r"^(?:0x)?\{?([0-9a-f]{8})-?([0-9a-f]{4})-?([0-9a-f]{4})-?([0-9a-f]{4})-?"
                   r"([0-9a-f]{12})\}?$", re.IGNORECASE)


def trait_suffix(value: str) -> str:
    """Normalise an id for use in a trait name (``^CUSTOM_[A-Z0-9_]+$``).

    A GUID, with or without dashes or braces (``d8424dc4-a4a3-c413-…``, ``D8424DC4A4A3…``),
    becomes its 32 upper-case hex digits, so the sysfs form and the UUID form name the
    same trait. Anything else is upper-cased and every run of other characters becomes
    one ``_``. Cyborg's bind code instead turns ``-`` into ``_-``, which is not a
    valid trait name.
    """
    value = value.strip()
    match = _GUID.match(value)
    if match:
        return "".join(match.groups()).upper()
    return re.sub(r"[^A-Z0-9]+", "_", value.upper()).strip("_")


def _trait(prefix: str, value: str) -> str | None:
    suffix = trait_suffix(value)
    if not suffix:
        return None
    return (prefix + suffix)[:MAX_TRAIT_LENGTH]


def function_id_trait(afu_id: str) -> str | None:
    """``CUSTOM_FPGA_FUNCTION_ID_INTEL_<AFU ID>`` for a port's ``afu_id``."""
    return _trait("CUSTOM_FPGA_FUNCTION_ID_INTEL_", afu_id)


def region_trait(interface_id: str) -> str | None:
    """``CUSTOM_FPGA_REGION_INTEL_<ID>`` for an FME's PR interface id (``compat_id``)."""
    return _trait("CUSTOM_FPGA_REGION_INTEL_", interface_id)


@dataclasses.dataclass
class _FpgaInfo:
    """What the FPGA driver (DFL or intel-fpga) exposes below one PCI function."""

    layout: str | None = None  # "dfl" or "intel-fpga"
    bitstream_id: str | None = None
    bitstream_metadata: str | None = None
    ports_num: str | None = None
    interface_ids: list[str] = dataclasses.field(default_factory=list)
    afu_ids: list[str] = dataclasses.field(default_factory=list)


class IntelFpgaDriver:
    """Implements [exosuit.drivers.base.Driver]."""

    name = DRIVER_NAME
    OPTIONS: list = []

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = Sysfs(context.sysfs_root)

    def discover(self) -> list[Device]:
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        infos = self._fpga_infos(functions)
        devices = []
        for function in functions.values():
            if not self._is_fpga_pf(function, infos):
                continue
            vfs = [functions[a] for a in function.virtfns if a in functions]
            devices.append(self._device(function, vfs, infos))
        return sorted(devices, key=lambda d: d.pci_address or "")

    @staticmethod
    def _is_fpga_pf(function: PciFunction, infos: dict[str, _FpgaInfo]) -> bool:
        if function.vendor_id != INTEL_VENDOR_ID or function.is_vf:
            return False
        return function.device_id in _PF_DEVICE_IDS or function.address in infos

    # -- reading the FPGA drivers' sysfs -------------------------------------------

    def _fpga_infos(self, functions: dict[str, PciFunction]) -> dict[str, _FpgaInfo]:
        """PCI address → what DFL or intel-fpga shows below that function."""
        infos: dict[str, _FpgaInfo] = {}
        for region in self.sysfs.listdir("class", "fpga_region"):
            base = ("class", "fpga_region", region)
            owner = self._owner(base, "fpga_region", functions)
            children = self.sysfs.listdir(*base)
            fmes = [c for c in children if _DFL_FME.match(c)]
            ports = [c for c in children if _DFL_PORT.match(c)]
            if owner is None or not (fmes or ports):
                continue  # a PR region below an FME, or not a PCI card
            info = infos.setdefault(owner, _FpgaInfo(layout="dfl"))
            for fme in fmes:
                self._read_fme(info, (*base, fme))
                for sub in self.sysfs.listdir(*base, fme):
                    if not sub.startswith("dfl-fme-region."):
                        continue
                    for pr in self.sysfs.listdir(*base, fme, sub, "fpga_region"):
                        compat = self.sysfs.read(*base, fme, sub, "fpga_region", pr, "compat_id")
                        _append(info.interface_ids, compat)
            for port in ports:
                _append(info.afu_ids, self.sysfs.read(*base, port, "afu_id"))
        for name in self.sysfs.listdir("class", "fpga"):
            if not name.startswith("intel-fpga-dev."):
                continue
            base = ("class", "fpga", name)
            owner = self._owner(base, "fpga", functions)
            if owner is None:
                continue
            info = infos.setdefault(owner, _FpgaInfo(layout="intel-fpga"))
            for child in self.sysfs.listdir(*base):
                if _OPAE_FME.match(child):
                    self._read_fme(info, (*base, child))
                    _append(info.interface_ids, self.sysfs.read(*base, child, "pr", "interface_id"))
                elif _OPAE_PORT.match(child):
                    _append(info.afu_ids, self.sysfs.read(*base, child, "afu_id"))
        return infos

    def _owner(self, base: tuple[str, ...], glue: str,
               functions: dict[str, PciFunction]) -> str | None:
        """The PCI function a class device sits below (``<pci>/<glue>/<name>``)."""
        real = os.path.realpath(self.sysfs.path(*base))
        parent = os.path.dirname(real)
        if os.path.basename(parent) != glue:
            return None
        address = os.path.basename(os.path.dirname(parent))
        return address if address in functions else None

    def _read_fme(self, info: _FpgaInfo, fme: tuple[str, ...]) -> None:
        info.bitstream_id = info.bitstream_id or self.sysfs.read(*fme, "bitstream_id")
        info.bitstream_metadata = (info.bitstream_metadata
                                   or self.sysfs.read(*fme, "bitstream_metadata"))
        info.ports_num = info.ports_num or self.sysfs.read(*fme, "ports_num")

    # -- building the device ---------------------------------------------------------

    def _device(self, pf: PciFunction, vfs: list[PciFunction],
                infos: dict[str, _FpgaInfo]) -> Device:
        info = infos.get(pf.address, _FpgaInfo())
        board = BOARDS.get((pf.device_id, pf.subsystem_device_id)) or BOARDS.get(
            (pf.device_id, None))
        # Ports live on the PF, or on VFs once released to them; all VFs of a PF
        # belong to its one region (as in Cyborg).
        afu_ids = list(info.afu_ids)
        for vf in vfs:
            for afu_id in infos.get(vf.address, _FpgaInfo()).afu_ids:
                _append(afu_ids, afu_id)
        traits = ["CUSTOM_FPGA_INTEL"]
        if board:
            traits.append(f"CUSTOM_FPGA_INTEL_{board[0]}")
        traits += _unique(function_id_trait(a) for a in afu_ids)
        traits += _unique(region_trait(i) for i in info.interface_ids)
        handles = tuple(AttachHandle("PCI", pci_cpid(f.address)) for f in (vfs or [pf]))
        vendor_board_info = {
            key: value for key, value in (
                ("layout", info.layout),
                ("bitstream_id", info.bitstream_id),
                ("bitstream_metadata", info.bitstream_metadata),
                ("ports_num", info.ports_num),
                ("interface_id", info.interface_ids[0] if info.interface_ids else None),
                ("afu_ids", ",".join(afu_ids) or None),
            ) if value is not None
        }
        return Device(
            type="FPGA",
            vendor=VENDOR,
            model=board[1] if board else f"Intel FPGA {INTEL_VENDOR_ID}:{pf.device_id}",
            driver_name=DRIVER_NAME,
            controlpath_id=pci_cpid(pf.address),
            pci_address=pf.address,
            numa_node=pf.numa_node,
            firmware_version=info.bitstream_id,
            std_board_info={"product_id": f"0x{pf.device_id}"},
            vendor_board_info=vendor_board_info,
            deployables=(
                Deployable(
                    name=f"{self.hostname}_{pf.address}",
                    num_accelerators=len(handles),
                    resource_class="FPGA",
                    traits=tuple(_unique(traits)),
                    attach_handles=handles,
                    driver_name=DRIVER_NAME,
                ),
            ),
        )


def _append(values: list[str], value: str | None) -> None:
    if value and value not in values:
        values.append(value)


def _unique(values: Iterable[str | None]) -> list[str]:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return seen
