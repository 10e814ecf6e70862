"""``exosuit claim create|list|show|renew|release``: standalone claims, devices Exosuit
binds itself for a container, a script or a DRA plugin (``/v2/claims``, API 2.8,
doc/standalone.md)."""

from __future__ import annotations

import argparse
from typing import Any

from cliff.lister import Lister

from exosuit.cli.base import (
    CLAIM,
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
from exosuit.cli.client import CLIError
from exosuit.cli.waiting import add_wait_options, wait_for

__all__ = ["ClaimCreate", "ClaimList", "ClaimRelease", "ClaimRenew", "ClaimShow"]

NEEDS = "2.8"
# --dry-run and --numa-node (doc/devices.md, "Why not here?").
NEEDS_DRY_RUN = "2.10"
STATES = "pending, bound, failed, released"


def _seconds(value: str) -> int:
    try:
        seconds = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if seconds < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return seconds


def settled(claim: dict[str, Any]) -> bool:
    """Whether a claim is where ``--wait`` waits for it: bound (and, for a container, its
    CDI spec written or failed), failed or released."""
    if claim["state"] != "bound":
        return bool(claim["state"] != "pending")
    return not claim["container"] or claim["cdi"]["state"] in ("written", "failed")


def describe(claim: dict[str, Any]) -> str:
    text = f"claim {claim['uuid']}: {claim['state']}"
    if claim["container"] and claim["state"] == "bound":
        text += f", CDI spec {claim['cdi']['state'] or 'pending'}"
    return text


def succeeded(claim: dict[str, Any]) -> bool:
    return bool(claim["state"] == "bound" and claim["cdi"]["state"] != "failed")


def shown(claim: dict[str, Any], formatter: str) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Every field; in a table, each device on a line of its own: its CDI name (or attach
    handle), its attach type and info."""
    if formatter == "table":
        lines = []
        for d in claim["devices"]:
            info = ", ".join(f"{k}={v}" for k, v in (d["attach_handle_info"] or {}).items())
            name = d["cdi_device"] or d["attach_handle_uuid"] or d["arq_uuid"]
            lines.append(f"{name} {d['attach_handle_type'] or ''} {info}".strip())
        claim = {**claim, "devices": "\n".join(lines)}
    return show_item(claim, formatter)


def waited(command: Any, parsed_args: argparse.Namespace, claim: dict[str, Any]) -> dict[str, Any]:
    """``claim`` as it settled with ``--wait`` (as it is without), the command's
    ``exit_code`` 1 when it settled without succeeding (claim create, server attach)."""
    if not parsed_args.wait:
        return claim
    path = f"/v2/claims/{segment(claim['uuid'])}"
    claim, stopped = wait_for(
        command, parsed_args, lambda: command.api.get(path), settled, describe, first=claim
    )
    if not stopped and not succeeded(claim):
        command.exit_code = 1
    return claim


def _non_negative(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a NUMA node number: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


def considered(answer: dict[str, Any]) -> str:
    """A dry run's verdicts as lines of a table: host, device (``-``: the host itself),
    group, verdict, reason; each host's line first, then its devices'."""
    rows = [("HOST", "DEVICE", "GROUP", "VERDICT", "REASON")]
    for host in answer["hosts"]:
        rows.append((host["hostname"], "-", "", host["verdict"], host["reason"]))
        for d in host["devices"]:
            group = "" if d["group"] is None else str(d["group"])
            rows.append(("", d["device_uuid"], group, d["verdict"], d["reason"]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(r[:4], widths, strict=True))
        + "  "
        + r[4]
        for r in rows
    )


def dry_run_shown(
    answer: dict[str, Any], formatter: str
) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """A dry run: where the claim would be made (or why not), the devices it would
    take and, in a table, every host and device considered with its verdict."""
    if formatter == "table":
        taken = "\n".join(f"group {d['group']}: {d['device_uuid']}" for d in answer["devices"])
        answer = {**answer, "devices": taken, "hosts": considered(answer)}
    return show_item(answer, formatter)


class ClaimCreate(ShowCommand):
    """Claim devices: Exosuit picks and binds them on one host (API 2.8).

    Either the devices of a device profile (--profile: its resource classes, traits
    and accel: keys, every group on one host, all or nothing) or exactly the attach
    handles named (--handle). The answer gives each device's attach info (and, with
    --container, its CDI device name for `podman run --device`).

    With --wait, wait until the claim is bound (its device programmed, when its profile
    asks for an image; its CDI spec written by the host's agent, with --container):
    exit status 0, or 1 when it failed.

    With --dry-run (API 2.10), nothing is claimed: it shows where the claim would be
    made and, for every host and device considered, why it was passed over (not
    reporting, drained, unhealthy, inactive, wrong resource class, missing trait,
    NUMA node, label, topology, held and by whom) or that it would be chosen; exit
    status 0 when the claim would be made, 1 when it would be refused."""

    needs = NEEDS
    exit_code = 0

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--profile", metavar="PROFILE", help="The device profile's name.")
        what.add_argument(
            "--handle",
            dest="handles",
            action="append",
            metavar="UUID",
            help="An attach handle to claim (repeatable; all on one host).",
        )
        parser.add_argument("--host", metavar="HOSTNAME", help="Claim on this host only.")
        parser.add_argument(
            "--consumer",
            metavar="TEXT",
            help="Who holds it (free text): claiming again for the same consumer gives its "
            "live claim back.",
        )
        parser.add_argument(
            "--expires-in",
            type=_seconds,
            metavar="SECONDS",
            help="Release it after SECONDS unless renewed (default: never).",
        )
        parser.add_argument(
            "--container",
            action="store_true",
            help="For a container: the host's agent writes its CDI spec.",
        )
        parser.add_argument(
            "--numa-node",
            type=_non_negative,
            metavar="N",
            help="Every device on NUMA node N (with --profile; API 2.10).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Claim nothing: show which devices would be taken and why every other "
            "host and device would be passed over (with --profile; API 2.10).",
        )
        add_wait_options(
            parser, "the claim is bound (and its CDI spec written, with --container) or failed"
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        if parsed_args.dry_run and parsed_args.wait:
            raise CLIError("--dry-run claims nothing, so there is nothing to --wait for")
        if parsed_args.dry_run or parsed_args.numa_node is not None:
            self.app.api.require(NEEDS_DRY_RUN, "--dry-run and --numa-node")
        body: dict[str, Any] = {"container": parsed_args.container}
        if parsed_args.profile is not None:
            body["device_profile_name"] = parsed_args.profile
        else:
            body["attach_handles"] = parsed_args.handles
        for field, value in (
            ("hostname", parsed_args.host),
            ("consumer", parsed_args.consumer),
            ("expires_in", parsed_args.expires_in),
            ("numa_node", parsed_args.numa_node),
        ):
            if value is not None:
                body[field] = value
        if parsed_args.dry_run:
            answer = self.api.post("/v2/claims", {**body, "dry_run": True})
            self.exit_code = 0 if answer["hostname"] is not None else 1
            return dry_run_shown(answer, parsed_args.formatter)
        claim = self.api.post("/v2/claims", body)
        return shown(waited(self, parsed_args, claim), parsed_args.formatter)

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code


class ClaimList(ListCommand):
    """List claims: your project's, or every project's for an admin (API 2.8)."""

    needs = NEEDS
    path = "/v2/claims"
    key = "claims"
    nothing = "No claims."
    columns = ("uuid", "state", "hostname", "consumer", "device_profile_name", "expires_at")
    long_columns = (
        "project_id",
        "user_id",
        "container",
        "cdi",
        "devices",
        "reason",
        "created_at",
        "released_at",
    )
    sort_keys = ("created_at", "uuid", "hostname")
    filters = (
        Filter("--host", "hostname", "Only the claims on this host.", "HOSTNAME"),
        Filter("--state", "state", f"Only these states (comma-separated: {STATES}).", "STATES"),
        Filter("--consumer", "consumer", "Only this consumer's claims.", "TEXT"),
        Filter("--project", "project", "Only this project's claims (an admin).", "PROJECT_ID"),
    )


class _OneClaim(ShowCommand):
    needs = NEEDS

    ids = {"uuid": CLAIM}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="CLAIM", help="The claim's UUID.")
        return parser


class ClaimShow(_OneClaim):
    """Show one claim, every field: its devices' attach info and CDI names."""

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.api.get(f"/v2/claims/{segment(parsed_args.uuid)}")

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        return shown(self.item(parsed_args), parsed_args.formatter)


class ClaimRenew(_OneClaim):
    """Move a claim's expiry: it is released SECONDS from now unless renewed again."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--expires-in", type=_seconds, required=True, metavar="SECONDS", help="From now."
        )
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        body = {"expires_in": parsed_args.expires_in}
        claim: dict[str, Any] = self.api.post(f"/v2/claims/{segment(parsed_args.uuid)}/renew", body)
        return claim

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        return shown(self.item(parsed_args), parsed_args.formatter)


class ClaimRelease(ApiCommand, Lister):
    """Release claims: their devices are freed at once (idempotent).

    A claim released already is released again without error. Shows each claim as it
    is now."""

    needs = NEEDS

    ids = {"uuids": CLAIM}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuids", metavar="CLAIM", nargs="+", help="A claim's UUID.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        columns = ("uuid", "state", "released_at")
        rows = []
        for uuid in dict.fromkeys(u.lower() for u in parsed_args.uuids):
            path = f"/v2/claims/{segment(uuid)}"
            self.api.delete(path)
            rows.append(cells(self.api.get(path), columns, parsed_args.formatter))
        return columns, rows
