"""``exosuit arq list|show|delete``: accelerator requests, what a workload holds
(``/v2/accelerator_requests``)."""

from __future__ import annotations

import argparse
from typing import Any

from cliff.lister import Lister

from exosuit.cli.base import ApiCommand, Filter, ListCommand, Listed, ShowCommand, cells, segment

__all__ = ["ArqDelete", "ArqList", "ArqShow"]

STATES = "Initial, BindStarted, Bound, BindFailed, Unbound, Deleting"


class ArqList(ListCommand):
    """List accelerator requests (ARQs): yours, or every project's for an admin."""

    path = "/v2/accelerator_requests"
    key = "arqs"
    columns = (
        "uuid",
        "state",
        "device_profile_name",
        "hostname",
        "instance_uuid",
        "attach_handle_type",
    )
    long_columns = (
        "device_profile_group_id",
        "device_rp_uuid",
        "project_id",
        "attach_handle_uuid",
        "attach_handle_info",
        "claim_uuid",
        "created_at",
        "updated_at",
    )
    sort_keys = ("created_at", "uuid", "state", "hostname", "instance_uuid", "device_profile_name")
    filters = (
        Filter(
            "--state",
            "state",
            f"Only ARQs in these states (comma-separated: {STATES}; API 2.4).",
            "STATES",
            needs="2.4",
        ),
        Filter("--host", "hostname", "Only ARQs bound on this host (API 2.4).", "HOSTNAME", "2.4"),
        Filter(
            "--profile",
            "device_profile_name",
            "Only ARQs made from this device profile (API 2.4).",
            "NAME",
            needs="2.4",
        ),
        Filter("--instance", "instance", "Only the ARQs of this instance.", "UUID"),
        Filter(
            "--project",
            "project_id",
            "Only the ARQs of this project (filtered by this client: the API has no "
            "project filter; an admin sees every project).",
            "PROJECT_ID",
            local=True,
        ),
    )


class ArqShow(ShowCommand):
    """Show one accelerator request, every field."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="ARQ", help="The accelerator request's UUID.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.api.get(f"/v2/accelerator_requests/{segment(parsed_args.uuid)}")


class ArqDelete(ApiCommand, Lister):
    """Delete accelerator requests, releasing their attach handles.

    One request for all of them: a missing one is an error, the others are still
    deleted. Shows what was deleted."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "uuids", metavar="ARQ", nargs="+", help="An accelerator request's UUID."
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        uuids = list(dict.fromkeys(u.lower() for u in parsed_args.uuids))
        self.api.delete("/v2/accelerator_requests", {"arqs": ",".join(uuids)})
        return ("uuid",), [cells({"uuid": u}, ("uuid",), parsed_args.formatter) for u in uuids]
