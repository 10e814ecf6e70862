"""``exosuit server attach|detach``: a device profile's devices for a server, as the
claim whose consumer is the server (``/v2/servers/{server}/attach``, API 2.10,
doc/standalone.md "Servers"); refused for a server Nova manages (doc/nova.md)."""

from __future__ import annotations

import argparse
from typing import Any

from cliff.lister import Lister

from exosuit.cli.base import ApiCommand, Listed, ShowCommand, Shown, cells, segment
from exosuit.cli.claims import shown, waited
from exosuit.cli.waiting import add_wait_options

__all__ = ["ServerAttach", "ServerDetach"]

NEEDS = "2.10"


def _server(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "server",
        metavar="SERVER",
        help="The server's id: a Nova server's UUID, or any consumer id (at most 255 characters).",
    )


class ServerAttach(ShowCommand):
    """Attach a device profile's devices to a server (API 2.10).

    The attachment is a claim whose consumer is the server: attaching again gives it
    back, and a server holds one (detach first to change its profile). A server Nova
    manages is refused (409): Nova changes no server's accelerators; boot a new one
    with a flavor whose accel:device_profile names the profile.

    With --wait, wait until the claim is bound (its device programmed, when its profile
    asks for an image): exit status 0, or 1 when it failed."""

    needs = NEEDS
    exit_code = 0

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        _server(parser)
        parser.add_argument(
            "--profile", required=True, metavar="PROFILE", help="The device profile's name."
        )
        parser.add_argument(
            "--host", metavar="HOSTNAME", help="The server's host: its devices from there."
        )
        add_wait_options(parser, "the claim is bound or failed")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        body: dict[str, Any] = {"device_profile_name": parsed_args.profile}
        if parsed_args.host is not None:
            body["hostname"] = parsed_args.host
        claim = self.api.post(f"/v2/servers/{segment(parsed_args.server)}/attach", body)
        return shown(waited(self, parsed_args, claim), parsed_args.formatter)

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code


class ServerDetach(ApiCommand, Lister):
    """Detach a server's devices: its claims released, their devices freed (API 2.10).

    Every claim of the server, or with --profile that profile's only. A server with
    nothing attached is an error (404), as is a server Nova manages (409)."""

    needs = NEEDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        _server(parser)
        parser.add_argument(
            "--profile", metavar="PROFILE", help="Only the claims of this device profile."
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        body = {} if parsed_args.profile is None else {"device_profile_name": parsed_args.profile}
        answer = self.api.post(f"/v2/servers/{segment(parsed_args.server)}/detach", body)
        columns = ("uuid", "state", "device_profile_name", "hostname", "released_at")
        return columns, [cells(c, columns, parsed_args.formatter) for c in answer["claims"]]
