"""CDI spec files for the devices this host's claims hand to containers (issue 12).

A claim made with ``"container": true`` puts an entry in its host's desired state::

    "containers": [{"claim": "<claim uuid>", "devices": [{"name": "<claim uuid>-<n>",
        "class": "fpga", "device": "<device uuid>", "controlpath_id": {...},
        "driver": "<plug-in>", "attach_handle": {"type": "PCI", "info": {...}}}]}]

For each, the agent writes one CDI spec file per class into ``[cdi] spec_dir`` (default
``/var/run/cdi``, which container engines read): ``exosuit.dev-<class>_<claim>.json``,
kind ``exosuit.dev/<class>``, cdiVersion ``0.5.0`` (the newest Debian 12's podman
loads), one device per attach handle named ``<claim>-<n>``, with the device nodes,
environment and mounts its driver gives (``ContainerDevice.container_edits``), plus
``EXOSUIT_CLAIM=<claim>`` and ``EXOSUIT_DEVICE_<n>_<NAME>`` for each of the driver's
env names. doc/cdi.md is the reference.

Three parts:

* pure: ``parse_claim`` reads a desired-state entry, ``build_specs`` makes the specs of a
  claim from its drivers' edits, ``spec_errors`` checks a spec against the CDI 0.5.0
  schema (exosuit/schemas/cdi-spec-0.5.0.json), which the writer does before writing;
* files: ``SpecDirectory`` writes a spec atomically (exosuit/files.py: ``.<name>.tmp``
  in the same directory, which CDI never reads, fsync, rename, fsync of the directory)
  and removes one;
* the reconciler, ``CdiReconciler`` (the base: agent/reconciler.py): writes the specs
  of the claims listed, reports ``written`` or ``failed`` to
  ``PUT /agent/v1/hosts/{hostname}/claims/{claim_uuid}``, rewrites a file that went
  missing or changed (``/var/run/cdi`` is emptied by a reboot), and removes the files of
  claims no longer listed. Only files it wrote are removed: their names are recorded in
  the agent cache before they are written. The outcome stays in the cache, sent again
  with backoff, until the API acknowledges it (200; 404: the claim is unknown or
  released, and its files are removed at once). Nothing here waits: the agent loop does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from exosuit import files, schemas
from exosuit.agent.cache import AgentCache, AgentState, ContainerSpecs
from exosuit.agent.plugins import DriverSet
from exosuit.agent.reconciler import MAX_REASON, KeepRecord, Reconciler
from exosuit.agent.reporter import Response, Session
from exosuit.drivers.base import AttachHandle, ContainerDevice, ContainerEdits, Device, Driver

LOG = logging.getLogger(__name__)

__all__ = [
    "CDI_VERSION",
    "DEFAULT_SPEC_DIR",
    "VENDOR",
    "CdiReconciler",
    "ClaimDevice",
    "ContainerClaim",
    "SpecDirectory",
    "build_specs",
    "cdi_device_id",
    "parse_claim",
    "spec_errors",
    "spec_file_name",
]

VENDOR = "exosuit.dev"
CDI_VERSION = "0.5.0"
DEFAULT_SPEC_DIR = "/var/run/cdi"
SCHEMA_FILE = os.path.join(os.path.dirname(schemas.__file__), "cdi-spec-0.5.0.json")
_NEVER = object()  # a generation no desired state has

# A class as CDI 0.5.0 takes it (no '.': that needs 0.6.0), lower case as the server
# derives it from the device type.
_CLASS = re.compile(r"^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SPEC_FILE = re.compile(r"^exosuit\.dev-[a-z]([a-z0-9_-]*[a-z0-9])?_[0-9a-f-]{36}\.json$")


# -- the pure part --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ClaimDevice:
    """One device of a claim's desired-state entry: what to find and what to give."""

    name: str  # <claim uuid>-<n>
    cdi_class: str  # fpga, gpu …
    device: str  # the device's uuid (the API's)
    controlpath_id: Mapping[str, Any]
    driver: str | None
    attach_handle: AttachHandle


