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

Firmware: ``firmware_version`` is the FIM (the static region's ``bitstream_id``); the
card's MAX10 BMC versions go in ``vendor_board_info`` (``bmc_version``,
``bmcfw_version``), read from the BMC below the FME (DFL:
``dfl-fme.N/dfl_dev.K/spi_master/spiJ/spiJ.0/bmc{,fw}_version``, or
``dfl-fme.N/dfl_dev.K/bmc{,fw}_version``; sysfs-driver-intel-m10-bmc) or, for the
intel-fpga layout, from OPAE's ``fpgainfo fme`` run through the runner. Exosuit never
flashes firmware.

Shape (Cyborg's ``intel_fpga_driver``): one device per physical function, one
deployable, resource class FPGA. Without SR-IOV VFs the deployable has one PCI
attach handle (the PF); with VFs, ``num_accelerators`` is the number of VFs and
each VF is a PCI attach handle. Traits: CUSTOM_FPGA_INTEL, the board
(CUSTOM_FPGA_INTEL_<BOARD>, see ``BOARDS``), CUSTOM_FPGA_FUNCTION_ID_INTEL_<AFU ID>
per port and CUSTOM_FPGA_REGION_INTEL_<INTERFACE ID>, every one a valid Placement
trait name (``trait_suffix``). doc/drivers/intel_fpga.md has the details.

Programming (``Programmable``; format ``gbs``, reported as the deployable's
``program_formats`` on a card whose FME is visible): OPAE's ``fpgaconf --segment
0x<domain> --bus 0x<bus> --device 0x<device> --function 0x<function> <file.gbs>``
through the context's runner, which loads the green bitstream into the card's PR
region after checking its interface id. What is loaded is read back from sysfs: the
port's ``afu_id`` (the function) and the PR interface id (``compat_id`` or
``pr/interface_id``).

Services: each port's loaded function, kind ``fpga_function`` (name: its AFU id; details:
``region``, the port, and ``interface_id``). Install step (``Installable``):
``[intel_fpga] bind_driver`` (e.g. vfio-pci) for the functions handed out
(exosuit.drivers.binding). Usage (``UsageReader``): ``errors_total``, the error bits set
in the ports' ``errors/errors`` (sysfs-platform-dfl-port; the intel-fpga layout has the
same file). Health (``HealthReader``): the PF's PCIe AER counters, link and bus
(exosuit.drivers.health); errors latched in a port's ``errors/errors`` (``[health]
fpga_port_errors``, unhealthy by default: the port stays in error until they are cleared)
and in the FME's ``errors/catfatal_errors`` (unhealthy) and ``errors/nonfatal_errors``
(warning) (sysfs-platform-dfl-fme); the MAX10 BMC's sensors (the hwmon device of
intel-m10-bmc-hwmon below the BMC: a reading beyond its ``crit`` limit unhealthy, beyond
``max`` warning).

Containers (``ContainerDevice``): a function bound to vfio-pci gives ``/dev/vfio/<group>``;
otherwise the character devices of the ports (``/dev/dfl-port.N``,
``/dev/intel-fpga-port.N``) and FME (``/dev/dfl-fme.N``, ``/dev/intel-fpga-fme.N``) below
that function, named as the FPGA driver names its devices in sysfs, with
``FPGA_FUNCTION`` (the loaded AFU id) and ``FPGA_INTERFACE`` (the PR interface id).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import (
    HEALTH_OK,
    HEALTH_UNHEALTHY,
    HEALTH_WARNING,
    PROGRAM_FORMATS,
    AttachHandle,
    ContainerEdits,
    Deployable,
    Device,
    DeviceNode,
    Health,
    ImageFile,
    LoadedImage,
    ProgramError,
    Service,
    pci_cpid,
    trait_suffix,
)
from exosuit.drivers.binding import BindingInstall, bind_driver_option
from exosuit.drivers.container import VFIO_PCI, function_edits, handle_address
from exosuit.drivers.health import PciHealth, hwmon_health
from exosuit.drivers.sysfs import PciFunction

__all__ = [
    "BOARDS",
    "FORMAT",
    "FPGACONF_EXIT",
    "INTEL_VENDOR_ID",
    "IntelFpgaDriver",
    "function_id_trait",
    "parse_fpgainfo_fme",
    "region_trait",
    "trait_suffix",
]

DRIVER_NAME = "intel_fpga"
INTEL_VENDOR_ID = "8086"
# Cyborg reports this driver's vendor as read from sysfs, "0x8086"; kept so that
# existing Cyborg clients see the same value (doc/drivers.md).
VENDOR = "0x8086"
MAX_TRAIT_LENGTH = 255
FORMAT = "gbs"
DEFAULT_FPGACONF = "fpgaconf"
DEFAULT_FPGAINFO = "fpgainfo"

