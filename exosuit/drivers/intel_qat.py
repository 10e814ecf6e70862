"""The intel_qat driver: Intel QuickAssist (QAT) crypto and compression engines.

What it reads (doc/drivers/intel_qat.md has the operator's view):

* sysfs (Documentation/ABI/testing/sysfs-bus-pci): the physical functions (PFs) with
  a QAT device id (``QAT_GENERATIONS``) and their SR-IOV virtual functions (VFs,
  ``virtfn<N>`` links).
* the QAT driver's attributes (Documentation/ABI/testing/sysfs-driver-qat, qat_4xxx
  and qat_6xxx, Linux 6.0+): ``qat/state`` (up/down) and ``qat/cfg_services`` (the
  enabled services, e.g. ``sym;dc``), which become traits.
* the firmware version where the driver exposes it: Intel's out-of-tree driver
  writes it to ``/sys/kernel/debug/qat_<device>_<address>/version/fw``; the in-tree
  driver exposes none.

As Cyborg's QAT driver: one device per PF; one deployable (resource class
CUSTOM_QAT) per VF with one PCI attach handle, or one for the PF itself when it has
no VFs.

Services: each PF lists ``qat`` services ``sym``, ``asym``, ``dc`` (and any other word
``cfg_services`` names), enabled when configured and the PF is up, with the VFs serving
them. Install step (``Installable``): ``[intel_qat] services`` through ``qat/state``
down, ``qat/cfg_services``, ``qat/state`` up (sysfs-driver-qat); undone from what the
driver remembered in its state folder. Usage (``UsageReader``): the firmware's request
and response counts from debugfs ``qat_<device>_<address>/fw_counters``
(debugfs-driver-qat). Containers (``ContainerDevice``): ``/dev/vfio/<group>`` of a VF
bound to vfio-pci, or ``/dev/qat_adf_ctl`` for a function on a QAT kernel driver.
Health (``HealthReader``): the PF's PCIe AER counters, link and bus
(exosuit.drivers.health).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from oslo_config import cfg

from exosuit.drivers import DriverContext
from exosuit.drivers.base import (
    AttachHandle,
    ContainerEdits,
    Deployable,
    Device,
    DeviceNode,
    Health,
    InstallError,
    Service,
    pci_cpid,
)
from exosuit.drivers.container import VFIO_PCI, function_edits, handle_address
from exosuit.drivers.health import PciHealth
from exosuit.drivers.state import read_state, write_state
from exosuit.drivers.sysfs import PciFunction

__all__ = [
    "OFFERED_SERVICES",
    "QAT_GENERATIONS",
    "SERVICE_WORDS",
    "STATE_FILE",
    "IntelQatDriver",
    "QatGeneration",
    "parse_fw_counters",
    "service_traits",
    "service_words",
    "services_setting",
]

INTEL = "8086"


@dataclasses.dataclass(frozen=True)
class QatGeneration:
    name: str  # the kernel's device name for the PF (its PCI driver's name)
    pf_id: str
    vf_id: str


# PF and VF device ids, from the kernel: include/linux/pci_ids.h
# (PCI_DEVICE_ID_INTEL_QAT_*) and drivers/crypto/intel/qat/qat_common/
# adf_accel_devices.h (ADF_*_PCI_DEVICE_ID, ADF_*IOV_PCI_DEVICE_ID).
QAT_GENERATIONS = (
    QatGeneration("dh895xcc", "0435", "0443"),
    QatGeneration("c6xx", "37c8", "37c9"),  # C62x chipsets
    QatGeneration("c3xxx", "19e2", "19e3"),
    QatGeneration("4xxx", "4940", "4941"),
    QatGeneration("401xx", "4942", "4943"),
    QatGeneration("402xx", "4944", "4945"),
    QatGeneration("420xx", "4946", "4947"),
    QatGeneration("6xxx", "4948", "4949"),
)
_BY_PF = {g.pf_id: g for g in QAT_GENERATIONS}

# cfg_services words (sysfs-driver-qat): sym, asym, dc, dcc, decomp. Intel's
# out-of-tree driver also writes "cy" for sym and asym together.
SERVICE_WORDS = ("sym", "asym", "dc", "dcc", "decomp")
_SERVICE_ALIASES = {"cy": ("sym", "asym")}
# What every generation's engines do, listed for each PF whether enabled or not.
OFFERED_SERVICES = ("sym", "asym", "dc")
# Where the install step remembers each PF's services before it changed them.
STATE_FILE = "services.json"


def service_words(cfg_services: str | None) -> tuple[str, ...]:
    """``sym;dc`` → ``("sym", "dc")``; ``cy`` → ``("sym", "asym")``; None or empty → ()."""
    words: list[str] = []
    for word in re.split(r"[;,\s]+", (cfg_services or "").strip().lower()):
        for service in _SERVICE_ALIASES.get(word, (word,)) if word else ():
            if service not in words:
                words.append(service)
    return tuple(words)


def service_traits(cfg_services: str | None) -> tuple[str, ...]:
    """``sym;dc`` → ``("CUSTOM_QAT_DC", "CUSTOM_QAT_SYM")``; None or empty → ()."""
    return tuple(
        sorted(
            "CUSTOM_QAT_" + re.sub(r"[^A-Z0-9]+", "_", s.upper())
            for s in service_words(cfg_services)
        )
    )


def services_setting(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """``[intel_qat] services`` as cfg_services words (empty: the driver sets none).
    Raises InstallError for a word the kernel does not know."""
    words = service_words(str(settings.get("services") or ""))
    unknown = [w for w in words if w not in SERVICE_WORDS]
    if unknown:
        raise InstallError(
            f"[intel_qat] services: {', '.join(unknown)} is not a QAT service "
            f"({', '.join(SERVICE_WORDS)})"
        )
    return words


_FW_COUNTER_ROW = re.compile(r"^\s*\d+:\s+(\d+)\s+(\d+)\s*$")
_FW_COUNTER_BOX = re.compile(r"^\|\s*Firmware (Requests|Responses)\s*\[AE\s*\d+\]:\s*(\d+)\s*\|$")


def parse_fw_counters(text: str) -> dict[str, float]:
    """``requests_total`` and ``responses_total``, summed over the acceleration engines, of
    debugfs ``fw_counters``: the in-tree driver's table (``AE Requests Responses``, one
    `` N: <requests> <responses>`` row per engine) or the out-of-tree driver's box
    (``| Firmware Requests [AE  0]: <n> |``). Empty when the text is neither."""
    requests = responses = 0
    found = False
    for line in text.splitlines():
        row = _FW_COUNTER_ROW.match(line)
        if row:
            requests += int(row[1])
            responses += int(row[2])
            found = True
            continue
        box = _FW_COUNTER_BOX.match(line.strip())
        if box:
            if box[1] == "Requests":
                requests += int(box[2])
            else:
                responses += int(box[2])
            found = True
    if not found:
        return {}
    return {"requests_total": float(requests), "responses_total": float(responses)}


class IntelQatDriver:
    """Implements [exosuit.drivers.base.Driver], [exosuit.drivers.base.Installable],
    [exosuit.drivers.base.UsageReader], [exosuit.drivers.base.HealthReader] and
    [exosuit.drivers.base.ContainerDevice]."""

    name = "intel_qat"
    OPTIONS: list[cfg.Opt] = [
        cfg.StrOpt(
            "services",
            default="",
            help="The services the install step enables on a PF an operator marks ready, "
            "as qat/cfg_services takes them: sym, asym, dc, dcc or decomp, joined with ';' "
            "(e.g. sym;dc; a 4xxx combines at most two, a 6xxx three). Set through "
            "qat/state down, qat/cfg_services, qat/state up (in-tree qat_4xxx and later "
            "drivers); marking the PF inactive restores what it had before. Empty: the "
            "PFs' services are left as they are.",
        ),
    ]

    def __init__(self, context: DriverContext) -> None:
        self.hostname = context.hostname
        self.sysfs = context.open_sysfs()
        self.pci_health = PciHealth(self.sysfs, context.health_settings())
        self.state_dir = context.state_dir
        try:  # a misspelt service fails at start-up, not when a PF is made ready
            services_setting(context.settings)
        except InstallError as error:
            raise ValueError(str(error)) from None

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the function's PCIe AER
        counters, link and bus (exosuit.drivers.health)."""
        return self.pci_health.check(device.pci_address or "")

    def discover(self) -> list[Device]:
        functions = {f.address: f for f in self.sysfs.pci_functions()}
        return [
            self._device(pf, _BY_PF[pf.device_id], functions)
            for pf in functions.values()
            if pf.vendor_id == INTEL and pf.device_id in _BY_PF and not pf.is_vf
        ]

    def _device(
        self, pf: PciFunction, generation: QatGeneration, functions: dict[str, PciFunction]
    ) -> Device:
        base = ("bus", "pci", "devices", pf.address)
        state = self.sysfs.read(*base, "qat", "state")
        cfg_services = self.sysfs.read(*base, "qat", "cfg_services")
        traits = ("OWNER_CYBORG", *service_traits(cfg_services))
        # Only the PF's own VFs with the VF id of its generation are offered.
        vfs = [
            a for a in pf.virtfns if a in functions and functions[a].device_id == generation.vf_id
        ]
        deployables = tuple(
            Deployable(
                name=f"{self.hostname}_{address}",
                num_accelerators=1,
                resource_class="CUSTOM_QAT",
                traits=traits,
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
                driver_name=self.name,
            )
            for address in (vfs or [pf.address])
        )
        services = self._services(pf, cfg_services, state, len(vfs))
        board = {
            "kernel_driver": pf.driver,
            "state": state,
            "cfg_services": cfg_services,
            "sriov_totalvfs": None if pf.sriov_totalvfs is None else str(pf.sriov_totalvfs),
            "sriov_numvfs": None if pf.sriov_numvfs is None else str(pf.sriov_numvfs),
            "vf_kernel_drivers": ",".join(sorted({functions[a].driver or "none" for a in vfs}))
            or None,
        }
        return Device(
            type="QAT",
            # Cyborg's QAT driver reports the raw sysfs ids ("0x8086", "0x37c8").
            vendor=f"0x{INTEL}",
            model=f"Intel QAT {generation.name}",
            driver_name=self.name,
            controlpath_id=pci_cpid(pf.address),
            pci_address=pf.address,
            numa_node=pf.numa_node,
            pcie_root=pf.pcie_root,
            iommu_group=pf.iommu_group,
            firmware_version=self._firmware(pf.address),
            std_board_info={"product_id": f"0x{pf.device_id}"},
            vendor_board_info={k: v for k, v in board.items() if v},
            deployables=deployables,
            services=services,
        )

    @staticmethod
    def _services(
        pf: PciFunction, cfg_services: str | None, state: str | None, vfs: int
    ) -> tuple[Service, ...]:
        """``sym``, ``asym``, ``dc`` and what else ``cfg_services`` names, each enabled when
        configured and the PF is up, with the VFs serving it. Without ``qat/`` (older
        generations, Intel's out-of-tree driver) the services are set in a file outside
        sysfs: the three the engines do are listed, enabled when a driver runs the PF,
        their configuration ``unknown``."""
        if cfg_services is None:
            running = pf.driver is not None
            return tuple(
                Service(
                    "qat",
                    name,
                    running,
                    {"vfs": str(vfs if running else 0), "configured": "unknown"},
                )
                for name in OFFERED_SERVICES
            )
        configured = service_words(cfg_services)
        names = list(OFFERED_SERVICES) + [w for w in configured if w not in OFFERED_SERVICES]
        found = []
        for name in names:
            enabled = name in configured and state == "up"
            details = {
                "vfs": str(vfs if enabled else 0),
                "configured": str(name in configured).lower(),
            }
            found.append(Service("qat", name, enabled, details))
        return tuple(found)

    # -- ContainerDevice ---------------------------------------------------------------

    def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
        """Implements [exosuit.drivers.base.ContainerDevice]: a function bound to
        vfio-pci (a VF for a QAT user-space library in vfio mode) gives
        ``/dev/vfio/<group>``; one on a QAT kernel driver gives the QAT control node
        ``/dev/qat_adf_ctl``. ``QAT_SERVICES``: the PF's ``qat/cfg_services``."""
        address = handle_address(attach_handle)
        function = self.sysfs.pci_function(address)
        if function is None:
            raise ValueError(f"there is no PCI function {address} on this host")
        nodes = []
        if function.driver is not None and function.driver != VFIO_PCI:
            nodes.append(DeviceNode("/dev/qat_adf_ctl"))
        pf = function.physfn or function.address
        services = self.sysfs.read("bus", "pci", "devices", pf, "qat", "cfg_services")
        env = {"QAT_SERVICES": services} if services else {}
        return function_edits(self.sysfs, address, nodes=nodes, env=env)

    # -- Installable -------------------------------------------------------------------

    def _qat(self, device: Device, name: str) -> tuple[str, ...]:
        return ("bus", "pci", "devices", device.pci_address or "", "qat", name)

    def _set(self, device: Device, name: str, value: str) -> None:
        try:
            self.sysfs.write(*self._qat(device, name), value=value)
        except OSError as error:
            raise InstallError(
                f"{device.pci_address}: writing {value!r} to qat/{name}: {error}"
            ) from error

    def _configure(self, device: Device, words: tuple[str, ...], state: str) -> None:
        """qat/state down, qat/cfg_services ``words``, then qat/state ``state``."""
        if self.sysfs.read(*self._qat(device, "state")) != "down":
            self._set(device, "state", "down")
        if set(service_words(self.sysfs.read(*self._qat(device, "cfg_services")))) != set(words):
            self._set(device, "cfg_services", ";".join(words))
        if state != "down":
            self._set(device, "state", state)

    def install(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: the PF up with ``services``."""
        wanted = services_setting(settings)
        if not wanted or self.installed(device, settings):
            return
        current = self.sysfs.read(*self._qat(device, "cfg_services"))
        if current is None:
            raise InstallError(
                f"{device.pci_address}: its QAT driver has no qat/cfg_services (qat_4xxx "
                "and later have it); set its services in the driver's configuration file"
            )
        state = self.sysfs.read(*self._qat(device, "state")) or "up"
        saved = self._read_saved()
        if device.pci_address not in saved:  # what uninstall restores: the first "before"
            saved[device.pci_address or ""] = {"cfg_services": current, "state": state}
            self._write_saved(saved)
        self._configure(device, wanted, "up")
        if not self.installed(device, settings):
            raise InstallError(
                f"{device.pci_address}: qat/cfg_services reads "
                f"{self.sysfs.read(*self._qat(device, 'cfg_services'))!r} and qat/state "
                f"{self.sysfs.read(*self._qat(device, 'state'))!r} after the install"
            )

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
        """Implements [exosuit.drivers.base.Installable]: the services and state the PF had
        before the install, as remembered in the state folder (nothing remembered: nothing
        of ours to undo)."""
        if not services_setting(settings):
            return
        saved = self._read_saved()
        before = saved.get(device.pci_address or "")
        if before is None:
            return
        words = service_words(before.get("cfg_services"))
        current = service_words(self.sysfs.read(*self._qat(device, "cfg_services")))
        state = self.sysfs.read(*self._qat(device, "state"))
        if words and set(words) != set(current):
            self._configure(device, words, before.get("state") or "up")
        elif state != before.get("state") and before.get("state") in ("up", "down"):
            self._set(device, "state", before["state"])
        del saved[device.pci_address or ""]
        self._write_saved(saved)

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
        """Implements [exosuit.drivers.base.Installable]: up, with exactly ``services``."""
        wanted = services_setting(settings)
        if not wanted:
            return True
        current = service_words(self.sysfs.read(*self._qat(device, "cfg_services")))
        return set(current) == set(wanted) and self.sysfs.read(*self._qat(device, "state")) == "up"

    def _read_saved(self) -> dict[str, dict[str, str]]:
        saved: dict[str, dict[str, str]] = read_state(self.state_dir, STATE_FILE).get("before", {})
        return saved

    def _write_saved(self, saved: dict[str, dict[str, str]]) -> None:
        write_state(self.state_dir, STATE_FILE, {"version": 1, "before": saved})

    # -- UsageReader -------------------------------------------------------------------

    def usage(self, device: Device) -> Mapping[str, float]:
        """Implements [exosuit.drivers.base.UsageReader]: ``requests_total`` and
        ``responses_total`` from debugfs ``fw_counters`` (root only; {} without it)."""
        directory = self._debugfs(device.pci_address or "")
        if directory is None:
            return {}
        text = self.sysfs.read("kernel", "debug", directory, "fw_counters")
        return parse_fw_counters(text) if text else {}

    def _debugfs(self, address: str) -> str | None:
        """The driver's debugfs directory of the PF, ``qat_<device>_<address>``."""
        for entry in self.sysfs.listdir("kernel", "debug"):
            if entry.startswith("qat_") and entry.endswith("_" + address):
                return entry
        return None

    def _firmware(self, address: str) -> str | None:
        """``version/fw`` in the driver's debugfs directory, ``qat_<device>_<address>``."""
        entry = self._debugfs(address)
        return self.sysfs.read("kernel", "debug", entry, "version", "fw") or None if entry else None
