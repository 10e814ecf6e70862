"""The xilinx_fpga driver: Xilinx/AMD Alveo cards (PCI vendor 10ee).

An Alveo card shows two physical functions in one slot: the management PF
(function 0, driver ``xclmgmt``) and the user PF (function 1, driver ``xocl``). As
in Cyborg's ``xilinx_fpga_driver``, the two are one device with one deployable
(``num_accelerators`` 1, resource class FPGA) and two PCI attach handles, because a
guest needs both to load and run an xclbin. Traits: CUSTOM_FPGA_XILINX and
CUSTOM_FPGA_PRODUCT_ID_<management PF's device id>.

Everything comes from sysfs (vendor, device, class, the bound driver), not lspci.
The shell (the flashed platform, reported as ``firmware_version``) comes from the
``xclmgmt`` feature ROM in sysfs (``<mgmt PF>/rom.*/VBNV``) when the driver exposes
it, else from ``xbmgmt examine`` run through the context's runner, else it is None.
doc/drivers/xilinx_fpga.md has the details.

Programming (``Programmable``; format ``xclbin``, the deployable's ``program_formats``
when the management PF is held by ``xclmgmt``): XRT's ``xbmgmt program --device <mgmt
PF> --user <file.xclbin>`` through the runner. What is loaded is read back as the
xclbin UUID that ``xbutil examine --device <user PF> --report dynamic-regions`` shows
(sysfs ``xclbinuuid`` when xbutil cannot say), with the shell's interface UUID. The
loaded xclbin is also reported at discovery, from the user PF's ``xclbinuuid``, as
the trait ``CUSTOM_FPGA_FUNCTION_ID_XILINX_<UUID>``, ``vendor_board_info``'s
``xclbin_uuid`` and the service ``fpga_function`` (name: the xclbin UUID; details:
``interface_id``, the shell's interface UUID).

Install step (``Installable``): ``[xilinx_fpga] bind_driver`` (e.g. vfio-pci) for both
PFs of a card (exosuit.drivers.binding), which a VM needs together.

Containers (``ContainerDevice``), per attach handle: a PF bound to vfio-pci gives
``/dev/vfio/<group>``; the management PF on ``xclmgmt`` gives ``/dev/xclmgmt<id>``, XRT's
name for it (``id`` = domain << 16 | bus << 8 | devfn, XRT's ``XOCL_DEV_ID``: no sysfs
attribute names the node); the user PF on ``xocl`` its DRM render node
(``/dev/dri/renderD<n>``, from its ``drm/`` directory). ``FPGA_FUNCTION``: the loaded
xclbin's UUID; ``FPGA_INTERFACE``: the shell's interface UUID.

Health (``HealthReader``): the device's PCIe AER counters, link and bus
(exosuit.drivers.health).
"""

from __future__ import annotations

import re
import subprocess
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
    LoadedImage,
    ProgramError,
    Service,
    pci_cpid,
    trait_suffix,
)
from exosuit.drivers.binding import BindingInstall, bind_driver_option
from exosuit.drivers.container import function_edits, handle_address
from exosuit.drivers.health import PciHealth
from exosuit.drivers.runner import CommandResult
from exosuit.drivers.sysfs import PciFunction

__all__ = [
    "ALVEO_BOARDS",
    "FORMAT",
    "XILINX_VENDOR_ID",
    "XilinxFpgaDriver",
    "function_id_trait",
    "parse_xbmgmt_examine",
    "parse_xbutil_xclbin_uuid",
    "xrt_device_id",
]

DRIVER_NAME = "xilinx_fpga"
XILINX_VENDOR_ID = "10ee"
PROCESSING_ACCELERATOR_CLASS = "12"
MGMT_DRIVER = "xclmgmt"
USER_DRIVER = "xocl"

# Management PF device id → (user PF device id, model), for XDMA/QDMA shells of
# the Alveo data-center cards.
ALVEO_BOARDS: dict[str, tuple[str, str]] = {
    "5000": ("5001", "Alveo U200"),
    "5004": ("5005", "Alveo U250"),
    "500c": ("500d", "Alveo U280"),
    "5020": ("5021", "Alveo U50"),
}
_USER_IDS = {user: (mgmt, model) for mgmt, (user, model) in ALVEO_BOARDS.items()}

DEFAULT_XBMGMT = "/opt/xilinx/xrt/bin/xbmgmt"
DEFAULT_XBUTIL = "/opt/xilinx/xrt/bin/xbutil"
FORMAT = "xclbin"
FUNCTION_TRAIT_PREFIX = "CUSTOM_FPGA_FUNCTION_ID_XILINX_"
_NO_XCLBIN = "0" * 32