# fpgaconf's exit statuses (OPAE, tools/fpgaconf/fpgaconf.c) → (meaning, whether the
# device is known to be untouched: it refused before writing the PR region).
FPGACONF_EXIT: dict[int, tuple[str, bool]] = {
    1: ("invalid arguments", True),
    2: ("the GBS file could not be read", True),
    3: ("the FPGAs could not be enumerated", True),
    4: ("no compatible FPGA: the image's interface id is not this card's PR interface id", True),
    5: ("several FPGAs matched, or the partial reconfiguration failed", False),
    6: ("the device filter could not be set up", True),
    7: ("the device filter could not be set up", True),
    8: ("the device filter could not be set up", True),
}

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


class _Port(NamedTuple):
    """One port (AFU slot) as the FPGA driver shows it."""

    name: str  # dfl-port.0, intel-fpga-port.1
    afu_id: str | None
    path: tuple[str, ...]  # its sysfs directory, from sys/


@dataclasses.dataclass
class _FpgaInfo:
    """What the FPGA driver (DFL or intel-fpga) exposes below one PCI function."""

    layout: str | None = None  # "dfl" or "intel-fpga"
    bitstream_id: str | None = None
    bitstream_metadata: str | None = None
    ports_num: str | None = None
    interface_ids: list[str] = dataclasses.field(default_factory=list)
    afu_ids: list[str] = dataclasses.field(default_factory=list)
    ports: list[_Port] = dataclasses.field(default_factory=list)
    has_fme: bool = False
    fmes: list[str] = dataclasses.field(default_factory=list)  # dfl-fme.0, intel-fpga-fme.1
    bmc_version: str | None = None
    bmcfw_version: str | None = None
    fme_paths: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    bmc_paths: list[tuple[str, ...]] = dataclasses.field(default_factory=list)


