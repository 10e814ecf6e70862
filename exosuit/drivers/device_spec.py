"""Nova's ``[pci] device_spec`` syntax: which PCI functions an operator hands out.

Each configured value is a JSON object (or a JSON list of objects)::

    {"vendor_id": "10de", "product_id": "1eb8"}
    {"address": "0000:3b:*.*"}                        # glob; missing fields are wildcards
    {"address": ":3b:00."}                            # as in Nova: domain, function any
    {"address": {"domain": ".*", "bus": "3b", "slot": "0[0-3]", "function": "[1-7]"}}
    {"devname": "ens1f0"}                             # a network interface's PCI function
    {"vendor_id": "1af4", "resource_class": "CUSTOM_VIRTIO", "traits": "fast,CUSTOM_X"}

The matching rules are Nova's (nova/pci/devspec.py, documented in nova/conf/pci.py):

* ``vendor_id`` and ``product_id`` are hexadecimal (``*`` or absent: any).
* ``address`` as a string is a glob ``[[[[<domain>]:]<bus>]:][<slot>][.[<function>]]``
  where each field is either ``*`` (or empty) or a hexadecimal number (domain ≤ ffff,
  bus ≤ ff, slot ≤ 1f, function ≤ 7). As a dict it holds regular expressions for
  ``domain``, ``bus``, ``slot`` and ``function``, matched from the start of the field
  (Python ``re.match``; add ``$`` to anchor the end).
* ``devname`` names a network interface; it selects the PCI function the interface
  belongs to. It cannot be combined with ``address``.
* When the address (or the interface) names exactly one function and that function is an
  SR-IOV physical function, its virtual functions match too.
* Every other key is a tag. Exosuit reads ``resource_class``, ``traits`` (a comma separated
  list) and ``device_type``; other tags (``physical_network``, ``trusted`` …) are accepted
  and ignored.

Unlike Nova, an address dict with a key other than those four is an error rather than
silently ignored (a misspelt key would otherwise select every function).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

import os_resource_classes
import os_traits

from exosuit.drivers.sysfs import PciFunction, Sysfs

__all__ = [
    "BoundDeviceSpec",
    "DeviceSpec",
    "DeviceSpecError",
    "interface_address",
    "is_pci_address",
    "parse_device_specs",
]

ANY = "*"
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HEX = re.compile(r"^(0[xX])?[0-9a-fA-F]+$")
_DEVICE_TYPE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
_ADDRESS_FIELDS = ("domain", "bus", "slot", "function")
_LIMITS = {
    "domain": (0xFFFF, "{:04x}"),
    "bus": (0xFF, "{:02x}"),
    "slot": (0x1F, "{:02x}"),
    "function": (0x7, "{:x}"),
}


class DeviceSpecError(ValueError):
    """A ``device_spec`` value that Nova's syntax does not allow."""


def is_pci_address(text: str) -> bool:
    """``0000:3b:00.1`` (lower-case, as the kernel names functions)."""
    return bool(_PCI_ADDRESS.match(text))


def _split(address: str) -> dict[str, str]:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return {"domain": domain, "bus": bus, "slot": slot, "function": function}


def _hex_field(value: str, name: str, maximum: int, form: str, spec: str) -> str:
    if not _HEX.match(value):
        raise DeviceSpecError(f"{name} {value!r} is not a hexadecimal number in {spec}")
    number = int(value, 16)
    if number > maximum:
        raise DeviceSpecError(f"{name} {value!r} is greater than {maximum:x} in {spec}")
    return form.format(number)


def _glob(address: str, spec: str) -> dict[str, str]:
    """Nova's glob address: fields are ``*``/empty (any) or hexadecimal numbers."""
    fields = dict.fromkeys(_ADDRESS_FIELDS, ANY)
    dbs, _, function = address.partition(".")
    if function.strip():
        fields["function"] = function.strip()
    if dbs:
        parts = dbs.split(":")
        if len(parts) > 3:
            raise DeviceSpecError(f"address {address!r} has too many fields in {spec}")
        parts = [ANY] * (3 - len(parts)) + parts
        for name, part in zip(("domain", "bus", "slot"), parts, strict=True):
            fields[name] = part.strip() or ANY
    for name, value in fields.items():
        if value != ANY:
            maximum, form = _LIMITS[name]
            fields[name] = _hex_field(value, f"address {name}", maximum, form, spec)
    return fields


