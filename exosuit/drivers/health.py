"""Health readings every PCI driver shares: what the kernel's sysfs says of a function.

``PciHealth.check(address)`` judges one PCI function from sysfs
(Documentation/ABI/testing/sysfs-bus-pci, sysfs-bus-pci-devices-aer_stats):

* AER counters, ``aer_dev_correctable``, ``aer_dev_nonfatal`` and ``aer_dev_fatal``
  (one ``<kind> <count>`` line per error kind, then ``TOTAL_ERR_COR``,
  ``TOTAL_ERR_NONFATAL``, ``TOTAL_ERR_FATAL``). Correctable and non-fatal errors count by
  how many arrived within the last ``[health] window`` seconds (the counters only grow
  from boot: a host with a thousand old correctable errors and none new is healthy);
  fatal ones by their total (a fatal error leaves the link reset and the device suspect
  until the host is restarted);
* the link: ``current_link_width`` and ``current_link_speed`` against ``max_link_width``
  and ``max_link_speed``;
* whether the function still answers: its ``config`` space read as all ones (``ff``)
  is a device that fell off the bus.

``hwmon_health`` judges the hwmon sensors below a device (Documentation/hwmon/sysfs-interface.rst:
``<kind><n>_input`` against ``_max``/``_crit``, ``_min``/``_lcrit``, and the ``_alarm``
files). Thresholds are the agent's ``[health]`` options (``HealthSettings``; doc/devices.md,
"Health"). A reason never carries a live figure (``exosuit.drivers.base.Health``).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oslo_config import cfg

from exosuit.drivers.base import (
    HEALTH_OK,
    HEALTH_UNHEALTHY,
    HEALTH_WARNING,
    Health,
)
from exosuit.drivers.sysfs import Sysfs

# The SDK (re-exported by exosuit.drivers). ``OPTIONS`` are the agent's [health] group
# (exosuit/conf/health.py registers them), not a driver's.
__all__ = ["CounterWindow", "HealthSettings", "PciHealth", "hwmon_health"]

# NVIDIA's XIDs (the "Xid Errors" document of the GPU deployment guide) that mean the GPU
# itself is at fault, not the program on it: 48 double-bit ECC, 61/62 internal
# micro-controller breakpoint/halt, 64 row remapping failure, 74 NVLink, 79 fallen off
# the bus, 92 high single-bit ECC rate, 95 uncontained ECC error, 119/120 GSP timeouts
# and errors. Warnings: 63 row remapping pending (a GPU reset applies it), 94 a contained
# ECC error (the program that hit it was stopped; the GPU goes on).
DEFAULT_XID_UNHEALTHY = (48, 61, 62, 64, 74, 79, 92, 95, 119, 120)
DEFAULT_XID_WARNING = (63, 94)

_SEVERITIES = ("ignore", HEALTH_WARNING, HEALTH_UNHEALTHY)

OPTIONS = [
    cfg.IntOpt(
        "window",
        default=3600,
        min=1,
        help="Seconds over which errors that arrive one by one are counted (correctable and "
        "non-fatal PCIe AER errors, NVIDIA XIDs, corrected ECC errors): a device is judged by "
        "those of the last window, not by everything since the host booted.",
    ),
    cfg.IntOpt(
        "aer_correctable_warning",
        default=100,
        min=0,
        help="Correctable PCIe AER errors (aer_dev_correctable) within the window at which "
        "a device is in warning (still offered); 0: never.",
    ),
    cfg.IntOpt(
        "aer_nonfatal_warning",
        default=1,
        min=0,
        help="Non-fatal uncorrectable PCIe AER errors (aer_dev_nonfatal) within the window "
        "at which a device is in warning; 0: never.",
    ),
    cfg.IntOpt(
        "aer_fatal_unhealthy",
        default=1,
        min=0,
        help="Fatal PCIe AER errors (aer_dev_fatal, counted since the host booted) at which "
        "a device is unhealthy (taken out of every offer); 0: never.",
    ),
    cfg.StrOpt(
        "link_width_degraded",
        default=HEALTH_WARNING,
        choices=_SEVERITIES,
        help="What a PCIe link narrower than its maximum (current_link_width below "
        "max_link_width) makes a device: ignore, warning or unhealthy.",
    ),
    cfg.StrOpt(
        "link_speed_degraded",
        default="ignore",
        choices=_SEVERITIES,
        help="What a PCIe link slower than its maximum (current_link_speed below "
        "max_link_speed) makes a device: ignore (the default: GPUs lower their link speed "
        "when idle, and a card in a slower slot is always below its maximum), warning or "
        "unhealthy.",
    ),
    cfg.ListOpt(
        "xid_unhealthy",
        default=[str(x) for x in DEFAULT_XID_UNHEALTHY],
        help="NVIDIA XIDs that make a GPU unhealthy when one arrived within the window.",
    ),
    cfg.ListOpt(
        "xid_warning",
        default=[str(x) for x in DEFAULT_XID_WARNING],
        help="NVIDIA XIDs that put a GPU in warning when one arrived within the window.",
    ),
    cfg.IntOpt(
        "ecc_uncorrected_unhealthy",
        default=1,
        min=0,
        help="Uncorrected (double-bit) ECC errors of a GPU since its driver loaded (NVML's "
        "volatile count) at which it is unhealthy; 0: never.",
    ),
    cfg.IntOpt(
        "ecc_corrected_warning",
        default=0,
        min=0,
        help="Corrected ECC errors of a GPU within the window at which it is in warning; 0: "
        "never (the GPU corrects them and retires the pages that keep failing).",
    ),
    cfg.IntOpt(
        "retired_pages_unhealthy",
        default=60,
        min=0,
        help="Retired memory pages of a GPU (single- and double-bit causes together) at "
        "which it is unhealthy: NVIDIA's guidance for returning a board; 0: never.",
    ),
    cfg.StrOpt(
        "fpga_port_errors",
        default=HEALTH_UNHEALTHY,
        choices=_SEVERITIES,
        help="What errors latched in an FPGA port's errors file (DFL, intel-fpga) make the "
        "card: the port stays in error until they are cleared.",
    ),
]


def _xids(value: Any, default: tuple[int, ...]) -> frozenset[int]:
    if value is None:
        return frozenset(default)
    items = value.split(",") if isinstance(value, str) else value
    found = set()
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        if not text.isdigit():
            raise ValueError(f"[health] an XID is a whole number, not {text!r}")
        found.add(int(text))
    return frozenset(found)


@dataclasses.dataclass(frozen=True)
class HealthSettings:
    """The agent's ``[health]`` thresholds (``OPTIONS``; 0 turns a count off)."""

    window: float = 3600.0
    aer_correctable_warning: int = 100
    aer_nonfatal_warning: int = 1
    aer_fatal_unhealthy: int = 1
    link_width_degraded: str = HEALTH_WARNING
    link_speed_degraded: str = "ignore"
    xid_unhealthy: frozenset[int] = frozenset(DEFAULT_XID_UNHEALTHY)
    xid_warning: frozenset[int] = frozenset(DEFAULT_XID_WARNING)
    ecc_uncorrected_unhealthy: int = 1
    ecc_corrected_warning: int = 0
    retired_pages_unhealthy: int = 60
    fpga_port_errors: str = HEALTH_UNHEALTHY

    def __post_init__(self) -> None:
        for name in ("link_width_degraded", "link_speed_degraded", "fpga_port_errors"):
            if getattr(self, name) not in _SEVERITIES:
                raise ValueError(
                    f"[health] {name} is one of {', '.join(_SEVERITIES)}, not "
                    f"{getattr(self, name)!r}"
                )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> HealthSettings:
        """The settings of a ``[health]`` group given as a mapping (what the agent puts in
        ``DriverContext.health``); absent keys keep their defaults."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {k: v for k, v in values.items() if k in known}
        if "window" in kwargs:
            kwargs["window"] = float(kwargs["window"])
        kwargs["xid_unhealthy"] = _xids(values.get("xid_unhealthy"), DEFAULT_XID_UNHEALTHY)
        kwargs["xid_warning"] = _xids(values.get("xid_warning"), DEFAULT_XID_WARNING)
        return cls(**kwargs)

    def severity(self, name: str) -> str:
        """The state one of the severity options gives (``ignore`` is ``ok``)."""
        value: str = getattr(self, name)
        return HEALTH_OK if value == "ignore" else value


class CounterWindow:
    """How much a counter that only grows grew within the last ``window`` seconds.

    Keeps the readings of the window and the last one before it (the baseline); a reading
    below the one before (the counter was reset: a device reset, a driver reload) starts
    over from it. ``now``: the clock the readings are dated by.
    """

    def __init__(self, window: float, now: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.now = now
        self._readings: deque[tuple[float, int]] = deque()

    def add(self, value: int) -> int:
        """Record ``value`` now; the growth since the baseline (0 for the first reading)."""
        now = self.now()
        readings = self._readings
        if readings and value < readings[-1][1]:
            readings.clear()
        readings.append((now, value))
        # Drop readings while the next one is itself at or before the window's start: the
        # first one left is then the newest reading before (or at) the window's start.
        while len(readings) >= 2 and readings[1][0] <= now - self.window:
            readings.popleft()
        return value - readings[0][1]


_AER_FILES = {
    "correctable": ("aer_dev_correctable", "TOTAL_ERR_COR"),
    "nonfatal": ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    "fatal": ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
}
_SPEED = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")


def _read_aer(sysfs: Sysfs, address: str, kind: str) -> tuple[int, tuple[str, ...]] | None:
    """(total, the kinds of error counted) of one AER file of the function (``kind``:
    correctable, nonfatal or fatal); None when the kernel shows no such file (no AER
    capability, a kernel older than 5.6, a VF)."""
    name, total_key = _AER_FILES[kind]
    text = sysfs.read("bus", "pci", "devices", address, name)
    if text is None:
        return None
    counts: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    if total_key in counts:
        total = counts.pop(total_key)
    else:
        total = sum(counts.values())
    return total, tuple(k for k, v in counts.items() if v)


def _speed(value: str | None) -> float | None:
    match = _SPEED.match(value or "")
    return float(match.group(1)) if match else None


def _width(value: str | None) -> int | None:
    text = (value or "").strip()
    return int(text) if text.isdigit() else None


class PciHealth:
    """Judges PCI functions by what sysfs says of them (the module's docstring). Keeps the
    AER readings of each function in memory, to count the errors of the window."""

    def __init__(
        self,
        sysfs: Sysfs,
        settings: HealthSettings | None = None,
        *,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sysfs = sysfs
        self.settings = settings if settings is not None else HealthSettings()
        self.now = now
        self._windows: dict[tuple[str, str], CounterWindow] = {}

    def check(self, address: str) -> Health:
        """The function's health: fallen off the bus, AER errors, a degraded link."""
        return Health.worst(self.bus(address), self.aer(address), self.link(address))

    def bus(self, address: str) -> Health:
        """Unhealthy when the function's config space reads as all ones: it no longer
        answers on the bus (surprise removal, a GPU fallen off the bus). A tree without
        the ``config`` file (a recording: it is binary) tells nothing."""
        try:
            with open(self.sysfs.path("bus", "pci", "devices", address, "config"), "rb") as f:
                head = f.read(4)
        except OSError:
            return Health()
        if len(head) == 4 and head == b"\xff\xff\xff\xff":
            return Health(
                HEALTH_UNHEALTHY,
                (
                    f"{address} no longer answers on the PCI bus (its config space reads all "
                    "ones): fallen off the bus",
                ),
            )
        return Health()

    def _growth(self, address: str, kind: str, total: int) -> int:
        key = (address, kind)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = CounterWindow(self.settings.window, self.now)
        return window.add(total)

    def aer(self, address: str) -> Health:
        """PCIe AER: fatal errors since boot, non-fatal and correctable ones within the
        window, against ``[health] aer_*``."""
        settings = self.settings
        findings = []
        fatal = _read_aer(self.sysfs, address, "fatal")
        if fatal is not None and settings.aer_fatal_unhealthy:
            if fatal[0] >= settings.aer_fatal_unhealthy:
                findings.append(
                    Health(
                        HEALTH_UNHEALTHY,
                        (f"PCIe AER: fatal errors reported{_kinds(fatal[1])}",),
                    )
                )
        window = f"{settings.window:g} s"
        for kind, threshold, words in (
            ("nonfatal", settings.aer_nonfatal_warning, "non-fatal errors"),
            ("correctable", settings.aer_correctable_warning, "correctable errors"),
        ):
            found = _read_aer(self.sysfs, address, kind)
            if found is None:
                continue
            growth = self._growth(address, kind, found[0])
            if threshold and growth >= threshold:
                findings.append(
                    Health(
                        HEALTH_WARNING,
                        (f"PCIe AER: {threshold} or more {words} within {window}",),
                    )
                )
        return Health.worst(*findings)

    def link(self, address: str) -> Health:
        """The link's width and speed against their maximum (``[health] link_*``)."""
        base = ("bus", "pci", "devices", address)
        findings = []
        width, max_width = (
            _width(self.sysfs.read(*base, name))
            for name in ("current_link_width", "max_link_width")
        )
        state = self.settings.severity("link_width_degraded")
        if width is not None and max_width and width < max_width and state != HEALTH_OK:
            findings.append(Health(state, (f"PCIe link x{width}, below its maximum x{max_width}",)))
        speed, max_speed = (
            _speed(self.sysfs.read(*base, name))
            for name in ("current_link_speed", "max_link_speed")
        )
        state = self.settings.severity("link_speed_degraded")
        if speed is not None and max_speed and speed < max_speed and state != HEALTH_OK:
            findings.append(
                Health(
                    state,
                    (f"PCIe link at {speed:g} GT/s, below its maximum {max_speed:g} GT/s",),
                )
            )
        return Health.worst(*findings)


def _kinds(kinds: Iterable[str]) -> str:
    kinds = list(kinds)
    return f" ({', '.join(kinds)})" if kinds else ""


_SENSOR = re.compile(r"^(temp|in|curr|power|fan)([0-9]+)_input$")
_UNITS = {"temp": 1000.0, "in": 1000.0, "curr": 1000.0, "power": 1_000_000.0, "fan": 1.0}
_UNIT_NAMES = {"temp": "°C", "in": "V", "curr": "A", "power": "W", "fan": "RPM"}


def _hwmon_dirs(sysfs: Sysfs, parts: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The hwmon devices of a device: ``<dev>/hwmon/hwmonN`` (a bus device's) and
    ``<dev>/hwmonN`` (a class device's, e.g. an NVMe controller's)."""
    found = [(*parts, "hwmon", n) for n in sysfs.listdir(*parts, "hwmon") if n.startswith("hwmon")]
    found += [(*parts, n) for n in sysfs.listdir(*parts) if re.fullmatch(r"hwmon[0-9]+", n)]
    return found


def _number(sysfs: Sysfs, *parts: str) -> float | None:
    text = sysfs.read(*parts)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def hwmon_health(sysfs: Sysfs, *parts: str, what: str = "sensor") -> Health:
    """The hwmon sensors below ``<root>/sys/<parts>`` (Documentation/hwmon/sysfs-interface.rst):
    a reading at or beyond its ``crit``/``lcrit`` limit, or a ``crit_alarm``, is unhealthy;
    beyond ``max``/``min``, or another ``alarm``, warning. The reason names the sensor and
    the limit, not the reading."""
    findings = []
    for hwmon in _hwmon_dirs(sysfs, tuple(parts)):
        for name in sysfs.listdir(*hwmon):
            match = _SENSOR.match(name)
            if not match:
                continue
            kind, index = match.groups()
            prefix = f"{kind}{index}"
            label = sysfs.read(*hwmon, f"{prefix}_label") or prefix
            scale, unit = _UNITS[kind], _UNIT_NAMES[kind]
            value = _number(sysfs, *hwmon, name)
            for limit, state, above in (
                ("crit", HEALTH_UNHEALTHY, True),
                ("lcrit", HEALTH_UNHEALTHY, False),
                ("max", HEALTH_WARNING, True),
                ("min", HEALTH_WARNING, False),
            ):
                bound = _number(sysfs, *hwmon, f"{prefix}_{limit}")
                if value is None or bound is None or (not above and bound <= 0):
                    continue
                if (value >= bound) if above else (value <= bound):
                    side = "at or above" if above else "at or below"
                    findings.append(
                        Health(
                            state,
                            (
                                f"{what} {label!r} {side} its {limit} limit "
                                f"({bound / scale:g} {unit})",
                            ),
                        )
                    )
                    break
            for alarm, state in (
                ("crit_alarm", HEALTH_UNHEALTHY),
                ("alarm", HEALTH_WARNING),
                ("max_alarm", HEALTH_WARNING),
                ("min_alarm", HEALTH_WARNING),
            ):
                if sysfs.read(*hwmon, f"{prefix}_{alarm}") == "1":
                    findings.append(Health(state, (f"{what} {label!r} raises its {alarm}",)))
    return Health.worst(*findings)
