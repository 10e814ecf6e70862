"""``exosuit partition show|set``: a device's partition layout (API 2.9, doc/devices.md
"Partitions")."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from cliff.show import ShowOne

from exosuit.cli.base import DEVICE, ApiCommand, Shown, cells, segment
from exosuit.cli.waiting import add_wait_options, wait_for

__all__ = ["PartitionSet", "PartitionShow", "layout_from", "slices_text"]

COLUMNS = ("device_uuid", "hostname", "layout", "state", "reason", "generation", "slices")


def slices_text(slices: list[dict[str, Any]]) -> list[str]:
    """The slices, for a person: one line per type, with how many are in use."""
    count = Counter(s["type"] for s in slices)
    used = Counter(s["type"] for s in slices if s["in_use"])
    return [f"{t}: {n} ({used[t]} in use)" for t, n in sorted(count.items())]


def _pair(value: str) -> tuple[str, int]:
    name, sep, count = value.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"not TYPE=COUNT: {value!r}")
    try:
        number = int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {count!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"a count is 0 or more, not {number}")
    return name, number


def layout_from(parsed_args: argparse.Namespace) -> dict[str, Any]:
    """The layout the options ask (argparse keeps --mdev, --mig and --vfs exclusive)."""
    layout: dict[str, Any]
    if parsed_args.vfs is not None:
        layout = {"vfs": parsed_args.vfs}
    else:
        kind = "mdev" if parsed_args.mdev else "mig"
        layout = {kind: dict(parsed_args.mdev or parsed_args.mig)}
    if parsed_args.on_demand:
        layout["on_demand"] = True
    return layout


def _shown(found: dict[str, Any], formatter: str) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    if formatter not in ("json", "yaml"):
        found = {**found, "slices": slices_text(found["slices"])}
    return COLUMNS, cells(found, COLUMNS, formatter)


class PartitionShow(ApiCommand, ShowOne):
    """Show a device's partition layout, its state and its slices (API 2.9).

    The slices are the device's attach handles as its host last reported them, by type
    (an mdev type, a MIG profile, vf, or whole for the device's own function)."""

    needs = "2.9"

    ids = {"uuid": DEVICE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEVICE", help="The device's UUID.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        found = self.api.get(f"/v2/devices/{segment(parsed_args.uuid)}/partitions")
        return _shown(found, parsed_args.formatter)


class PartitionSet(ApiCommand, ShowOne):
    """Set a device's partition layout; its agent applies it (API 2.9, admin).

    One kind: --mdev TYPE=COUNT (vGPU mdevs), --mig PROFILE=COUNT (MIG instances), or
    --vfs COUNT (SR-IOV VFs). Refused (409) when it would remove a slice in use.

    With --wait, wait for the agent's outcome: exit status 0 when applied, 1 when it
    failed (its reason shown)."""

    needs = "2.9"
    exit_code = 0

    ids = {"uuid": DEVICE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEVICE", help="The device's UUID.")
        kind = parser.add_mutually_exclusive_group(required=True)
        kind.add_argument(
            "--mdev",
            metavar="TYPE=COUNT",
            type=_pair,
            action="append",
            help="vGPU mdevs of an mdev type (repeat for several types).",
        )
        kind.add_argument(
            "--mig",
            metavar="PROFILE=COUNT",
            type=_pair,
            action="append",
            help="MIG instances of a profile (repeat for several profiles).",
        )
        kind.add_argument("--vfs", metavar="COUNT", type=int, help="SR-IOV VFs.")
        parser.add_argument(
            "--on-demand",
            action="store_true",
            help="Make the slices on demand: each made for the bind that takes it, removed "
            "at its release (mdev; not VFs).",
        )
        add_wait_options(parser, "its agent applied the layout (or failed)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Shown:
        path = f"/v2/devices/{segment(parsed_args.uuid)}/partitions"
        found: dict[str, Any] = self.api.put(path, layout_from(parsed_args))
        if parsed_args.wait and found["state"] == "applying":
            found, stopped = wait_for(
                self,
                parsed_args,
                lambda: self.api.get(path),
                lambda f: f["state"] != "applying",
                lambda f: f"device {f['device_uuid']}: {f['state']}",
                first=found,
            )
            if not stopped and found["state"] == "failed":
                self.app.stderr.write(
                    f"device {found['device_uuid']}: the layout failed: {found['reason']}\n"
                )
                self.exit_code = 1
        return _shown(found, parsed_args.formatter)

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code
