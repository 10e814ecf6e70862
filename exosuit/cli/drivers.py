"""``exosuit driver list|install|update|uninstall``: each host's driver plug-ins as
managed objects (``/v2/drivers``, API 2.7, doc/devices.md)."""

from __future__ import annotations

import argparse
from typing import Any

from cliff.lister import Lister

from exosuit.cli.base import ApiCommand, Filter, ListCommand, Listed, cells, segment
from exosuit.cli.waiting import add_wait_options, wait_for

__all__ = ["DriverInstall", "DriverList", "DriverUninstall", "DriverUpdate"]

COLUMNS = ("hostname", "generation", "observed")


class DriverList(ListCommand):
    """List each host's drivers: reported, asked, applied (API 2.7).

    What its agent reports (version, enabled, devices found, last error), what was asked
    (desired) and whether the agent applied it (observed). The row without a host is
    what was asked of every host."""

    needs = "2.7"
    path = "/v2/drivers"
    key = "drivers"
    nothing = "No drivers."
    columns = ("hostname", "name", "version", "enabled", "found", "error", "desired", "observed")
    long_columns = ("config_digest", "reported_at", "id")
    sort_keys = ("hostname", "name")
    filters = (
        Filter("--host", "hostname", "Only this host's drivers.", "HOSTNAME"),
        Filter("--name", "name", "Only this driver.", "NAME"),
    )


def _option(value: str) -> tuple[str, str]:
    """``KEY=VALUE``: one option as the API takes it (a string)."""
    key, sep, text = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"takes KEY=VALUE, not {value!r}")
    return key.strip(), text


class _DriverChange(ApiCommand, Lister):
    """Install, update or uninstall a driver on hosts."""

    needs = "2.7"
    action: str
    takes_config = True
    exit_code = 0

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="DRIVER", help="The driver's name (pci, nvme, …).")
        parser.add_argument(
            "--host",
            dest="hosts",
            action="append",
            metavar="HOSTNAME",
            help="A host (repeatable; default: every host, and those that report later).",
        )
        if self.takes_config:
            parser.add_argument(
                "--config",
                action="append",
                type=_option,
                metavar="KEY=VALUE",
                help="An option of the driver, overriding the agent's file (repeatable).",
            )
        add_wait_options(parser, "every host's agent has applied it")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        body: dict[str, Any] = {}
        if parsed_args.hosts:
            body["hostnames"] = parsed_args.hosts
        if self.takes_config and parsed_args.config is not None:
            body["config"] = dict(parsed_args.config)
        name = parsed_args.name
        answer = self.api.post(f"/v2/drivers/{segment(name)}/{self.action}", body)
        if answer["deactivated"]:
            self.app.stderr.write(
                f"{len(answer['deactivated'])} device(s) of {name} marked inactive: "
                + ", ".join(answer["deactivated"])
                + "\n"
            )
        hosts = [{**h, "observed": None} for h in answer["hosts"]]
        if parsed_args.wait:
            hosts = self._wait(parsed_args, name, hosts)
        return COLUMNS, [cells(h, COLUMNS, parsed_args.formatter) for h in hosts]

    def _wait(
        self, parsed_args: argparse.Namespace, name: str, hosts: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        asked = {h["hostname"] for h in hosts}

        def poll() -> list[dict[str, Any]]:
            rows = self.api.list("/v2/drivers", "drivers", {"name": name})
            observed = {r["hostname"]: r["observed"] for r in rows if r["hostname"] in asked}
            return [{**h, "observed": bool(observed.get(h["hostname"]))} for h in hosts]

        found: list[dict[str, Any]]
        found, _ = wait_for(
            self,
            parsed_args,
            poll,
            lambda rows: all(r["observed"] for r in rows),
            lambda rows: (
                f"driver {name} {self.action}: "
                f"{sum(bool(r['observed']) for r in rows)}/{len(rows)} hosts applied it"
            ),
        )
        return found

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code


class DriverInstall(_DriverChange):
    """Enable a driver on hosts (API 2.7, admin).

    With options overriding the agents' files; each agent loads it without a restart
    and reports back."""

    action = "install"


class DriverUpdate(_DriverChange):
    """Change a driver's options on hosts (API 2.7, admin)."""

    action = "update"


class DriverUninstall(_DriverChange):
    """Disable a driver on hosts (API 2.7, admin).

    Refused while one of its devices there is held by an accelerator request; its other
    devices become inactive at once."""

    action = "uninstall"
    takes_config = False
