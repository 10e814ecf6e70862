"""``exosuit arq list|show|create|bind|unbind|delete``: accelerator requests, what a
workload holds (``/v2/accelerator_requests``)."""

from __future__ import annotations

import argparse
from typing import Any

from cliff.lister import Lister
from cliff.show import ShowOne

from exosuit.cli.base import (
    ARQ,
    DEPLOYABLE,
    ApiCommand,
    Filter,
    ListCommand,
    Listed,
    ShowCommand,
    Shown,
    cells,
    segment,
    show_item,
)
from exosuit.cli.waiting import add_wait_options, wait_for

__all__ = ["ArqBind", "ArqCreate", "ArqDelete", "ArqList", "ArqShow", "ArqUnbind"]

STATES = "Initial, BindStarted, Bound, BindFailed, Unbound, Deleting"


class ArqList(ListCommand):
    """List accelerator requests (ARQs): yours, or every project's for an admin."""

    path = "/v2/accelerator_requests"
    key = "arqs"
    nothing = "No accelerator requests."
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

    ids = {"uuid": ARQ}

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

    ids = {"uuids": ARQ}

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


# -- create, bind and unbind (what Nova does, by hand) ------------------------------------------

# Where a bind ends (BindStarted: its host's agent is still preparing the device).
_BIND_ENDED = ("Bound", "BindFailed")


class ArqCreate(ApiCommand, Lister):
    """Create accelerator requests from a device profile: one per unit of each group.

    They are Initial until bound (`exosuit arq bind`), as Nova creates them when it
    schedules a server."""

    nothing = "No accelerator requests."

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("profile", metavar="PROFILE", help="The device profile's name.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        body = {"device_profile_name": parsed_args.profile}
        arqs = self.api.post("/v2/accelerator_requests", body)["arqs"]
        names = ArqList.columns
        return names, [cells(a, names, parsed_args.formatter) for a in arqs]


class ArqBind(ApiCommand, ShowOne):
    """Bind an accelerator request to a device for an instance (as Nova does).

    The device is a deployable's resource provider: --deployable names the deployable
    (its provider looked up), --device-rp the provider itself. Refused (the API's
    reason shown) when the device is held, drained, unhealthy or not ready. A bind that
    needs work on the host is BindStarted until its agent is done: --wait waits until
    it is Bound or BindFailed (exit status 1 for BindFailed). Needs a service token
    under Keystone (Nova's)."""

    ids = {"uuid": ARQ, "deployable": DEPLOYABLE}
    exit_code = 0

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="ARQ", help="The accelerator request's UUID.")
        parser.add_argument("--host", required=True, metavar="HOSTNAME", help="Its host.")
        device = parser.add_mutually_exclusive_group(required=True)
        device.add_argument("--deployable", metavar="DEPLOYABLE", help="The deployable's UUID.")
        device.add_argument(
            "--device-rp", metavar="RP_UUID", help="The device's resource provider UUID."
        )
        parser.add_argument(
            "--instance",
            required=True,
            metavar="UUID",
            help="The instance (server) the request is bound for.",
        )
        add_wait_options(parser, "the bind is Bound or BindFailed")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        provider = parsed_args.device_rp
        if parsed_args.deployable:
            deployable = self.api.get(f"/v2/deployables/{segment(parsed_args.deployable)}")
            provider = deployable["rp_uuid"]
        fields = {"hostname": parsed_args.host, "device_rp_uuid": provider}
        fields["instance_uuid"] = parsed_args.instance
        ops = [{"op": "add", "path": f"/{k}", "value": v} for k, v in fields.items()]
        self.api.patch("/v2/accelerator_requests", {parsed_args.uuid: ops})
        path = f"/v2/accelerator_requests/{segment(parsed_args.uuid)}"
        arq: dict[str, Any] = self.api.get(path)
        if parsed_args.wait and arq["state"] not in _BIND_ENDED:
            arq, stopped = wait_for(
                self,
                parsed_args,
                lambda: self.api.get(path),
                lambda a: a["state"] in _BIND_ENDED,
                lambda a: f"ARQ {a['uuid']}: {a['state']}",
                first=arq,
            )
        if arq["state"] == "BindFailed":
            self.exit_code = 1
        return show_item(arq, parsed_args.formatter)

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code


class ArqUnbind(ApiCommand, Lister):
    """Unbind accelerator requests: their attach handles are released.

    The requests are Unbound and may be bound again."""

    ids = {"uuids": ARQ}
    nothing = "No accelerator requests."

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "uuids", metavar="ARQ", nargs="+", help="An accelerator request's UUID."
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        uuids = list(dict.fromkeys(u.lower() for u in parsed_args.uuids))
        ops = [{"op": "remove", "path": f"/{f}"} for f in _BIND_FIELDS]
        self.api.patch("/v2/accelerator_requests", {u: ops for u in uuids})
        names = ("uuid", "state", "hostname", "instance_uuid")
        arqs = [self.api.get(f"/v2/accelerator_requests/{segment(u)}") for u in uuids]
        return names, [cells(a, names, parsed_args.formatter) for a in arqs]


_BIND_FIELDS = ("hostname", "device_rp_uuid", "instance_uuid")