class IntelFpgaDriver(BindingInstall):
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Programmable],
    [exosuit.drivers.base.Installable], [exosuit.drivers.base.UsageReader],
    [exosuit.drivers.base.HealthReader] and [exosuit.drivers.base.ContainerDevice]."""

    name = DRIVER_NAME
    OPTIONS: list[cfg.Opt] = [
        cfg.StrOpt(
            "fpgaconf_path",
            default=DEFAULT_FPGACONF,
            help="OPAE's fpgaconf, which loads a .gbs image into a card's partial "
            "reconfiguration region (a name is looked up in PATH).",
        ),
        cfg.IntOpt(
            "program_timeout",
            default=300,
            min=1,
            help="Seconds fpgaconf may take to load an image before the load counts as failed.",
        ),
        cfg.StrOpt(
            "fpgainfo_path",
            default=DEFAULT_FPGAINFO,
            help="OPAE's fpgainfo, run as `fpgainfo fme` to read the BMC firmware versions "
            "of cards under the out-of-tree intel-fpga driver (DFL shows them in sysfs). "
            "Empty: never run it.",
        ),
        bind_driver_option(),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = context.open_sysfs()
        self.state_dir = context.state_dir
        self.runner = context.runner
        settings: Mapping[str, Any] = context.settings
        self.fpgaconf = settings.get("fpgaconf_path") or DEFAULT_FPGACONF
        self.program_timeout = float(settings.get("program_timeout") or 300)
        self.fpgainfo = settings.get("fpgainfo_path", DEFAULT_FPGAINFO)
        self.health_settings = context.health_settings()
        self.pci_health = PciHealth(self.sysfs, self.health_settings)

    def discover(self) -> list[Device]:
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        infos = self._fpga_infos(functions)
        if any(i.layout == "intel-fpga" and i.has_fme for i in infos.values()):
            for address, versions in self._fpgainfo_bmc().items():
                info = infos.get(address)
                if info is not None:
                    info.bmc_version = info.bmc_version or versions.get("bmc_version")
                    info.bmcfw_version = info.bmcfw_version or versions.get("bmcfw_version")
        devices = []
        for function in functions.values():
            if not self._is_fpga_pf(function, infos):
                continue
            vfs = [functions[a] for a in function.virtfns if a in functions]
            devices.append(self._device(function, vfs, infos))
        return sorted(devices, key=lambda d: d.pci_address or "")

    # -- containers ------------------------------------------------------------------

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice]: the vfio nodes of a function
        bound to vfio-pci, else the port and FME devices the FPGA driver shows below it."""
        address = handle_address(attach_handle)
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        function = functions.get(address)
        if function is None:
            raise ValueError(f"there is no PCI function {address} on this host")
        if function.driver == VFIO_PCI:
            return function_edits(self.sysfs, address)
        info = self._fpga_infos(functions).get(address)
        if info is None or not (info.ports or info.fmes):
            raise ValueError(
                f"{address} shows no FPGA port or FME (bound to {function.driver or 'no driver'})"
                f": bind it to dfl-pci, or to {VFIO_PCI} to hand it over whole"
            )
        nodes = [DeviceNode(f"/dev/{port.name}") for port in info.ports]
        nodes += [DeviceNode(f"/dev/{fme}") for fme in info.fmes]
        env = {}
        if info.afu_ids:
            env["FPGA_FUNCTION"] = info.afu_ids[0]
        interfaces = info.interface_ids or self._card_interfaces(function, functions)
        if interfaces:
            env["FPGA_INTERFACE"] = interfaces[0]
        return function_edits(self.sysfs, address, nodes=nodes, env=env)

    def _card_interfaces(
        self, function: PciFunction, functions: dict[str, PciFunction]
    ) -> list[str]:
        """The PR interface ids of a VF's card (its PF holds the FME)."""
        if function.physfn is None:
            return []
        return self._fpga_infos(functions).get(function.physfn, _FpgaInfo()).interface_ids

    # -- usage -----------------------------------------------------------------------

    def usage(self, device: Device) -> Mapping[str, float]:
        """Implements [exosuit.drivers.base.UsageReader]: ``errors_total``, the error bits
        set in the card's ports' ``errors/errors`` ({} when no port shows the file)."""
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        pf = functions.get(device.pci_address or "")
        if pf is None:
            return {}
        errors = None
        for port in self._ports(pf, self._fpga_infos(functions)):
            value = self.sysfs.read(*port.path, "errors", "errors")
            try:
                bits = bin(int(value, 16)).count("1") if value else None
            except ValueError:
                bits = None
            if bits is not None:
                errors = (errors or 0) + bits
        return {} if errors is None else {"errors_total": float(errors)}

    # -- health ----------------------------------------------------------------------

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the PF's AER counters, link and
        bus; the errors latched in its ports and FME; its BMC's sensors."""
        address = device.pci_address or ""
        findings = [self.pci_health.check(address)]
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        pf = functions.get(address)
        if pf is None:
            return findings[0]
        infos = self._fpga_infos(functions)
        port_state = self.health_settings.severity("fpga_port_errors")
        for port in self._ports(pf, infos):
            value = _hex(self.sysfs.read(*port.path, "errors", "errors"))
            if value and port_state != HEALTH_OK:
                reason = f"FPGA port {port.name} has errors latched ({value:#x})"
                findings.append(Health(port_state, (reason,)))
        info = infos.get(address, _FpgaInfo())
        for fme in info.fme_paths:
            for name, state, words in (
                ("catfatal_errors", HEALTH_UNHEALTHY, "catastrophic or fatal"),
                ("nonfatal_errors", HEALTH_WARNING, "non-fatal"),
            ):
                value = _hex(self.sysfs.read(*fme, "errors", name))
                if value:
                    reason = f"FPGA {fme[-1]} has {words} errors latched ({value:#x})"
                    findings.append(Health(state, (reason,)))
        for bmc in info.bmc_paths:
            findings.append(hwmon_health(self.sysfs, *bmc, what="BMC sensor"))
            for child in self.sysfs.listdir(*bmc):
                if "hwmon" in child and child != "hwmon":
                    findings.append(hwmon_health(self.sysfs, *bmc, child, what="BMC sensor"))
        return Health.worst(*findings)

    # -- programming -----------------------------------------------------------------

    def program(self, device: Device, deployable: Deployable, image: ImageFile) -> None:
        """Implements [exosuit.drivers.base.Programmable]: fpgaconf loads the image."""
        if image.format != FORMAT:
            raise ProgramError(
                f"intel_fpga loads {FORMAT} images, not {image.format}", untouched=True
            )
        if device.pci_address is None:
            raise ProgramError(f"{deployable.name} has no PCI address", untouched=True)
        cpid = pci_cpid(device.pci_address)
        argv = [
            self.fpgaconf,
            "--segment",
            f"0x{cpid['domain']}",
            "--bus",
            f"0x{cpid['bus']}",
            "--device",
            f"0x{cpid['device']}",
            "--function",
            f"0x{cpid['function']}",
            image.path,
        ]
        try:
            result = self.runner.run(argv, timeout=self.program_timeout)
        except FileNotFoundError:
            raise ProgramError(f"{self.fpgaconf} is not installed", untouched=True) from None
        except subprocess.TimeoutExpired:
            raise ProgramError(
                f"{self.fpgaconf} did not finish within {self.program_timeout:g} s"
            ) from None
        if result.returncode != 0:
            meaning, untouched = FPGACONF_EXIT.get(result.returncode, ("the load failed", False))
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise ProgramError(
                f"fpgaconf exited {result.returncode} ({meaning})"
                + (f": {detail[-1]}" if detail else ""),
                untouched=untouched,
            )

    def loaded(self, device: Device, deployable: Deployable) -> LoadedImage | None:
        """Implements [exosuit.drivers.base.Programmable]: the port's AFU id and the PR
        interface id, read from sysfs now."""
        if device.pci_address is None:
            return None
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        pf = functions.get(device.pci_address)
        if pf is None:
            return None
        info, afu_ids = self._card(pf, functions, self._fpga_infos(functions))
        if info.layout is None:
            return None
        return LoadedImage(
            function_id=afu_ids[0] if afu_ids else None,
            interface_id=info.interface_ids[0] if info.interface_ids else None,
        )

    @staticmethod
    def _card(
        pf: PciFunction, functions: dict[str, PciFunction], infos: dict[str, _FpgaInfo]
    ) -> tuple[_FpgaInfo, list[str]]:
        """What the FPGA driver shows of one card, and the AFU ids of its ports: ports
        live on the PF, or on VFs once released to them (all of one region, as in
        Cyborg)."""
        info = infos.get(pf.address, _FpgaInfo())
        afu_ids = list(info.afu_ids)
        for address in pf.virtfns:
            if address in functions:
                for afu_id in infos.get(address, _FpgaInfo()).afu_ids:
                    _append(afu_ids, afu_id)
        return info, afu_ids

    @staticmethod
    def _ports(pf: PciFunction, infos: dict[str, _FpgaInfo]) -> list[_Port]:
        """The card's ports the host sees: on the PF, then on its VFs."""
        ports = list(infos.get(pf.address, _FpgaInfo()).ports)
        for address in pf.virtfns:
            ports += infos.get(address, _FpgaInfo()).ports
        return ports

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
                afu_id = self.sysfs.read(*base, port, "afu_id")
                _append(info.afu_ids, afu_id)
                info.ports.append(_Port(port, afu_id, (*base, port)))
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
                    afu_id = self.sysfs.read(*base, child, "afu_id")
                    _append(info.afu_ids, afu_id)
                    info.ports.append(_Port(child, afu_id, (*base, child)))
        return infos

    def _owner(
        self, base: tuple[str, ...], glue: str, functions: dict[str, PciFunction]
    ) -> str | None:
        """The PCI function a class device sits below (``<pci>/<glue>/<name>``)."""
        real = os.path.realpath(self.sysfs.path(*base))
        parent = os.path.dirname(real)
        if os.path.basename(parent) != glue:
            return None
        address = os.path.basename(os.path.dirname(parent))
        return address if address in functions else None

    def _read_fme(self, info: _FpgaInfo, fme: tuple[str, ...]) -> None:
        info.has_fme = True
        info.fmes.append(fme[-1])
        info.fme_paths.append(fme)
        for child in self.sysfs.listdir(*fme):
            if child.startswith("dfl_dev."):
                self._read_bmc(info, (*fme, child))
        info.bitstream_id = info.bitstream_id or self.sysfs.read(*fme, "bitstream_id")
        info.bitstream_metadata = info.bitstream_metadata or self.sysfs.read(
            *fme, "bitstream_metadata"
        )
        info.ports_num = info.ports_num or self.sysfs.read(*fme, "ports_num")

    def _read_bmc(self, info: _FpgaInfo, dev: tuple[str, ...]) -> None:
        """The MAX10 BMC's versions, on a DFL sub-device or on the SPI device below it."""
        places = [dev]
        for master in self.sysfs.listdir(*dev, "spi_master"):
            for spi in self.sysfs.listdir(*dev, "spi_master", master):
                places.append((*dev, "spi_master", master, spi))
        for place in places:
            version = self.sysfs.read(*place, "bmc_version")
            info.bmc_version = info.bmc_version or version
            info.bmcfw_version = info.bmcfw_version or self.sysfs.read(*place, "bmcfw_version")
            if version is not None:
                info.bmc_paths.append(place)

    def _fpgainfo_bmc(self) -> dict[str, dict[str, str]]:
        """PCI address → BMC versions, from ``fpgainfo fme`` ({} without the tool)."""
        if not self.fpgainfo:
            return {}
        try:
            result = self.runner.run([self.fpgainfo, "fme"], timeout=30)
        except (OSError, subprocess.SubprocessError):
            return {}  # not installed (CommandNotRecorded in tests), or hung
        return parse_fpgainfo_fme(result.stdout) if result.returncode == 0 else {}

    # -- building the device ---------------------------------------------------------

    def _device(
        self, pf: PciFunction, vfs: list[PciFunction], infos: dict[str, _FpgaInfo]
    ) -> Device:
        info, afu_ids = self._card(pf, {f.address: f for f in vfs}, infos)
        board = BOARDS.get((pf.device_id, pf.subsystem_device_id)) or BOARDS.get(
            (pf.device_id, None)
        )
        traits = ["CUSTOM_FPGA_INTEL"]
        if board:
            traits.append(f"CUSTOM_FPGA_INTEL_{board[0]}")
        traits += _unique(function_id_trait(a) for a in afu_ids)
        traits += _unique(region_trait(i) for i in info.interface_ids)
        handles = tuple(AttachHandle("PCI", pci_cpid(f.address)) for f in (vfs or [pf]))
        interface = {"interface_id": info.interface_ids[0]} if info.interface_ids else {}
        services = tuple(
            Service("fpga_function", port.afu_id, True, {"region": port.name, **interface})
            for port in self._ports(pf, infos)
            if port.afu_id
        )
        vendor_board_info = {
            key: value
            for key, value in (
                ("layout", info.layout),
                ("bitstream_id", info.bitstream_id),
                ("bitstream_metadata", info.bitstream_metadata),
                ("ports_num", info.ports_num),
                ("interface_id", info.interface_ids[0] if info.interface_ids else None),
                ("afu_ids", ",".join(afu_ids) or None),
                ("bmc_version", info.bmc_version),
                ("bmcfw_version", info.bmcfw_version),
            )
            if value is not None
        }
        return Device(
            type="FPGA",
            vendor=VENDOR,
            model=board[1] if board else f"Intel FPGA {INTEL_VENDOR_ID}:{pf.device_id}",
            driver_name=DRIVER_NAME,
            controlpath_id=pci_cpid(pf.address),
            pci_address=pf.address,
            numa_node=pf.numa_node,
            pcie_root=pf.pcie_root,
            iommu_group=pf.iommu_group,
            firmware_version=info.bitstream_id,
            std_board_info={"product_id": f"0x{pf.device_id}"},
            vendor_board_info=vendor_board_info,
            services=services,
            deployables=(
                Deployable(
                    name=f"{self.hostname}_{pf.address}",
                    num_accelerators=len(handles),
                    resource_class="FPGA",
                    traits=tuple(_unique(traits)),
                    attach_handles=handles,
                    driver_name=DRIVER_NAME,
                    # fpgaconf reaches the PR region through the FME: only a card
                    # whose FME the host sees can be programmed here.
                    extra_attributes=((PROGRAM_FORMATS, FORMAT),) if info.has_fme else (),
                ),
            ),
        )