def _regex(address: Mapping[str, Any], spec: str) -> dict[str, re.Pattern[str]]:
    unknown = set(address) - set(_ADDRESS_FIELDS)
    if unknown:
        raise DeviceSpecError(
            f"address has unknown key(s) {', '.join(sorted(unknown))} "
            f"(expected domain, bus, slot, function) in {spec}"
        )
    patterns = {}
    for name in _ADDRESS_FIELDS:
        value = address.get(name, ".*")
        if not isinstance(value, str):
            raise DeviceSpecError(f"address {name} must be a string in {spec}")
        try:
            patterns[name] = re.compile(value)
        except re.error as error:
            raise DeviceSpecError(
                f"address {name} {value!r} is not a regular expression ({error}) in {spec}"
            ) from None
    return patterns


@functools.cache
def _standard_traits() -> frozenset[str]:
    return frozenset(os_traits.get_traits())


def _normalize_trait(name: str) -> str:
    name = name.strip()
    if name in _standard_traits():
        return name
    name = name.upper()
    if os_traits.is_custom(name):
        return name
    normalized: str = os_traits.normalize_name(name)  # os-traits ships no type hints
    return normalized


def _normalize_resource_class(name: str) -> str:
    name = name.strip().upper()
    if name in os_resource_classes.STANDARDS or os_resource_classes.is_custom(name):
        return name
    normalized: str = os_resource_classes.normalize_name(name)  # no type hints either
    return normalized


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One parsed ``device_spec`` object. ``bind`` it to a host to match functions."""

    source: str
    vendor_id: str = ANY
    product_id: str = ANY
    devname: str | None = None
    glob: Mapping[str, str] | None = None
    regex: Mapping[str, re.Pattern[str]] | None = None
    tags: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any], source: str | None = None) -> DeviceSpec:
        spec = source or json.dumps(value, sort_keys=True)
        if not isinstance(value, Mapping):
            raise DeviceSpecError(f"a device_spec must be a JSON object, not {spec}")
        tags = dict(value)
        ids = {}
        for key in ("vendor_id", "product_id"):
            raw = tags.pop(key, ANY)
            if not isinstance(raw, str):
                raise DeviceSpecError(f"{key} must be a string in {spec}")
            raw = raw.strip()
            ids[key] = ANY if raw in (ANY, "") else _hex_field(raw, key, 0xFFFF, "{:04x}", spec)
        devname = tags.pop("devname", None)
        address = tags.pop("address", None)
        if devname is not None and address is not None:
            raise DeviceSpecError(f"address and devname are mutually exclusive in {spec}")
        if devname is not None and (not isinstance(devname, str) or not devname.strip()):
            raise DeviceSpecError(f"devname must be an interface name in {spec}")
        glob = regex = None
        if isinstance(address, str):
            glob = _glob(address, spec)
        elif isinstance(address, Mapping):
            regex = _regex(address, spec)
        elif address is not None:
            raise DeviceSpecError(f"address must be a string or an object in {spec}")
        elif devname is None:
            glob = dict.fromkeys(_ADDRESS_FIELDS, ANY)
        result = cls(
            source=spec,
            vendor_id=ids["vendor_id"],
            product_id=ids["product_id"],
            devname=devname.strip() if devname else None,
            glob=glob,
            regex=regex,
            tags=tags,
        )
        # Validate the tags Exosuit reads now, not at the first discovery.
        result.resource_class  # noqa: B018
        result.traits  # noqa: B018
        result.device_type  # noqa: B018
        return result

    def _tag(self, key: str) -> str | None:
        value = self.tags.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise DeviceSpecError(f"{key} must be a string in {self.source}")
        return value.strip() or None

    @property
    def resource_class(self) -> str | None:
        """The ``resource_class`` tag, normalized as Nova does (upper case, ``CUSTOM_``)."""
        value = self._tag("resource_class")
        return _normalize_resource_class(value) if value else None

    @property
    def traits(self) -> tuple[str, ...]:
        """The ``traits`` tag: standard os-traits names kept, others made ``CUSTOM_*``."""
        value = self._tag("traits") or ""
        names = [_normalize_trait(t) for t in value.split(",") if t.strip()]
        return tuple(dict.fromkeys(names))

    @property
    def device_type(self) -> str | None:
        value = self._tag("device_type")
        if value is None:
            return None
        if not _DEVICE_TYPE.match(value.upper()):
            raise DeviceSpecError(
                f"device_type {value!r} must be a word such as GPU, NIC or "
                f"ACCELERATOR in {self.source}"
            )
        return value.upper()

    def bind(self, sysfs: Sysfs) -> BoundDeviceSpec:
        """Resolve what depends on the host: the interface name, whether a single address
        is an SR-IOV physical function (whose VFs then match too)."""
        if self.devname is not None:
            address = interface_address(sysfs, self.devname)
            if address is None:
                return BoundDeviceSpec(self, None, None, False)
            return BoundDeviceSpec(self, _split(address), None, _is_pf(sysfs, address))
        fields = self.glob if self.glob is not None else None
        single = None
        if fields is not None and ANY not in fields.values():
            single = "{domain}:{bus}:{slot}.{function}".format(**fields)
        elif self.regex is not None and all(
            p.pattern and all(c in string.hexdigits for c in p.pattern) for p in self.regex.values()
        ):
            single = "{domain}:{bus}:{slot}.{function}".format(
                **{k: p.pattern.lower() for k, p in self.regex.items()}
            )
        return BoundDeviceSpec(
            self, fields, self.regex, single is not None and _is_pf(sysfs, single)
        )


@dataclasses.dataclass(frozen=True)
class BoundDeviceSpec:
    """A spec resolved against one host's sysfs."""

    spec: DeviceSpec
    glob: Mapping[str, str] | None  # None with no regex: the spec matches nothing
    regex: Mapping[str, re.Pattern[str]] | None
    physical_function: bool

    def _address_matches(self, address: str) -> bool:
        fields = _split(address)
        if self.regex is not None:
            return all(self.regex[k].match(fields[k]) for k in _ADDRESS_FIELDS)
        if self.glob is None:
            return False
        return all(self.glob[k] in (ANY, fields[k]) for k in _ADDRESS_FIELDS)

    def matches(self, function: PciFunction) -> bool:
        if self.spec.vendor_id not in (ANY, function.vendor_id):
            return False
        if self.spec.product_id not in (ANY, function.device_id):
            return False
        if self.physical_function and function.physfn and self._address_matches(function.physfn):
            return True
        return self._address_matches(function.address)


