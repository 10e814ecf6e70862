"""``exosuit discover-services``: ask hosts to discover their devices now and, with
``--wait``, wait until each host's new inventory arrived (``/v2/discoveries``, API 2.7,
doc/devices.md)."""

from __future__ import annotations

import argparse

from cliff.lister import Lister

from exosuit.cli.base import ApiCommand, Listed, cells, segment
from exosuit.cli.waiting import add_wait_options, wait_for

__all__ = ["DiscoverServices"]

COLUMNS = ("hostname", "generation", "received_at")


class DiscoverServices(ApiCommand, Lister):
    """Ask hosts to discover their devices now (API 2.7, admin).

    Each host's agent discovers after a random delay within the spread the API gives
    (hosts asked / [api] discovery_rate), then reports. With --wait, wait until every
    host's new inventory arrived (exit status 0), showing how many did."""

    needs = "2.7"
    exit_code = 0

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--host",
            dest="hosts",
            action="append",
            metavar="HOSTNAME",
            help="A host to ask (repeatable; default: every host).",
        )
        add_wait_options(parser, "every host asked has reported its new inventory")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        body = {} if not parsed_args.hosts else {"hostnames": parsed_args.hosts}
        discovery = self.api.post("/v2/discoveries", body)
        self.app.stderr.write(
            f"discovery {discovery['uuid']}: {discovery['host_count']} host(s) asked, "
            f"within {discovery['spread']:g} s\n"
        )
        if parsed_args.wait:
            path = f"/v2/discoveries/{segment(discovery['uuid'])}"
            discovery, _ = wait_for(
                self,
                parsed_args,
                lambda: self.api.get(path),
                lambda d: d["complete"],
                lambda d: (
                    f"discovery {d['uuid']}: {d['received']}/{d['host_count']} hosts reported"
                ),
                first=discovery,
            )
        rows = [cells(h, COLUMNS, parsed_args.formatter) for h in discovery["hosts"]]
        return COLUMNS, rows

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code
