"""Binding PCI functions to a kernel driver as the kernel documents it: the install step of
the drivers that hand out whole functions (pci, nvidia_gpu, intel_fpga, xilinx_fpga).

Documentation/ABI/testing/sysfs-bus-pci, ``driver_override``: writing a driver's name
there lets only that driver bind the function; it neither unbinds the function from its
current driver nor loads the named one. So, per function: write the name to
``/sys/bus/pci/devices/<address>/driver_override``, write the address to the current
driver's ``unbind``, then to ``/sys/bus/pci/drivers_probe``, which binds an unbound
function to the driver its override names. Undoing it: write back the override the
function had (an empty line: none, the standard matching rules), unbind it from the
overriding driver and probe again, so that the driver it was on takes it back. What each
function was on is remembered in the driver's state folder; without one, only functions
whose override names the configured driver are undone.

Every write goes through ``Sysfs.write`` (confined to the tree's ``sys``). The option
every such driver declares is ``bind_driver_option()`` (``bind_driver``); empty means the
driver binds nothing. Not part of the driver SDK: it may change between releases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from oslo_config import cfg

from exosuit.drivers.base import Device, InstallError
from exosuit.drivers.state import read_state, write_state
from exosuit.drivers.sysfs import Sysfs

__all__ = [
    "BINDINGS_FILE",
    "NO_OVERRIDE",
    "BindingInstall",
    "bind_driver_option",
    "bind_driver_setting",
    "bind_functions",
    "bound_to",
    "device_functions",
    "release_functions",
]

# What the kernel shows in driver_override when no override is set.
NO_OVERRIDE = "(null)"
# In a driver's state folder: what each function it rebound was on before.
BINDINGS_FILE = "bindings.json"


def bind_driver_option() -> cfg.StrOpt:
    """``bind_driver``, for a driver's ``OPTIONS`` (a new option object per group)."""
    return cfg.StrOpt(
        "bind_driver",
        default="",
        help="The kernel driver the install step binds each PCI function this driver hands "
        "out to, when an operator marks the device ready (e.g. vfio-pci, for passthrough to "
        "VMs): driver_override, unbind, drivers_probe, as Documentation/ABI/testing/"
        "sysfs-bus-pci says; marking it inactive gives the functions back to their default "
        "driver. The driver's module must be loaded (modprobe vfio-pci). Empty: the "
        "functions are left on whatever driver holds them.",
    )


def bind_driver_setting(settings: Mapping[str, Any]) -> str:
    """The configured ``bind_driver`` (stripped; empty: none)."""
    value = str(settings.get("bind_driver") or "").strip()
    if any(c.isspace() for c in value) or "/" in value:
        raise InstallError(f"bind_driver {value!r} is not a kernel driver name")
    return value


def device_functions(device: Device) -> list[str]:
    """The PCI addresses of the device's ``PCI`` attach handles: what a VM would be given.
    Handles of other kinds (mdevs, MIG instances, test handles) name no function to bind."""
    found: list[str] = []
    for deployable in device.deployables:
        for handle in deployable.attach_handles:
            if handle.attach_type != "PCI":
                continue
            info = handle.attach_info
            address = f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
            if address not in found:
                found.append(address)
    return found


def _function(*parts: str) -> tuple[str, ...]:
    return ("bus", "pci", "devices", *parts)


def _override(sysfs: Sysfs, address: str) -> str:
    value = sysfs.read(*_function(address, "driver_override"))
    return "" if value in (None, "", NO_OVERRIDE) else value


def _write(sysfs: Sysfs, what: str, *parts: str, value: str) -> None:
    try:
        sysfs.write(*parts, value=value)
    except OSError as error:
        raise InstallError(f"{what}: writing {'/'.join(parts)}: {error}") from error


