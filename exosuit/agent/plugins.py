"""The agent's driver plug-ins: which are installed, which run, and with what options.

Every driver plug-in installed with the agent (entry point group ``exosuit.drivers``) is
reported with each inventory (``drivers``: doc/devices.md, "Drivers as managed
objects"): its name and the version of the package that provides it, read from the
entry points' metadata without importing the driver; whether it runs; the digest of its
effective options; how many devices it found and its last error.

Which drivers run is ``[agent] enabled_drivers`` (their options: each driver's own
section), overridden by the operator through the host's desired state (``drivers``:
``{"<name>": {"enabled": true|false|null, "config": {"<option>": "<value>"}}}``).
``DriverSet.apply`` makes the running drivers what the two say without a restart: a
driver whose enabled flag or effective options changed is stopped, started or rebuilt
with its new options (a new object, as ``exosuit-agent run`` would build at start); the
others are left as they are. Override values are strings, parsed with each option's
type; an override the driver refuses (an unknown option, a value its type rejects) is
reported as the driver's error, and the driver keeps running as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from oslo_config import cfg

from exosuit import schemas
from exosuit.conf import AgentSettings, driver_settings
from exosuit.drivers import ENTRY_POINT_GROUP, DriverContext, driver_class, load_driver
from exosuit.drivers.base import Device, Driver
from exosuit.drivers.runner import CommandRunner, RecordedRunner, SubprocessRunner
from exosuit.schemas import names as grammar

LOG = logging.getLogger(__name__)

__all__ = [
    "DriverSet",
    "config_digest",
    "driver_failure",
    "health_options",
    "installed_plugins",
    "where",
]

# The wire's bounds (schemas/inventory-v1.json, "drivers").
MAX_DRIVERS = 100
MAX_VERSION = 64
MAX_ERROR = 4096


def where(controlpath_id: Mapping[str, Any]) -> str:
    """A device as an operator knows it: its PCI address when its control-path id is
    one, else its identity."""
    info = controlpath_id.get("cpid_info")
    if isinstance(info, Mapping) and {"domain", "bus", "device", "function"} <= set(info):
        return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
    return schemas.device_identity(controlpath_id)


def driver_failure(error: Exception, own: type[Exception]) -> str:
    """The reason an operator reads for a driver step that raised ``error``: a driver's
    own error (``own``: InstallError, PartitionError …) says why in its own words;
    anything else is named."""
    if isinstance(error, own):
        return str(error) or type(error).__name__
    return f"{type(error).__name__}: {error}"


def installed_plugins() -> dict[str, str | None]:
    """Every installed driver plug-in (name → the version of the distribution that
    provides its entry point, None when unknown), sorted by name. Read from the entry
    points' metadata: no driver is imported. The first of two entry points with one
    name wins, as stevedore's lookup by name does."""
    found: dict[str, str | None] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name not in found:
            dist = getattr(entry_point, "dist", None)
            found[entry_point.name] = dist.version if dist is not None else None
    return dict(sorted(found.items()))