@dataclasses.dataclass(frozen=True)
class ContainerClaim:
    """A claim of the desired state's ``containers``: its uuid and devices, in order."""

    claim: str
    devices: tuple[ClaimDevice, ...]
    digest: str  # of the entry as the API sent it: a change means write again


def spec_file_name(cdi_class: str, claim: str) -> str:
    """``exosuit.dev-<class>_<claim>.json``: CDI's ``<vendor>-<class>_<id>.json``."""
    return f"{VENDOR}-{cdi_class}_{claim}.json"


def cdi_device_id(cdi_class: str, name: str) -> str:
    """``exosuit.dev/<class>=<name>``: what a container engine is given (``--device``)."""
    return f"{VENDOR}/{cdi_class}={name}"


def parse_claim(item: Any) -> ContainerClaim:
    """The entry ``item`` of the desired state's ``containers``; ValueError (saying
    what is wrong) for one this agent cannot write specs for."""
    if not isinstance(item, Mapping):
        raise ValueError("an entry is not an object")
    claim = item.get("claim")
    if not isinstance(claim, str) or not _UUID.match(claim):
        raise ValueError(f"the claim {claim!r} is not a lower-case UUID")
    raw = item.get("devices")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"claim {claim}: no devices")
    devices = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise ValueError(f"claim {claim}: device {index} is not an object")
        name, cdi_class = entry.get("name"), entry.get("class")
        handle = entry.get("attach_handle")
        if name != f"{claim}-{index}":
            raise ValueError(f"claim {claim}: device {index} is named {name!r}")
        if not isinstance(cdi_class, str) or not _CLASS.match(cdi_class):
            raise ValueError(
                f"claim {claim}: the class {cdi_class!r} is not one CDI 0.5.0 takes "
                "(lower-case letters, digits, '_' and '-')"
            )
        if not (
            isinstance(handle, Mapping)
            and isinstance(handle.get("type"), str)
            and isinstance(handle.get("info"), Mapping)
            and isinstance(entry.get("controlpath_id"), Mapping)
        ):
            raise ValueError(f"claim {claim}: device {index} has no attach handle or control path")
        driver = entry.get("driver")
        devices.append(
            ClaimDevice(
                name=name,
                cdi_class=cdi_class,
                device=str(entry.get("device") or ""),
                controlpath_id=dict(entry["controlpath_id"]),
                driver=driver if isinstance(driver, str) else None,
                attach_handle=AttachHandle(
                    handle["type"], {str(k): str(v) for k, v in handle["info"].items()}
                ),
            )
        )
    digest = "sha256:" + hashlib.sha256(schemas.canonical_json(item).encode()).hexdigest()
    return ContainerClaim(claim=claim, devices=tuple(devices), digest=digest)


def _handle_address(handle: AttachHandle) -> str | None:
    """The PCI address a ``PCI`` handle names, when its info has one."""
    info = handle.attach_info
    if handle.attach_type != "PCI" or not {"domain", "bus", "device", "function"} <= set(info):
        return None
    return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"


def _device_edits(
    claim: str, index: int, device: ClaimDevice, edits: ContainerEdits
) -> dict[str, Any]:
    env = dict(edits.env)
    if "PCI_ADDRESS" not in env:
        address = _handle_address(device.attach_handle)
        if address is not None:
            env["PCI_ADDRESS"] = address
    body: dict[str, Any] = {
        "env": [f"EXOSUIT_CLAIM={claim}"]
        + [f"EXOSUIT_DEVICE_{index}_{key}={value}" for key, value in sorted(env.items())]
    }
    if edits.device_nodes:
        body["deviceNodes"] = [
            {
                "path": node.path,
                **({"hostPath": node.host_path} if node.host_path is not None else {}),
                **({"permissions": node.permissions} if node.permissions is not None else {}),
            }
            for node in edits.device_nodes
        ]
    if edits.mounts:
        body["mounts"] = [
            {
                "hostPath": mount.host_path,
                "containerPath": mount.container_path,
                **({"options": list(mount.options)} if mount.options else {}),
                **({"type": mount.type} if mount.type is not None else {}),
            }
            for mount in edits.mounts
        ]
    return body