_BMC_LINE = re.compile(
    r"^Board Management Controller,.*?\b(?P<what>NIOS FW|Build) version:?\s*(?P<value>\S+)",
    re.IGNORECASE,
)
_FIELD = re.compile(r"^(?P<key>\S.*?)\s+:\s+(?P<value>.*?)\s*$")


def parse_fpgainfo_fme(output: str) -> dict[str, dict[str, str]]:
    """``fpgainfo fme``'s BMC versions by the FME's PCI address (lower case).

    fpgainfo prints, per card, the BMC lines (``Board Management Controller, MAX10 NIOS
    FW version: D.2.0.12``, ``… Build version: D.2.0.5``) and then the FME block, whose
    ``PCIe s:b:d.f`` line names the card. Unknown lines are ignored.
    """
    found: dict[str, dict[str, str]] = {}
    pending: dict[str, str] = {}
    for line in output.splitlines():
        line = line.strip()
        bmc = _BMC_LINE.match(line)
        if bmc:
            key = "bmcfw_version" if bmc["what"].upper() == "NIOS FW" else "bmc_version"
            pending[key] = bmc["value"]
            continue
        field = _FIELD.match(line)
        if field and field["key"].lower() == "pcie s:b:d.f":
            found[field["value"].lower()] = pending
            pending = {}
    return {address: versions for address, versions in found.items() if versions}


def _hex(value: str | None) -> int:
    """An errors file's bits (``0x11``); 0 when absent or unreadable."""
    try:
        return int(value, 16) if value else 0
    except ValueError:
        return 0


def _append(values: list[str], value: str | None) -> None:
    if value and value not in values:
        values.append(value)


def _unique(values: Iterable[str | None]) -> list[str]:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return seen