def bind_functions(
    sysfs: Sysfs,
    addresses: Iterable[str],
    driver: str,
    changed: dict[str, dict[str, str]] | None = None,
) -> None:
    """Bind each function to ``driver``; one already bound to it is left alone.

    ``changed`` receives, before a function is touched, what it was on (``driver``: its
    driver or ""; ``override``: its driver_override or ""): what ``release_functions``
    puts back. Raises InstallError when a write is refused or a function is not bound to
    ``driver`` afterwards (its module not loaded, the function refused); that function is
    then put back as it was (and dropped from ``changed``).
    """
    for address in addresses:
        if sysfs.pci_function(address) is None:
            raise InstallError(f"{address}: no such PCI function")
        current = sysfs.link_name(*_function(address, "driver"))
        if current == driver:
            continue
        before = {"driver": current or "", "override": _override(sysfs, address)}
        if changed is not None:
            changed.setdefault(address, before)
        try:
            _write(sysfs, address, *_function(address, "driver_override"), value=driver)
            if current is not None:
                _write(sysfs, address, "bus", "pci", "drivers", current, "unbind", value=address)
            _write(sysfs, address, "bus", "pci", "drivers_probe", value=address)
            now = sysfs.link_name(*_function(address, "driver"))
            if now != driver:
                raise InstallError(
                    f"{address} is not bound to {driver} after drivers_probe (it is on "
                    f"{now or 'no driver'}); is the {driver} module loaded?"
                )
        except InstallError:
            _put_back(sysfs, address, before["override"])
            if changed is not None and changed.get(address) == before:
                del changed[address]
            raise


def _put_back(sysfs: Sysfs, address: str, override: str) -> None:
    """Best effort after a failed bind: the override it had, probed again if unbound."""
    try:
        sysfs.write(*_function(address, "driver_override"), value=override or "\n")
        if sysfs.link_name(*_function(address, "driver")) is None:
            sysfs.write("bus", "pci", "drivers_probe", value=address)
    except OSError:
        pass  # the bind's own error is what the operator needs to read


def release_functions(
    sysfs: Sysfs,
    addresses: Iterable[str],
    driver: str,
    before: Mapping[str, Mapping[str, str]] | None = None,
) -> list[str]:
    """Undo ``bind_functions``; returns the functions given back.

    With ``before`` (what ``bind_functions`` recorded), exactly the functions recorded
    there: each gets its former override back (none, usually), is unbound from
    ``driver`` and probed, so that the driver it was on takes it back. Without, each
    function whose override names ``driver`` gets it cleared, unbound and probed (its
    default driver takes it back); any other function is left alone.
    """
    released = []
    for address in addresses:
        if sysfs.pci_function(address) is None:
            continue  # gone: nothing to give back
        if before is not None:
            if address not in before:
                continue  # not changed by the install: nothing to undo
            override = before[address].get("override", "")
        elif _override(sysfs, address) == driver:
            override = ""
        else:
            continue
        _write(sysfs, address, *_function(address, "driver_override"), value=override or "\n")
        if sysfs.link_name(*_function(address, "driver")) == driver:
            _write(sysfs, address, "bus", "pci", "drivers", driver, "unbind", value=address)
        _write(sysfs, address, "bus", "pci", "drivers_probe", value=address)
        released.append(address)
    return released


def bound_to(sysfs: Sysfs, addresses: Iterable[str], driver: str) -> bool:
    """True when every function's ``driver`` link names ``driver``."""
    return all(sysfs.link_name(*_function(a, "driver")) == driver for a in addresses)


class BindingInstall:
    """Implements [exosuit.drivers.base.Installable] for a driver whose install step is
    binding its devices' PCI functions to ``bind_driver``: mixed into the driver, which
    sets ``self.sysfs`` and, to undo exactly what it did after a restart,
    ``self.state_dir`` (what each function was on is kept in ``BINDINGS_FILE`` there)."""

    sysfs: Sysfs
    state_dir: str | None = None

    def install(self, device: Device, settings: Mapping[str, Any]) -> None:
        driver = bind_driver_setting(settings)
        if not driver:
            return
        if self.state_dir is None:
            bind_functions(self.sysfs, device_functions(device), driver)
            return
        before = self._bindings()
        changed: dict[str, dict[str, str]] = {}
        try:
            bind_functions(self.sysfs, device_functions(device), driver, changed)
        finally:
            if changed:
                self._save_bindings({**changed, **before})  # the first "before" wins

    def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
        driver = bind_driver_setting(settings)
        if not driver:
            return
        if self.state_dir is None:
            release_functions(self.sysfs, device_functions(device), driver)
            return
        before = self._bindings()
        released = release_functions(self.sysfs, device_functions(device), driver, before)
        if released:
            self._save_bindings({a: b for a, b in before.items() if a not in released})

    def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
        driver = bind_driver_setting(settings)
        return not driver or bound_to(self.sysfs, device_functions(device), driver)

    def _bindings(self) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = read_state(self.state_dir, BINDINGS_FILE).get(
            "before", {}
        )
        return found

    def _save_bindings(self, before: dict[str, dict[str, str]]) -> None:
        write_state(self.state_dir, BINDINGS_FILE, {"version": 1, "before": before})