class XilinxFpgaDriver(BindingInstall):
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Programmable],
    [exosuit.drivers.base.Installable], [exosuit.drivers.base.HealthReader] and
    [exosuit.drivers.base.ContainerDevice]."""

    name = DRIVER_NAME
    OPTIONS = [
        cfg.StrOpt(
            "xbmgmt_path",
            default=DEFAULT_XBMGMT,
            help="XRT's xbmgmt, run as `xbmgmt examine --device <mgmt PF>` to read a "
            "card's shell when the xclmgmt driver does not show it in sysfs. "
            "Empty: never run it.",
        ),
        cfg.IntOpt(
            "tool_timeout",
            default=30,
            min=1,
            help="Seconds xbmgmt may take before the shell is reported as unknown.",
        ),
        cfg.StrOpt(
            "xbutil_path",
            default=DEFAULT_XBUTIL,
            help="XRT's xbutil, run as `xbutil examine --device <user PF> --report "
            "dynamic-regions` to read back the loaded xclbin after a program.",
        ),
        cfg.IntOpt(
            "program_timeout",
            default=300,
            min=1,
            help="Seconds `xbmgmt program` may take to load an xclbin before the load "
            "counts as failed.",
        ),
        bind_driver_option(),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = context.open_sysfs()
        self.pci_health = PciHealth(self.sysfs, context.health_settings())
        self.state_dir = context.state_dir
        self.runner = context.runner
        settings: Mapping[str, Any] = context.settings
        self.xbmgmt = settings.get("xbmgmt_path", DEFAULT_XBMGMT)
        self.timeout = float(settings.get("tool_timeout") or 30)
        self.xbutil = settings.get("xbutil_path", DEFAULT_XBUTIL)
        self.program_timeout = float(settings.get("program_timeout") or 300)

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the function's PCIe AER
        counters, link and bus (exosuit.drivers.health)."""
        return self.pci_health.check(device.pci_address or "")

    def discover(self) -> list[Device]:
        cards: dict[tuple[str, str, str], list[PciFunction]] = {}
        for function in self.sysfs.pci_functions():
            if self._is_alveo_function(function):
                cpid = pci_cpid(function.address)
                cards.setdefault((cpid["domain"], cpid["bus"], cpid["device"]), []).append(function)
        return [
            self._device(sorted(functions, key=lambda f: f.address))
            for _, functions in sorted(cards.items())
        ]

    def _is_alveo_function(self, function: PciFunction) -> bool:
        # Vendor first: Cyborg's Inspur driver picked up other vendors' FPGAs
        # (bug 1949534). A Xilinx function that is not a processing accelerator
        # (a custom XDMA design, a bridge) counts only when XRT's drivers hold it.
        if function.vendor_id != XILINX_VENDOR_ID or function.is_vf:
            return False
        return function.base_class == PROCESSING_ACCELERATOR_CLASS or function.driver in (
            MGMT_DRIVER,
            USER_DRIVER,
        )

    def _is_mgmt(self, function: PciFunction) -> bool:
        if function.driver in (MGMT_DRIVER, USER_DRIVER):
            return function.driver == MGMT_DRIVER
        if self.sysfs.read("bus", "pci", "devices", function.address, "mgmt_pf") is not None:
            return True
        if function.device_id in ALVEO_BOARDS or function.device_id in _USER_IDS:
            return function.device_id in ALVEO_BOARDS
        # Unbound (or bound to vfio-pci) and unknown: function 0 is management.
        return function.address.endswith(".0")

    def _device(self, functions: list[PciFunction]) -> Device:
        mgmt = next((f for f in functions if self._is_mgmt(f)), None)
        user = next((f for f in functions if f is not mgmt), None)
        # A card whose user PF is missing (or whose management PF is) is reported
        # with what is there: the control path is the management PF when present.
        primary = mgmt or functions[0]
        product_id = primary.device_id
        model = (
            ALVEO_BOARDS.get(product_id, (None, None))[1]
            or _USER_IDS.get(product_id, (None, None))[1]
            or f"Xilinx FPGA {XILINX_VENDOR_ID}:{product_id}"
        )
        shell = self._shell(mgmt) if mgmt else {}
        xclbin = self._sysfs_xclbin(user) if user else None
        vendor_board_info = {
            "mgmt_pf": mgmt.address if mgmt else None,
            "user_pf": user.address if user else None,
            **shell,
            "xclbin_uuid": xclbin,
        }
        traits = ["CUSTOM_FPGA_XILINX", f"CUSTOM_FPGA_PRODUCT_ID_{product_id.upper()}"]
        trait = function_id_trait(xclbin) if xclbin else None
        if trait:
            traits.append(trait)
        # xbmgmt loads an xclbin through the management PF's xclmgmt driver.
        programmable = mgmt is not None and mgmt.driver == MGMT_DRIVER
        handles = tuple(AttachHandle("PCI", pci_cpid(f.address)) for f in functions)
        services: tuple[Service, ...] = ()
        if xclbin:
            interfaces = (
                self.sysfs.read("bus", "pci", "devices", mgmt.address, "interface_uuids") or ""
                if mgmt
                else ""
            ).split()
            details = {"interface_id": interfaces[0]} if interfaces else {}
            services = (Service("fpga_function", xclbin, True, details),)
        return Device(
            type="FPGA",
            vendor=XILINX_VENDOR_ID,
            model=model,
            driver_name=DRIVER_NAME,
            controlpath_id=pci_cpid(primary.address),
            pci_address=primary.address,
            numa_node=primary.numa_node,
            pcie_root=primary.pcie_root,
            iommu_group=primary.iommu_group,
            firmware_version=shell.get("shell"),
            std_board_info={
                "product_id": product_id,
                "controller": "Processing accelerators"
                if primary.base_class == PROCESSING_ACCELERATOR_CLASS
                else f"PCI class {primary.class_code}",
            },
            vendor_board_info={k: v for k, v in vendor_board_info.items() if v is not None},
            services=services,
            deployables=(
                Deployable(
                    name=f"{self.hostname}_{primary.address}",
                    num_accelerators=1,
                    resource_class="FPGA",
                    traits=tuple(traits),
                    attach_handles=handles,
                    driver_name=DRIVER_NAME,
                    extra_attributes=((PROGRAM_FORMATS, FORMAT),) if programmable else (),
                ),
            ),
        )

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice]: the vfio nodes of a PF bound
        to vfio-pci, ``/dev/xclmgmt<id>`` of a management PF on xclmgmt, the DRM render
        node of a user PF on xocl."""
        address = handle_address(attach_handle)
        function = self.sysfs.pci_function(address)
        if function is None:
            raise ValueError(f"there is no PCI function {address} on this host")
        nodes = []
        if function.driver == MGMT_DRIVER:
            nodes.append(DeviceNode(f"/dev/xclmgmt{xrt_device_id(address)}"))
        env = {}
        xclbin = device.vendor_board_info.get("xclbin_uuid")
        if xclbin:
            env["FPGA_FUNCTION"] = xclbin
        mgmt = device.vendor_board_info.get("mgmt_pf")
        interfaces = (
            self.sysfs.read("bus", "pci", "devices", mgmt, "interface_uuids") if mgmt else None
        )
        if interfaces and interfaces.split():
            env["FPGA_INTERFACE"] = interfaces.split()[0]
        return function_edits(self.sysfs, address, nodes=nodes, env=env)

    def _sysfs_xclbin(self, function: PciFunction) -> str | None:
        """The UUID of the xclbin XRT's driver says is loaded (``xclbinuuid``), or None."""
        value = self.sysfs.read("bus", "pci", "devices", function.address, "xclbinuuid")
        if not value or trait_suffix(value) in ("", _NO_XCLBIN):
            return None
        return value.strip().lower()

    # -- programming -----------------------------------------------------------------

    def program(self, device: Device, deployable: Deployable, image: ImageFile) -> None:
        """Implements [exosuit.drivers.base.Programmable]: ``xbmgmt program --user``."""
        if image.format != FORMAT:
            raise ProgramError(
                f"xilinx_fpga loads {FORMAT} images, not {image.format}", untouched=True
            )
        mgmt = device.vendor_board_info.get("mgmt_pf")
        if not mgmt:
            raise ProgramError(f"{deployable.name} has no management PF", untouched=True)
        argv = [self.xbmgmt or DEFAULT_XBMGMT, "program", "--device", mgmt, "--user", image.path]
        try:
            result = self.runner.run(argv, timeout=self.program_timeout)
        except FileNotFoundError:
            raise ProgramError(f"{argv[0]} is not installed", untouched=True) from None
        except subprocess.TimeoutExpired:
            raise ProgramError(
                f"{argv[0]} did not finish within {self.program_timeout:g} s"
            ) from None
        if result.returncode != 0:
            # XRT documents no exit statuses: the device may have been touched.
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise ProgramError(
                f"xbmgmt program exited {result.returncode}" + (f": {detail[-1]}" if detail else "")
            )

    def loaded(self, device: Device, deployable: Deployable) -> LoadedImage | None:
        """Implements [exosuit.drivers.base.Programmable]: the loaded xclbin's UUID (xbutil,
        else sysfs) and the shell's interface UUID."""
        info = device.vendor_board_info
        functions = {
            f.address: f
            for f in self.sysfs.pci_functions()
            if f.address in (info.get("mgmt_pf"), info.get("user_pf"))
        }
        xclbin = None
        user = info.get("user_pf")
        if user and self.xbutil:
            try:
                result = self.runner.run(
                    [self.xbutil, "examine", "--device", user, "--report", "dynamic-regions"],
                    timeout=self.timeout,
                )
                xclbin = parse_xbutil_xclbin_uuid(result)
            except (OSError, subprocess.SubprocessError):
                xclbin = None  # no xbutil here: sysfs says it too
        if xclbin is None:
            for address in (user, info.get("mgmt_pf")):
                if address in functions:
                    xclbin = xclbin or self._sysfs_xclbin(functions[address])
        interfaces = (
            self.sysfs.read("bus", "pci", "devices", info.get("mgmt_pf") or "", "interface_uuids")
            or ""
        ).split()
        if xclbin is None and not interfaces:
            return None
        return LoadedImage(function_id=xclbin, interface_id=interfaces[0] if interfaces else None)

    def _shell(self, mgmt: PciFunction) -> dict[str, str]:
        """The shell (platform) of a card, from sysfs, else from xbmgmt, else {}."""
        base = ("bus", "pci", "devices", mgmt.address)
        for rom in self.sysfs.listdir(*base):
            if not rom.startswith("rom."):
                continue
            vbnv = self.sysfs.read(*base, rom, "VBNV")
            if vbnv:
                found = {"shell": vbnv, "shell_source": "sysfs"}
                fpga = self.sysfs.read(*base, rom, "FPGA")
                if fpga:
                    found["fpga_part"] = fpga
                uuids = (self.sysfs.read(*base, "interface_uuids") or "").split()
                if uuids:
                    found["interface_uuid"] = uuids[0]
                return found
        if not self.xbmgmt or mgmt.driver != MGMT_DRIVER:
            return {}  # xbmgmt talks to xclmgmt; a PF given to vfio-pci has no shell here
        try:
            result = self.runner.run(
                [self.xbmgmt, "examine", "--device", mgmt.address], timeout=self.timeout
            )
        except (OSError, subprocess.SubprocessError):
            # The tool is absent (FileNotFoundError; CommandNotRecorded in tests),
            # not runnable, or hung: the shell is unknown, the card is still reported.
            return {}
        return parse_xbmgmt_examine(result, mgmt.address)