def build_specs(
    claim: ContainerClaim, edits: Sequence[ContainerEdits]
) -> dict[str, dict[str, Any]]:
    """The spec files of ``claim`` (file name → spec), one per class in the order the
    classes first appear; ``edits[n]`` is what the driver gives for device ``n``."""
    if len(edits) != len(claim.devices):
        raise ValueError(f"{len(claim.devices)} devices, {len(edits)} edits")
    specs: dict[str, dict[str, Any]] = {}
    for index, (device, device_edits) in enumerate(zip(claim.devices, edits, strict=True)):
        name = spec_file_name(device.cdi_class, claim.claim)
        spec = specs.setdefault(
            name,
            {"cdiVersion": CDI_VERSION, "kind": f"{VENDOR}/{device.cdi_class}", "devices": []},
        )
        spec["devices"].append(
            {
                "name": device.name,
                "containerEdits": _device_edits(claim.claim, index, device, device_edits),
            }
        )
    return specs


@functools.cache
def _validator() -> Any:
    # Imported when a spec is first checked (an agent that writes none never needs it).
    import jsonschema

    with open(SCHEMA_FILE) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def spec_errors(spec: Any) -> list[str]:
    """Why ``spec`` is not a spec a CDI 0.5.0 reader (podman 4.3.1's) would load: its
    schema's errors, and a device name given twice ([] when it would load)."""
    errors = [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(the spec)'}: {error.message}"
        for error in sorted(_validator().iter_errors(spec), key=lambda e: list(e.absolute_path))
    ]
    if isinstance(spec, Mapping) and isinstance(spec.get("devices"), list):
        names = [d.get("name") for d in spec["devices"] if isinstance(d, Mapping)]
        errors += [
            f"devices: {n!r} is defined twice"
            for n in sorted({n for n in names if names.count(n) > 1}, key=str)
        ]
    return errors


