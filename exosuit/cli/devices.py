"""``exosuit device list|show|enable|disable|ready|inactive|drain|undrain|health|set|unset|
delete``: the physical cards of every host (``/v2/devices``), enabling and disabling
them, marking them ready or inactive (API 2.7),
draining them for maintenance and their health (API 2.9), their labels and deleting a
lost one (API 2.10; doc/devices.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from cliff.command import Command
from cliff.lister import Lister
from cliff.show import ShowOne

from exosuit.cli.base import (
    DEVICE,
    ApiCommand,
    Filter,
    ListCommand,
    Listed,
    ShowCommand,
    Shown,
    cells,
    segment,
)
from exosuit.cli.client import CLIError
from exosuit.cli.waiting import add_wait_options, wait_for

__all__ = [
    "DeviceDelete",
    "DeviceDisable",
    "DeviceEnable",
    "DeviceDrain",
    "DeviceHealth",
    "DeviceInactive",
    "DeviceList",
    "DeviceReady",
    "DeviceSet",
    "DeviceShow",
    "DeviceUndrain",
    "DeviceUnset",
]


class DeviceList(ListCommand):
    """List devices: one physical card (or PCI function) of a host each."""

    path = "/v2/devices"
    key = "devices"
    nothing = "No devices."
    # Whether a device is free to use at a glance (2.9): its health (held: kept from
    # every offer), its drain (its `maintenance`: draining, drained, or disabled), its
    # activation and its use (in use while an ARQ or a claim holds one of its attach
    # handles: `holders`). In a table the UUID is its first 8 characters (a short id every
    # command accepts; the whole one with --long or -f json) and the table fits 80 columns.
    columns = ("uuid", "hostname", "type", "health", "drain", "activation", "use")
    # labels (2.10) first of the long ones: -c labels (or --long) shows them.
    long_columns = (
        "maintenance",
        "model",
        "status",
        "presence",
        "labels",
        "vendor",
        "status_reason",
        "activation_reason",
        "driver_name",
        "pci_address",
        "numa_node",
        "pcie_root",
        "iommu_group",
        "firmware_version",
        "presence_reason",
        "std_board_info",
        "vendor_board_info",
        "services",
        "usage",
        "usage_seen_at",
        "holders",
        "created_at",
        "updated_at",
    )
    sort_keys = ("created_at", "uuid", "hostname", "type", "vendor")
    filters = (
        Filter("--host", "hostname", "Only the devices of this host.", "HOSTNAME"),
        Filter("--type", "type", "Only devices of this type (FPGA, GPU, …).", "TYPE"),
        Filter("--vendor", "vendor", "Only devices of this vendor id (10de, …).", "VENDOR"),
        Filter(
            "--status",
            "status",
            "Only enabled or maintaining devices (API 2.3).",
            "STATUS",
            needs="2.3",
        ),
        Filter(
            "--activation",
            "activation",
            "Only devices in this activation (inactive, activating, ready, deactivating; API 2.7).",
            "ACTIVATION",
            needs="2.7",
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--label",
            action="append",
            metavar="KEY=VALUE",
            help="Only devices with this label (repeatable: every one; API 2.10).",
        )
        return parser

    def list_item(self, item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "drain": maintenance_text(item), "use": use_text(item)}

    def table_item(self, item: dict[str, Any], long: bool) -> dict[str, Any]:
        return {
            **super().table_item(item, long),
            "health": health_text(item.get("health")),
        }

    def params(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        params: dict[str, Any] = super().params(parsed_args)
        if parsed_args.label:
            self.api.require("2.10", "--label")
            params["label"] = parsed_args.label
        return params


def health_text(health: dict[str, Any] | None) -> str | None:
    """``ok``, ``warning`` or ``unhealthy``, and ``held`` while kept from every offer
    (by its agent until it recovers, or by an operator): ``unhealthy held``."""
    if not health:
        return None
    held = " held" if health.get("offered") is False else ""
    return f"{health.get('state') or '?'}{held}"


def use_text(device: dict[str, Any]) -> str | None:
    """``in use`` while an ARQ or a claim holds one of the device's attach handles (its
    ``holders``, 2.9: who they are in ``device show``), else ``free``; None before 2.9."""
    holders = device.get("holders")
    if holders is None:
        return None
    return "in use" if holders else "free"


def maintenance_text(device: dict[str, Any]) -> str | None:
    """``draining`` or ``drained`` (2.9: a device in maintenance, drained or disabled),
    else ``disabled`` (before 2.9), else ``lost`` (gone from its host's report), else
    nothing: a device takes new work only when this is empty."""
    if device.get("maintenance"):
        return str(device["maintenance"])
    if device.get("status") == "maintaining":
        return "disabled"
    if device.get("presence") == "lost":
        return "lost"
    return None


class DeviceShow(ShowCommand):
    """Show one device, every field."""

    ids = {"uuid": DEVICE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEVICE", help="The device's UUID.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.api.get(f"/v2/devices/{segment(parsed_args.uuid)}")


OUTCOME_COLUMNS = ("uuid", "hostname", "activation", "outcome", "reason")
# Where a device asked ready or inactive ends (its agent's outcome): ready or inactive.
_ENDED = ("ready", "inactive")


class _Activate(ApiCommand, Lister):
    """Mark devices ready or inactive."""

    needs = "2.7"
    state: str
    exit_code = 0

    ids = {"uuids": DEVICE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "uuids", metavar="DEVICE", nargs="*", help="A device's UUID (or use --host/--type)."
        )
        parser.add_argument("--host", metavar="HOSTNAME", help="Every device of this host.")
        parser.add_argument("--type", metavar="TYPE", help="Every device of this type.")
        parser.add_argument("--driver", metavar="DRIVER", help="Every device of this driver.")
        add_wait_options(parser, "each device's agent has reported the outcome")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        selection = {
            k: v
            for k, v in (
                ("hostname", parsed_args.host),
                ("type", parsed_args.type),
                ("driver", parsed_args.driver),
            )
            if v is not None
        }
        if bool(parsed_args.uuids) == bool(selection):
            # A usage error (exit status 2), as argparse's.
            self.app.stderr.write(
                f"exosuit device {self.state}: name the devices, or select them with "
                "--host/--type/--driver (not both)\n"
            )
            raise SystemExit(2)
        if parsed_args.uuids:
            selection["uuids"] = parsed_args.uuids
        answer = self.api.post("/v2/device_activations", {"state": self.state, **selection})
        devices = answer["devices"]
        if parsed_args.wait:
            devices = self._wait(parsed_args, devices)
        if any(d["outcome"] == "refused" for d in devices) or (
            parsed_args.wait and any(d["activation"] != self.state for d in devices)
        ):
            self.exit_code = self.exit_code or 1
        return OUTCOME_COLUMNS, [cells(d, OUTCOME_COLUMNS, parsed_args.formatter) for d in devices]

    def _wait(
        self, parsed_args: argparse.Namespace, devices: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        moving = {d["uuid"] for d in devices if d["activation"] not in _ENDED}
        hosts = sorted({d["hostname"] for d in devices if d["uuid"] in moving})

        def poll() -> list[dict[str, Any]]:
            now: dict[str, Any] = {}
            for host in hosts:
                for found in self.api.list("/v2/devices", "devices", {"hostname": host}):
                    now[found["uuid"]] = found
            updated = []
            for d in devices:
                current = now.get(d["uuid"])
                if d["uuid"] in moving and current is not None:
                    d = {**d, "activation": current["activation"]}
                    d["reason"] = current["activation_reason"] or d["reason"]
                updated.append(d)
            return updated

        found: list[dict[str, Any]]
        found, _ = wait_for(
            self,
            parsed_args,
            poll,
            lambda rows: all(r["activation"] in _ENDED for r in rows),
            lambda rows: (
                f"{sum(r['activation'] in _ENDED for r in rows)}/{len(rows)} devices "
                f"{self.state} or failed"
            ),
            first=devices,
        )
        return found

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code


class DeviceReady(_Activate):
    """Mark devices ready: offered once their agent installed them (API 2.7, admin).

    Their host's agent runs their driver's install step; a device is offered once it
    succeeded.

    With --wait, wait for each agent's outcome: exit status 0 when every device is
    ready, 1 when one failed (its reason shown) or was refused."""

    state = "ready"


class DeviceInactive(_Activate):
    """Mark devices inactive: no longer offered (API 2.7, admin).

    Their agent undoes the install step. Refused for a device an accelerator request
    holds (the holders named).

    With --wait, wait until every device is inactive."""

    state = "inactive"


# -- enable and disable ------------------------------------------------------------------------

STATUS_COLUMNS = ("uuid", "hostname", "status", "maintenance", "activation")


class _Status(ApiCommand, ShowOne):
    """Enable or disable a device."""

    ids = {"uuid": DEVICE}
    action: str

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEVICE", help="The device's UUID.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        path = f"/v2/devices/{segment(parsed_args.uuid)}"
        self.api.post(f"{path}/{self.action}", None)
        device = self.api.get(path)
        return STATUS_COLUMNS, cells(device, STATUS_COLUMNS, parsed_args.formatter)


class DeviceEnable(_Status):
    """Enable a device: it takes new binds and claims again (admin).

    Its status becomes enabled (a drain ends too: see `device undrain`). Shown: the
    device's status after."""

    action = "enable"


class DeviceDisable(_Status):
    """Disable a device: it takes no new binds or claims (admin).

    Its status becomes maintaining (reserved in Placement); what holds it keeps it. To
    wait until nothing holds it, use `device drain --wait`."""

    action = "disable"


# -- drain (API 2.9) ---------------------------------------------------------------------------


def holder_text(holder: dict[str, Any]) -> str:
    """One holder of a device, for a person: its ARQ and the instance or claim behind it."""
    behind = (
        f"claim {holder['claim_uuid']}"
        if holder.get("claim_uuid")
        else f"instance {holder.get('instance_uuid') or '-'}"
    )
    return f"ARQ {holder['arq_uuid']} ({behind})"


def drain_cells(item: dict[str, Any], names: Sequence[str], formatter: str) -> tuple[Any, ...]:
    """``cells``, with the holders as one line each in a table (structured in JSON/YAML)."""
    if formatter not in ("json", "yaml") and item.get("holders"):
        item = {**item, "holders": [holder_text(h) for h in item["holders"]]}
    return cells(item, names, formatter)


class DrainCommand(ApiCommand, Command):
    """What ``device drain|undrain`` and ``host drain|undrain`` share: the ``action``
    posted, the one positional argument (``argument``: its name, metavar and help), --wait
    on a drain (until nothing holds ``waits_for``), and the exit status a wait sets (1:
    undrained by someone else meanwhile)."""

    needs = "2.9"
    action: str
    argument: tuple[str, str, str]
    waits_for: str
    exit_code = 0

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        name, metavar, text = self.argument
        parser.add_argument(name, metavar=metavar, help=text)
        if self.action == "drain":
            add_wait_options(parser, f"nothing holds {self.waits_for} any more (drained)")
        return parser

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code


def describe_drain(name: str, held: int) -> str:
    if not held:
        return f"{name}: drained"
    return f"{name}: draining, {held} attach handle(s) still held"


DRAIN_COLUMNS = ("uuid", "hostname", "status", "maintenance", "holders")


class _DrainDevice(DrainCommand, ShowOne):
    ids = {"uuid": DEVICE}

    argument = ("uuid", "DEVICE", "The device's UUID.")
    waits_for = "the device"

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        path = f"/v2/devices/{segment(parsed_args.uuid)}"
        device = self.api.post(f"{path}/{self.action}", None)
        if getattr(parsed_args, "wait", False) and device["maintenance"] == "draining":

            def poll() -> dict[str, Any]:
                found: dict[str, Any] = self.api.get(path)
                return {name: found.get(name) for name in DRAIN_COLUMNS}

            device, stopped = wait_for(
                self,
                parsed_args,
                poll,
                lambda d: d["maintenance"] != "draining",
                lambda d: describe_drain(f"device {d['uuid']}", len(d["holders"] or ())),
                first=device,
            )
            if not stopped and device["maintenance"] != "drained":
                # Undrained (or enabled) by someone else meanwhile: it will not drain.
                self.app.stderr.write(
                    f"device {device['uuid']} is {device['status']} again: no longer draining\n"
                )
                self.exit_code = 1
        return DRAIN_COLUMNS, drain_cells(device, DRAIN_COLUMNS, parsed_args.formatter)


class DeviceDrain(_DrainDevice):
    """Drain a device for maintenance: nothing new goes on it (API 2.9, admin).

    The device becomes maintaining (reserved in Placement, refused by binds and claims,
    no longer offered to Kubernetes); what holds it keeps it. Shown: its maintenance,
    draining while held (the holders listed) and drained once nothing holds it.

    With --wait, wait until it is drained, showing how many attach handles are still
    held."""

    action = "drain"


class DeviceUndrain(_DrainDevice):
    """Undrain a device: it is enabled and offered again (API 2.9, admin)."""

    action = "undrain"


# -- health (API 2.9) --------------------------------------------------------------------------

HEALTH_COLUMNS = ("uuid", "hostname", "type", "state", "reason", "since", "offered", "held_by")
# One device's: when it is offered again (held back by its agent) and what holds it.
HEALTH_DETAIL_COLUMNS = ("offered_at", "holders")


def health_row(device: dict[str, Any]) -> dict[str, Any]:
    """A device body (or the health action's answer) as one row of health."""
    health = device.get("health") or {
        k: device.get(k) for k in ("state", "reason", "since", "offered", "held_by", "offered_at")
    }
    return {
        "uuid": device.get("uuid"),
        "hostname": device.get("hostname"),
        "type": device.get("type"),
        **health,
        "holders": device.get("holders") or [],
    }


class DeviceHealth(ApiCommand, Lister):
    """Show devices' health, and clear or hold one back (API 2.9).

    Without DEVICE: every device's health (--host: one host's). A device its agent
    reported unhealthy is held back (offered: False) from Placement, binds, claims and
    Kubernetes until it has been healthy for the server's [health] recover_after, or
    until an operator clears it (--clear, admin). --hold REASON holds a device back by
    hand until a clear (admin). doc/devices.md, "Health"."""

    needs = "2.9"

    ids = {"uuid": DEVICE}
    nothing = "No devices."

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEVICE", nargs="?", help="The device's UUID.")
        parser.add_argument("--host", metavar="HOSTNAME", help="Only the devices of this host.")
        action = parser.add_mutually_exclusive_group()
        action.add_argument(
            "--clear", action="store_true", help="Offer the device again now (admin)."
        )
        action.add_argument(
            "--hold",
            metavar="REASON",
            help="Hold the device back from every offer until a clear (admin).",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        acting = parsed_args.clear or parsed_args.hold is not None
        if acting and not parsed_args.uuid:
            raise CLIError("--clear and --hold act on one device: name it (DEVICE)")
        if parsed_args.uuid:
            path = f"/v2/devices/{segment(parsed_args.uuid)}"
            if parsed_args.clear:
                found = self.api.post(f"{path}/health", {"clear": True})
            elif parsed_args.hold is not None:
                found = self.api.post(f"{path}/health", {"hold": True, "reason": parsed_args.hold})
            else:
                found = self.api.get(path)
            names = HEALTH_COLUMNS + HEALTH_DETAIL_COLUMNS
            row = health_row(found)
            return names, [drain_cells(row, names, parsed_args.formatter)]
        params = {"hostname": parsed_args.host} if parsed_args.host else {}
        items = self.api.list("/v2/devices", "devices", params)
        return HEALTH_COLUMNS, [
            cells(health_row(item), HEALTH_COLUMNS, parsed_args.formatter) for item in items
        ]


# -- labels and deleting a lost device (API 2.10) ----------------------------------------------

LABEL_COLUMNS = ("uuid", "hostname", "labels", "outcome")


class _Labels(ApiCommand, Lister):
    """Set or remove labels on devices (API 2.10, admin)."""

    needs = "2.10"
    metavar: str
    text: str

    ids = {"uuids": DEVICE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuids", metavar="DEVICE", nargs="+", help="A device's UUID.")
        parser.add_argument(
            "--label",
            dest="labels",
            action="append",
            required=True,
            metavar=self.metavar,
            help=self.text,
        )
        return parser

    def body(self, labels: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        body = {"uuids": parsed_args.uuids, **self.body(parsed_args.labels)}
        devices = self.api.post("/v2/device_labels", body)["devices"]
        return LABEL_COLUMNS, [cells(d, LABEL_COLUMNS, parsed_args.formatter) for d in devices]


class DeviceSet(_Labels):
    """Set labels on devices (API 2.10, admin).

    All the devices or none: a label the rules refuse or a device that does not exist
    changes nothing. A device profile asks for them as accel:label:KEY=VALUE. Shown:
    each device's labels now, and whether they changed."""

    metavar = "KEY=VALUE"
    text = "A label to set (repeatable)."

    def body(self, labels: list[str]) -> dict[str, Any]:
        wanted: dict[str, str] = {}
        for label in labels:
            key, sep, value = label.partition("=")
            if not sep:
                raise CLIError(f"--label {label}: not KEY=VALUE")
            wanted[key] = value
        return {"set": wanted}


class DeviceUnset(_Labels):
    """Remove labels from devices (API 2.10, admin).

    A device without the label is left as it is."""

    metavar = "KEY"
    text = "The key of a label to remove (repeatable)."

    def body(self, labels: list[str]) -> dict[str, Any]:
        return {"unset": sorted(set(labels))}


DELETE_COLUMNS = ("uuid", "hostname", "type", "presence")


class DeviceDelete(ApiCommand, Lister):
    """Delete a lost device that nothing holds any more (API 2.10, admin).

    Only a lost device (gone from its host's report while held) is deleted by hand; its
    providers leave Placement. A device its host still reports, or one an accelerator
    request still holds, is refused (the holders named). Shows what was deleted."""

    needs = "2.10"

    ids = {"uuid": DEVICE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEVICE", help="The device's UUID.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        path = f"/v2/devices/{segment(parsed_args.uuid)}"
        device = self.api.get(path)
        self.api.delete(path)
        return DELETE_COLUMNS, [cells(device, DELETE_COLUMNS, parsed_args.formatter)]