def _is_pf(sysfs: Sysfs, address: str) -> bool:
    total = sysfs.read("bus", "pci", "devices", address, "sriov_totalvfs")
    try:
        return int(total or 0) > 0
    except ValueError:
        return False


def interface_address(sysfs: Sysfs, ifname: str) -> str | None:
    """The PCI function a network interface belongs to: the deepest PCI address in the
    interface's sysfs path (``…/0000:3b:00.0/net/ens1f0``, or
    ``…/0000:00:03.0/virtio2/net/eth0`` for virtio)."""
    if not ifname or "/" in ifname or ifname in (".", ".."):
        return None
    path = sysfs.path("class", "net", ifname)
    if not os.path.exists(path):
        return None
    found = None
    for part in os.path.realpath(path).split(os.sep):
        if is_pci_address(part):
            found = part
    return found


def parse_device_specs(values: Iterable[str]) -> list[DeviceSpec]:
    """Parse ``[pci] device_spec`` values: each a JSON object or a JSON list of objects."""
    specs = []
    for text in values or ():
        try:
            value = json.loads(text)
        except ValueError as error:
            raise DeviceSpecError(f"device_spec {text!r} is not JSON: {error}") from None
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, dict):
                raise DeviceSpecError(
                    f"device_spec {text!r} must be a JSON object or a list of objects"
                )
            specs.append(DeviceSpec.from_dict(item, json.dumps(item, sort_keys=True)))
    return specs