def _encode(spec: Mapping[str, Any]) -> bytes:
    return (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the files ------------------------------------------------------------------------


class SpecDirectory:
    """The CDI spec directory (``[cdi] spec_dir``): atomic writes, and removal by name of
    the agent's own files only (``exosuit.dev-<class>_<uuid>.json``)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)

    def _own(self, name: str) -> str:
        if not _SPEC_FILE.match(name):
            raise ValueError(f"{name!r} is not the name of an Exosuit CDI spec file")
        return os.path.join(self.path, name)

    def write(self, name: str, data: bytes) -> None:
        """Write ``data`` as ``name`` (exosuit/files.py): ``.<name>.tmp`` (CDI reads
        neither hidden nor ``.tmp`` files; the next write replaces what a crash left),
        fsync, rename over ``name``, fsync of the directory. A reader sees the old file
        or the new one, never part of one."""
        path = self._own(name)
        os.makedirs(self.path, mode=0o755, exist_ok=True)
        files.atomic_write(path, data, permissions=0o644, temporary=f".{name}.tmp")

    def read(self, name: str) -> bytes | None:
        try:
            with open(self._own(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def remove(self, name: str) -> None:
        """Remove ``name`` and what an interrupted write of it left (nothing if absent;
        OSError when it cannot be removed)."""
        for path in (self._own(name), os.path.join(self.path, f".{name}.tmp")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


# -- the reconciler -------------------------------------------------------------------


class _Failed(Exception):
    """The claim's specs cannot be written: the message is the reason reported."""


class CdiReconciler(Reconciler[ContainerClaim, ContainerSpecs]):
    """Writes the CDI specs of this host's desired ``containers`` and reports them (the
    base: agent/reconciler.py).

    ``step(state)`` returns True when it wrote or removed a spec file; a spec changes no
    device, so the agent loop reports nothing for it.
    """

    section = "containers"
    path = "claims"
    noun = "a container entry"
    subject = "claim {key}"
    changes_devices = False

    def __init__(
        self,
        hostname: str,
        plugins: DriverSet,
        session: Session,
        endpoint: str,
        cache: AgentCache,
        spec_dir: str,
        **options: Any,
    ) -> None:
        super().__init__(hostname, plugins, session, endpoint, cache, **options)
        self.directory = SpecDirectory(spec_dir)
        # claim → the desired-state generation its specs were last written at (this
        # process): a failure is tried again at a new generation, or after a restart
        self._tried: dict[str, object] = {}
        self._generation: object = None  # the desired state's, at this step
        self._discovered: dict[str, list[Device]] = {}  # one discovery per driver per step

    def step(self, state: AgentState) -> bool:
        """Send the outcomes not acknowledged yet; write the specs of the claims listed
        that have none (or whose entry changed, or whose files went missing or
        changed); remove the files of the claims no longer listed."""
        self._generation = state.desired_state.get("generation")
        self._discovered = {}
        return super().step(state)

    def parse(self, item: Any) -> tuple[str, ContainerClaim]:
        claim = parse_claim(item)
        return claim.claim, claim

    def records(self, state: AgentState) -> dict[str, ContainerSpecs]:
        return state.containers

    def settled(self, record: ContainerSpecs, item: ContainerClaim) -> bool:
        """Whether the claim's specs are as its entry asks: written for this entry and
        intact (a reboot empties /var/run/cdi; a file that went missing or changed is
        written again), or failed and tried at this generation by this process (a
        failure is tried again at a new generation, or after a restart), or gone (the
        API no longer knows the claim). A write a crash interrupted is not."""
        if record["digest"] != item.digest or record["state"] == "pending":
            return False
        if record["state"] == "written":
            if self._intact(record):
                return True
            self.log.warning("claim %s: a CDI spec file went missing or changed", item.claim)
            return False
        if record["state"] == "failed":
            return self._tried.get(item.claim, _NEVER) == self._generation
        return True  # gone: the API no longer knows it

    def outgoing(self, record: ContainerSpecs) -> Mapping[str, Any] | None:
        return None if record["state"] == "pending" else record["report"]

    def answered(
        self, state: AgentState, key: str, record: ContainerSpecs, response: Response
    ) -> None:
        # A report the API rejects (400, 409) will not be accepted later either.
        if response.status_code == 404:
            self.log.info(
                "claim %s: the API does not know it (released): its CDI specs removed", key
            )
            if self._remove(key, record):
                record["files"] = {}
            record["state"] = "gone"
        else:
            super().answered(state, key, record, response)

    def stale(self, record: ContainerSpecs, item: ContainerClaim | None) -> bool:
        return item is None  # acknowledged or not: the claim is gone

    def drop(self, state: AgentState, key: str, record: ContainerSpecs) -> bool:
        if not self._remove(key, record):
            raise KeepRecord  # removed at the next step
        self._tried.pop(key, None)
        self.log.info("claim %s: no longer in the desired state: its CDI specs removed", key)
        return True

    def _intact(self, specs: ContainerSpecs) -> bool:
        """Whether every file written for the claim is there, as written."""
        for name, digest in specs["files"].items():
            data = self.directory.read(name)
            if data is None or _sha256(data) != digest:
                return False
        return True

    # -- one claim ---------------------------------------------------------------------

    def run(self, state: AgentState, key: str, item: ContainerClaim) -> bool:
        names = list(dict.fromkeys(spec_file_name(d.cdi_class, key) for d in item.devices))
        previous = state.containers.get(key)
        # The names are ours before any file exists: a crash after the write leaves no
        # file this agent would not know to remove.
        files: dict[str, str | None] = {name: None for name in names}
        if previous is not None:
            files = {**previous["files"], **files}
        specs: ContainerSpecs = {
            "digest": item.digest,
            "files": files,
            "state": "pending",
            "report": previous["report"] if previous else None,
            "acknowledged": previous["acknowledged"] if previous else False,
        }
        self.remember(state, key, specs)
        try:
            written = self._write_files(item)
            report: dict[str, Any] = {
                "cdi": "written",
                "reason": None,
                "devices": [cdi_device_id(d.cdi_class, d.name) for d in item.devices],
            }
            self.log.info("claim %s: CDI specs written: %s", key, ", ".join(sorted(written)))
        except _Failed as failure:
            written = {}
            reason = str(failure)[:MAX_REASON]
            report = {"cdi": "failed", "reason": reason, "devices": []}
            self.log.error("claim %s: no CDI spec written: %s", key, reason)
        kept: dict[str, str | None] = dict(written)
        stale = {name: specs["files"][name] for name in set(specs["files"]) - set(written)}
        if not self._remove(key, {**specs, "files": stale}):
            kept.update(stale)  # still ours: removed when the claim goes
        specs["files"] = dict(sorted(kept.items()))
        specs["state"] = str(report["cdi"])
        if specs["report"] != report:
            specs["report"], specs["acknowledged"] = report, False
        self.finish(state, key, specs)
        self._tried[key] = self._generation
        return True

    def _write_files(self, claim: ContainerClaim) -> dict[str, str]:
        """Build, check and write the claim's specs: file name → SHA-256 written."""
        edits = [self._edits(device) for device in claim.devices]
        specs = build_specs(claim, edits)
        for name, spec in specs.items():
            errors = spec_errors(spec)
            if errors:
                raise _Failed(f"{name} would not load (CDI {CDI_VERSION}): {'; '.join(errors)}")
        written = {}
        for name, spec in specs.items():
            data = _encode(spec)
            try:
                self.directory.write(name, data)
            except OSError as error:
                raise _Failed(
                    f"cannot write {os.path.join(self.directory.path, name)}: {error}"
                ) from error
            written[name] = _sha256(data)
        return written

    def _edits(self, device: ClaimDevice) -> ContainerEdits:
        found = self._find(device)
        if found is None:
            raise _Failed(f"device {_where(device)} is not found on host {self.hostname}")
        driver, host_device = found
        if not isinstance(driver, ContainerDevice):
            raise _Failed(f"the driver {driver.name} cannot hand devices to containers")
        try:
            return driver.container_edits(host_device, device.attach_handle)
        except Exception as error:  # a driver's refusal is the reason reported
            message = (
                str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
            )
            raise _Failed(f"{driver.name}: {message}") from error

    def _find(self, device: ClaimDevice) -> tuple[Driver, Device] | None:
        """The driver and device the entry names, as discovered now: the device found by
        the driver it names, else by the first driver that finds it."""
        identity = schemas.device_identity(device.controlpath_id)
        discovered = self._discovered
        first: tuple[Driver, Device] | None = None
        for driver in self.plugins.drivers:
            if driver.name not in discovered:
                try:
                    discovered[driver.name] = driver.discover()
                except Exception as error:  # one driver's failure does not hide the others
                    LOG.warning("driver %s failed: %s", driver.name, error)
                    discovered[driver.name] = []
            for host_device in discovered[driver.name]:
                if schemas.device_identity(host_device.to_snapshot()["controlpath_id"]) == identity:
                    if driver.name == device.driver:
                        return driver, host_device
                    first = first or (driver, host_device)
        return first

    def _remove(self, claim: str, specs: ContainerSpecs) -> bool:
        """Remove the claim's files; False (logged) when one could not be removed."""
        removed = True
        for name in specs["files"]:
            try:
                self.directory.remove(name)
            except OSError as error:
                LOG.warning("claim %s: cannot remove the CDI spec %s: %s", claim, name, error)
                removed = False
        return removed


def _where(device: ClaimDevice) -> str:
    """The device as an operator knows it: its PCI address when the id is one."""
    info = device.controlpath_id.get("cpid_info")
    if isinstance(info, Mapping) and {"domain", "bus", "device", "function"} <= set(info):
        return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"
    return device.device or schemas.device_identity(device.controlpath_id)
