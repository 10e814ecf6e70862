"""``exosuit host list|show``: every host that reports inventory (``/v2/hosts``, API 2.5);
``exosuit host drain|undrain``: a whole host out of service for maintenance and back
(API 2.9, doc/devices.md)."""

from __future__ import annotations

import argparse
from typing import Any

from cliff.lister import Lister

from exosuit.cli.base import ListCommand, Listed, ShowCommand, segment
from exosuit.cli.devices import DrainCommand, describe_drain, drain_cells
from exosuit.cli.waiting import wait_for

__all__ = ["HostDrain", "HostList", "HostShow", "HostUndrain"]


class HostList(ListCommand):
    """List hosts: their agents' last report, devices and attach handles (API 2.5)."""

    needs = "2.5"
    path = "/v2/hosts"
    key = "hosts"
    nothing = "No hosts."
    columns = (
        "hostname",
        "last_report_at",
        "report_age_seconds",
        "devices",
        "deployables",
        "attach_handles",
    )
    long_columns = (
        "agent_version",
        "snapshot_hash",
        "driver_errors",
        "placement",
        "drained_at",
        "maintenance",
        # 2.11: the desired state's generation and the one its agent last applied.
        "desired_generation",
        "observed_generation",
        "observed_at",
        "created_at",
        "updated_at",
    )
    sort_keys = ("hostname", "last_report_at", "created_at")


class HostShow(ShowCommand):
    """Show one host, every field (API 2.5).

    A drained host shows its maintenance and what still holds its devices (API 2.9)."""

    needs = "2.5"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("hostname", metavar="HOSTNAME", help="The host's name.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.api.get(f"/v2/hosts/{segment(parsed_args.hostname)}")


HOST_DRAIN_COLUMNS = ("uuid", "status", "status_reason", "maintenance", "holders")


class _DrainHost(DrainCommand, Lister):
    argument = ("hostname", "HOSTNAME", "The host's name.")
    waits_for = "a device of the host"

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        path = f"/v2/hosts/{segment(parsed_args.hostname)}"
        host = self.api.post(f"{path}/{self.action}", None)
        if getattr(parsed_args, "wait", False) and host["maintenance"] == "draining":
            host = self._wait(parsed_args, path, host)
        state = host["maintenance"] or "not drained"
        self.app.stderr.write(f"host {host['hostname']}: {state}\n")
        rows = [drain_cells(d, HOST_DRAIN_COLUMNS, parsed_args.formatter) for d in host["devices"]]
        return HOST_DRAIN_COLUMNS, rows

    def _wait(
        self, parsed_args: argparse.Namespace, path: str, host: dict[str, Any]
    ) -> dict[str, Any]:
        def poll() -> dict[str, Any]:
            found = self.api.get(path)
            held: dict[str, list[dict[str, Any]]] = {}
            for holder in found.get("holders") or ():
                held.setdefault(holder["device_uuid"], []).append(holder)
            devices = []
            for device in host["devices"]:
                mine = held.get(device["uuid"], [])
                maintenance = device["maintenance"] and ("draining" if mine else "drained")
                devices.append({**device, "holders": mine, "maintenance": maintenance})
            return {**host, "maintenance": found["maintenance"], "devices": devices}

        def held(h: dict[str, Any]) -> int:
            return sum(len(d["holders"]) for d in h["devices"])

        found: dict[str, Any]
        found, stopped = wait_for(
            self,
            parsed_args,
            poll,
            lambda h: h["maintenance"] != "draining",
            lambda h: describe_drain(f"host {h['hostname']}", held(h)),
            first=host,
        )
        if not stopped and found["maintenance"] != "drained":
            self.app.stderr.write(f"host {found['hostname']} was undrained meanwhile\n")
            self.exit_code = 1
        return found


class HostDrain(_DrainHost):
    """Drain a host for maintenance: no new work on its devices (API 2.9, admin).

    Every device of the host becomes maintaining (reserved in Placement, refused by
    binds and claims, no longer offered to Kubernetes), and so does any device it
    reports later; what holds them keeps them. Shown: each device, draining while held
    (its holders listed) or drained; the host is drained once none is held.

    With --wait, wait until the host is drained, showing how many attach handles are
    still held."""

    action = "drain"


class HostUndrain(_DrainHost):
    """Undrain a host: its devices are enabled and offered again (API 2.9, admin).

    Devices that Exosuit disabled itself (a status reason shown) stay maintaining until
    an operator undrains each of them."""

    action = "undrain"