_HEADER = re.compile(r"^\s*(?:\d+/\d+\s+)?\[(?P<bdf>[0-9a-fA-F:.]+)\]\s*:\s*(?P<shell>\S+)")
_FIELD = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*?)\s*$")


def parse_xbmgmt_examine(result: CommandResult, address: str) -> dict[str, str]:
    """Shell and satellite-controller version from ``xbmgmt examine --device <bdf>``.

    Reads the "Flashable partitions running on FPGA" section (what is loaded now,
    not what is installed on the host); falls back to the device header line
    ``[<bdf>] : <shell>``. A failed run or an unknown format gives ``{}``.
    """
    if result.returncode != 0:
        return {}
    found: dict[str, str] = {}
    section = ""
    for line in result.stdout.splitlines():
        header = _HEADER.match(line)
        if header and header["bdf"].lower() == address.lower():
            found.setdefault("shell", header["shell"])
            continue
        if line and not line[0].isspace():
            section = line.strip().lower()
            continue
        field = _FIELD.match(line)
        if field and section == "flashable partitions running on fpga":
            if field["key"] == "Platform" and field["value"]:
                found["shell"] = field["value"]
            elif field["key"] == "SC Version" and field["value"]:
                found["sc_version"] = field["value"]
    if found:
        found["shell_source"] = "xbmgmt"
    return found


