"""``exosuit profile list|show|create|delete``: device profiles, the named request
groups accelerator requests are made from (``/v2/device_profiles``)."""

from __future__ import annotations

import argparse
import uuid as uuidlib
from typing import Any

from cliff.lister import Lister

from exosuit.cli.base import (
    PROFILE,
    ApiCommand,
    Filter,
    ListCommand,
    Listed,
    ShowCommand,
    cells,
    segment,
)
from exosuit.cli.client import ApiClient, ApiError

__all__ = ["ProfileCreate", "ProfileDelete", "ProfileList", "ProfileShow"]


def _is_uuid(value: str) -> bool:
    try:
        uuidlib.UUID(value)
    except ValueError:
        return False
    return True


def get_profile(api: ApiClient, ident: str) -> dict[str, Any]:
    """A profile by UUID, or by name (looked up in the list before API 2.2)."""
    if _is_uuid(ident) or api.supports("2.2"):
        profile: dict[str, Any] = api.get(f"/v2/device_profiles/{segment(ident)}")["device_profile"]
        return profile
    found = api.list("/v2/device_profiles", "device_profiles", {"name": ident})
    if not found:
        raise ApiError(404, f"Device profile {ident} could not be found.")
    return found[0]


class ProfileList(ListCommand):
    """List device profiles."""

    path = "/v2/device_profiles"
    key = "device_profiles"
    nothing = "No device profiles."
    columns = ("uuid", "name", "groups", "description")
    long_columns = ("created_at", "updated_at")
    sort_keys = ("created_at", "uuid", "name")
    filters = (
        Filter("--name", "name", "Only the profiles of these names (comma-separated).", "NAMES"),
    )


class ProfileShow(ShowCommand):
    """Show one device profile (by name or UUID), every field."""

    ids = {"profile": PROFILE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("profile", metavar="PROFILE", help="The profile's name or UUID.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return get_profile(self.api, parsed_args.profile)


def _group(value: str) -> dict[str, str]:
    """``resources:FPGA=1,trait:CUSTOM_X=required`` → one request group."""
    group: dict[str, str] = {}
    for part in value.split(","):
        key, sep, item = part.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{part!r} is not KEY=VALUE")
        group[key.strip()] = item.strip()
    return group


class ProfileCreate(ShowCommand):
    """Create a device profile from one or more request groups."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME", help="The new profile's name.")
        parser.add_argument(
            "--group",
            dest="groups",
            action="append",
            type=_group,
            required=True,
            metavar="KEY=VALUE[,KEY=VALUE…]",
            help="A request group, e.g. resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required "
            "(repeat for several groups).",
        )
        parser.add_argument("--description", metavar="TEXT", help="What the profile is for.")
        parser.add_argument("--uuid", metavar="UUID", help="The profile's UUID (default: new).")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        profile = {"name": parsed_args.name, "groups": parsed_args.groups}
        if parsed_args.description is not None:
            profile["description"] = parsed_args.description
        if parsed_args.uuid is not None:
            profile["uuid"] = parsed_args.uuid
        created: dict[str, Any] = self.api.post("/v2/device_profiles", [profile])
        return created


class ProfileDelete(ApiCommand, Lister):
    """Delete device profiles (by name or UUID).

    One request for all of them: all are deleted, or none if one is missing or in
    use. Shows what was deleted."""

    ids = {"profiles": PROFILE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "profiles", metavar="PROFILE", nargs="+", help="A profile's name or UUID."
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        profiles = {}
        for ident in parsed_args.profiles:
            profile = get_profile(self.api, ident)
            profiles[profile["uuid"]] = profile
        # One request for all: the API deletes every name given, or none.
        names = ",".join(p["name"] for p in profiles.values())
        self.api.delete("/v2/device_profiles", {"value": names})
        columns = ("uuid", "name")
        return columns, [cells(p, columns, parsed_args.formatter) for p in profiles.values()]
