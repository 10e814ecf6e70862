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
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.drivers.runner import CommandResult
from exosuit.drivers.sysfs import PciFunction, Sysfs

__all__ = ["ALVEO_BOARDS", "XILINX_VENDOR_ID", "XilinxFpgaDriver", "parse_xbmgmt_examine"]

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


class XilinxFpgaDriver:
    """Implements [exosuit.drivers.base.Driver]."""

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
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = Sysfs(context.sysfs_root)
        self.runner = context.runner
        settings: Mapping = context.settings
        self.xbmgmt = settings.get("xbmgmt_path", DEFAULT_XBMGMT)
        self.timeout = float(settings.get("tool_timeout") or 30)

    def discover(self) -> list[Device]:
        cards: dict[tuple[str, str, str], list[PciFunction]] = {}
        for function in self.sysfs.pci_functions():
            if self._is_alveo_function(function):
                cpid = pci_cpid(function.address)
                cards.setdefault((cpid["domain"], cpid["bus"], cpid["device"]), []).append(
                    function)
        return [self._device(sorted(functions, key=lambda f: f.address))
                for _, functions in sorted(cards.items())]

    def _is_alveo_function(self, function: PciFunction) -> bool:
        # Vendor first: Cyborg's Inspur driver picked up other vendors' FPGAs
        # (bug 1949534). A Xilinx function that is not a processing accelerator
        # (a custom XDMA design, a bridge) counts only when XRT's drivers hold it.
        if function.vendor_id != XILINX_VENDOR_ID or function.is_vf:
            return False
        return (function.base_class == PROCESSING_ACCELERATOR_CLASS
                or function.driver in (MGMT_DRIVER, USER_DRIVER))

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
        model = (ALVEO_BOARDS.get(product_id, (None, None))[1]
                 or _USER_IDS.get(product_id, (None, None))[1]
                 or f"Xilinx FPGA {XILINX_VENDOR_ID}:{product_id}")
        shell = self._shell(mgmt) if mgmt else {}
        vendor_board_info = {"mgmt_pf": mgmt.address if mgmt else None,
                             "user_pf": user.address if user else None, **shell}
        handles = tuple(AttachHandle("PCI", pci_cpid(f.address)) for f in functions)
        return Device(
            type="FPGA",
            vendor=XILINX_VENDOR_ID,
            model=model,
            driver_name=DRIVER_NAME,
            controlpath_id=pci_cpid(primary.address),
            pci_address=primary.address,
            numa_node=primary.numa_node,
            firmware_version=shell.get("shell"),
            std_board_info={"product_id": product_id,
                            "controller": "Processing accelerators"
                            if primary.base_class == PROCESSING_ACCELERATOR_CLASS
                            else f"PCI class {primary.class_code}"},
            vendor_board_info={k: v for k, v in vendor_board_info.items() if v is not None},
            deployables=(
                Deployable(
                    name=f"{self.hostname}_{primary.address}",
                    num_accelerators=1,
                    resource_class="FPGA",
                    traits=("CUSTOM_FPGA_XILINX", f"CUSTOM_FPGA_PRODUCT_ID_{product_id.upper()}"),
                    attach_handles=handles,
                    driver_name=DRIVER_NAME,
                ),
            ),
        )

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
            result = self.runner.run([self.xbmgmt, "examine", "--device", mgmt.address],
                                     timeout=self.timeout)
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