def function_id_trait(xclbin_uuid: str) -> str | None:
    """``CUSTOM_FPGA_FUNCTION_ID_XILINX_<32 HEX DIGITS>`` for a loaded xclbin's UUID."""
    suffix = trait_suffix(xclbin_uuid)
    return FUNCTION_TRAIT_PREFIX + suffix if suffix and suffix != _NO_XCLBIN else None


_XCLBIN_UUID = re.compile(r"^\s*Xclbin UUID\s*:\s*(?P<uuid>[0-9A-Fa-f-]{32,36})\s*$")


def parse_xbutil_xclbin_uuid(result: CommandResult) -> str | None:
    """The ``Xclbin UUID`` of ``xbutil examine --report dynamic-regions`` (lower case);
    None when the run failed or nothing is loaded (an all-zero UUID)."""
    if result.returncode != 0:
        return None
    for line in result.stdout.splitlines():
        match = _XCLBIN_UUID.match(line)
        if match:
            value = match["uuid"].lower()
            return None if trait_suffix(value) == _NO_XCLBIN else value
    return None


def xrt_device_id(address: str) -> int:
    """The number XRT's xclmgmt gives a management PF's node (``/dev/xclmgmt<id>``):
    ``domain << 16 | bus << 8 | device << 3 | function`` (XOCL_DEV_ID: the PCI domain
    over the bus number and devfn), e.g. 0000:60:00.0 → 24576."""
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return int(domain, 16) << 16 | int(bus, 16) << 8 | int(slot, 16) << 3 | int(function, 16)