def _plain(value: Any) -> Any:
    """An option's value as JSON can carry it (tuples as lists, others as text)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    return str(value)


def health_options(conf: cfg.ConfigOpts) -> dict[str, Any]:
    """The ``[health]`` thresholds every driver is given (``DriverContext.health``), the
    options registered first if the configuration does not have them (as a driver's own
    section is: the agent's configuration registers only what it needs)."""
    # Imported here, not with the module: listing the plug-ins imports no driver code.
    from exosuit.drivers import health as driver_health

    conf.register_opts(driver_health.OPTIONS, group="health")  # once; again is a no-op
    return {opt.dest: conf.health[opt.dest] for opt in driver_health.OPTIONS}


def config_digest(settings: Mapping[str, Any]) -> str:
    """``sha256:`` + the hex SHA-256 of the canonical JSON of a driver's option values."""
    body = schemas.canonical_json(_plain(settings))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


class _Refused(ValueError):
    """An override the driver's options refuse: the message says which and why."""


@dataclasses.dataclass(frozen=True)
class _Running:
    driver: Driver
    settings: Mapping[str, Any]
    digest: str


# (name, settings) → the driver, built with those settings.
Loader = Callable[[str, Mapping[str, Any]], Driver]


class DriverSet:
    """The drivers the agent runs, rebuilt as the operator's overrides change.

    ``enabled``: the names the configuration file enables, in order (a device two
    drivers find is reported by the one listed first); ``load(name, settings)``
    builds a driver; ``settings(name)``: its options as the file sets them;
    ``options(name)``: its oslo.config options (to parse an override's strings: called
    only for a driver given overrides); ``installed``: every plug-in's name and
    version. ``from_conf`` assembles one from the agent's configuration, ``fixed`` one
    around driver objects already built (tests, tools).

    The file's drivers are built at once (a driver that cannot be built is an error of
    the configuration: ``LookupError`` for an unknown name, or the driver's own).
    """

    def __init__(
        self,
        enabled: Sequence[str],
        load: Loader,
        *,
        settings: Callable[[str], Mapping[str, Any]] = lambda name: {},
        options: Callable[[str], Iterable[cfg.Opt]] = lambda name: (),
        installed: Mapping[str, str | None] | None = None,
    ) -> None:
        self._base = list(dict.fromkeys(enabled))
        self._load = load
        self._file_settings = settings
        self._options = options
        self.installed: dict[str, str | None] = dict(installed or {})
        self.overrides: dict[str, dict[str, Any]] = {}
        self._wanted: list[str] = list(self._base)
        self._errors: dict[str, str] = {}  # name → why its overrides are not applied
        self._running: dict[str, _Running] = {}
        for name in self._base:
            driver_settings_ = dict(self._file_settings(name))
            self._running[name] = _Running(
                self._load(name, driver_settings_),
                driver_settings_,
                config_digest(driver_settings_),
            )

    # -- assembly ---------------------------------------------------------------------

    @classmethod
    def from_conf(
        cls,
        conf: cfg.ConfigOpts,
        hostname: str,
        sysfs_root: str,
        names: Sequence[str] | None = None,
    ) -> DriverSet:
        """The drivers ``names`` (default ``[agent] enabled_drivers``), each with its
        options and its own folder of the agent's state directory
        (``<state_dir>/drivers/<name>``)."""
        # A recorded tree's tools answer from its commands.json (as in `discover`), never
        # this machine's tools: the agent reports what `discover` prints.
        runner: CommandRunner = (
            SubprocessRunner()
            if os.path.abspath(sysfs_root) == "/"
            else RecordedRunner.from_file(os.path.join(sysfs_root, "commands.json"))
        )
        agent = AgentSettings.from_conf(conf)
        state_dir = os.path.abspath(agent.state_dir)
        health = health_options(conf)

        drivers_dir = os.path.join(state_dir, "drivers")

        def load(name: str, settings: Mapping[str, Any]) -> Driver:
            context = DriverContext(
                hostname=hostname,
                sysfs_root=sysfs_root,
                runner=runner,
                settings=settings,
                # A driver's name makes a folder: it must be a name (doc/names.md).
                state_dir=grammar.file_name(drivers_dir, "driver name", name),
                health=health,
            )
            return load_driver(name, context)

        def options(name: str) -> Iterable[cfg.Opt]:
            options: Iterable[cfg.Opt] = getattr(driver_class(name), "OPTIONS", None) or ()
            return options

        return cls(
            list(names) if names is not None else list(agent.enabled_drivers),
            load,
            settings=lambda name: driver_settings(conf, name),
            options=options,
            installed=installed_plugins(),
        )

    @classmethod
    def fixed(cls, drivers: Sequence[Driver]) -> DriverSet:
        """A set around drivers already built: each may be disabled and enabled again
        (the same object), none takes options. A name is a driver's identity in the
        reports: two drivers may not share one (ValueError)."""
        by_name = {driver.name: driver for driver in drivers}
        if len(by_name) != len(drivers):
            names = [driver.name for driver in drivers]
            raise ValueError(f"two drivers share a name: {', '.join(names)}")
        known = installed_plugins()
        return cls(
            list(by_name),
            lambda name, settings: by_name[name],
            installed={name: known.get(name) for name in by_name},
        )

    # -- what runs --------------------------------------------------------------------

    @property
    def drivers(self) -> list[Driver]:
        """The running drivers, in order."""
        return [running.driver for running in self._running.values()]

    @property
    def stopped(self) -> frozenset[str]:
        """Drivers not enabled, on purpose (by the file or the operator): their devices
        are dropped at once, without the removal grace."""
        return frozenset(set(self.installed) | set(self._base)) - set(self._wanted)

    def find(
        self, controlpath_id: Mapping[str, Any], *, prefer: str | None = None
    ) -> tuple[Driver, Device] | None:
        """The device of ``controlpath_id`` as the running drivers discover it now, with
        the driver that found it: the one named ``prefer`` if it finds it, else the
        first that does; None when none does. A driver whose discovery fails is logged
        and passed over (it does not hide the others)."""
        identity = schemas.device_identity(controlpath_id)
        first: tuple[Driver, Device] | None = None
        for driver in self.drivers:
            try:
                devices = driver.discover()
            except Exception as error:
                LOG.warning("driver %s failed: %s", driver.name, error)
                continue
            for device in devices:
                if schemas.device_identity(device.to_snapshot()["controlpath_id"]) == identity:
                    if driver.name == prefer:
                        return driver, device
                    first = first or (driver, device)
        return first

    def settings(self, name: str) -> Mapping[str, Any]:
        """The effective options of the running driver ``name`` ({} if it is not)."""
        running = self._running.get(name)
        return running.settings if running is not None else {}

    def apply(self, overrides: Mapping[str, Any]) -> bool:
        """Run the drivers the file and ``overrides`` (the desired state's ``drivers``)
        say, with their options. True when a driver was stopped, started or rebuilt."""
        overrides = _valid(overrides)
        wanted = list(self._base)
        for name in sorted(overrides):
            if name not in self.installed and name not in self._base:
                LOG.warning("the desired state names driver %s, which is not installed", name)
        for name in sorted(set(self.installed) | set(self._base)):
            enabled = overrides.get(name, {}).get("enabled")
            if enabled is True and name not in wanted:
                wanted.append(name)
            elif enabled is False and name in wanted:
                wanted.remove(name)
        changed = False
        for name in list(self._running):
            if name not in wanted:
                del self._running[name]
                LOG.info("driver %s disabled by the desired state", name)
                changed = True
        errors: dict[str, str] = {}
        for name in wanted:
            try:
                changed |= self._start(name, overrides.get(name, {}).get("config") or {})
            except _Refused as error:
                errors[name] = str(error)[:MAX_ERROR]
                LOG.error("driver %s: %s", name, error)
        self._running = {name: self._running[name] for name in wanted if name in self._running}
        self._wanted, self._errors, self.overrides = wanted, errors, overrides
        return changed

    def _start(self, name: str, config: Mapping[str, str]) -> bool:
        """Build ``name`` with the file's options and ``config`` over them, unless it
        runs with those already. Raises _Refused (the driver left as it was)."""
        settings = dict(self._file_settings(name))
        if config:
            settings.update(self._parse(name, config))
        digest = config_digest(settings)
        running = self._running.get(name)
        if running is not None and running.digest == digest:
            return False
        try:
            driver = self._load(name, settings)
        except Exception as error:  # a driver refusing its options is data: reported
            raise _Refused(
                f"the driver could not be loaded with these options: "
                f"{type(error).__name__}: {error}"
            ) from error
        self._running[name] = _Running(driver, settings, digest)
        LOG.info(
            "driver %s %s (options %s)",
            name,
            "reloaded" if running is not None else "enabled by the desired state",
            digest[:19],
        )
        return True

    def _parse(self, name: str, config: Mapping[str, str]) -> dict[str, Any]:
        """Override strings as the options' types read them."""
        try:
            options = {opt.dest: opt for opt in self._options(name)}
        except LookupError as error:
            raise _Refused(str(error)) from error
        values: dict[str, Any] = {}
        for key, value in sorted(config.items()):
            opt = options.get(key)
            if opt is None:
                known = ", ".join(sorted(options)) or "none"
                raise _Refused(f"no option {key!r} in [{name}] (its options: {known})")
            try:
                values[key] = opt.type(value)
            except (ValueError, TypeError) as error:
                raise _Refused(f"[{name}] {key} = {value!r}: {error}") from error
        return values

    # -- the report -------------------------------------------------------------------

    def report(self, found: Mapping[str, int], failed: Mapping[str, str]) -> list[dict[str, Any]]:
        """The snapshot's ``drivers``: every installed plug-in (and every running
        driver), sorted by name. ``found``/``failed``: the last discovery's count of
        devices and error per running driver."""
        entries = []
        for name in sorted(set(self.installed) | set(self._running)):
            running = self._running.get(name)
            version = self.installed.get(name)
            error = self._errors.get(name) or (failed.get(name) if running else None)
            entries.append(
                {
                    "name": name,
                    "version": version[:MAX_VERSION] if version is not None else None,
                    "enabled": name in self._wanted,
                    "config_digest": running.digest if running is not None else None,
                    "found": min(found.get(name, 0), 4096) if running is not None else 0,
                    "error": error[:MAX_ERROR] if error is not None else None,
                }
            )
        return entries[:MAX_DRIVERS]


def _valid(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The well-formed part of the desired state's ``drivers`` (name → ``enabled``
    True/False/None and ``config`` of strings); what is not is logged and left out."""
    valid: dict[str, dict[str, Any]] = {}
    if not isinstance(overrides, Mapping):
        LOG.warning("the desired state's drivers are not an object: ignored")
        return valid
    for name, override in overrides.items():
        if not isinstance(override, Mapping):
            LOG.warning("the desired state's override of driver %s is not an object", name)
            continue
        enabled = override.get("enabled")
        config = override.get("config") or {}
        if enabled not in (True, False, None) or not isinstance(config, Mapping):
            LOG.warning("the desired state's override of driver %s is malformed", name)
            continue
        valid[str(name)] = {
            "enabled": enabled,
            "config": {str(k): v if isinstance(v, str) else str(v) for k, v in config.items()},
        }
    return valid
