"""``exosuit deployable list|show|program|program-status``: what Placement sees as one
resource provider each (``/v2/deployables``), and loading an image onto one (API 2.6,
doc/programming.md)."""

from __future__ import annotations

import argparse
from typing import Any

from exosuit.cli.base import DEPLOYABLE, IMAGE, ListCommand, ShowCommand, segment
from exosuit.cli.client import CLIError
from exosuit.cli.images import get_image
from exosuit.cli.progress import Progress, WaitTimeout, colour, wait

__all__ = ["DeployableList", "DeployableProgram", "DeployableProgramStatus", "DeployableShow"]

PROGRAMS = "2.6"
ENDED = ("done", "failed")
_STATE_COLOURS = {"done": "32", "failed": "31"}


class DeployableList(ListCommand):
    """List deployables: the units of a device that Placement sees as one provider."""

    path = "/v2/deployables"
    key = "deployables"
    nothing = "No deployables."
    columns = ("uuid", "name", "num_accelerators", "driver_name", "rp_uuid")
    long_columns = (
        "device_id",
        "parent_id",
        "root_id",
        "bitstream_id",
        "attributes_list",
        "created_at",
        "updated_at",
    )
    sort_keys = ("created_at", "uuid", "name")


class DeployableShow(ShowCommand):
    """Show one deployable, every field."""

    ids = {"uuid": DEPLOYABLE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEPLOYABLE", help="The deployable's UUID.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.api.get(f"/v2/deployables/{segment(parsed_args.uuid)}")


def _program_path(deployable: str) -> str:
    return f"/v2/deployables/{segment(deployable)}/program"


class DeployableProgramStatus(ShowCommand):
    """Show the latest program of a deployable (API 2.6).

    Its state (pending, fetching, programming, verifying, done, failed), and why it
    failed: the reason, and whether the previous image was loaded again."""

    needs = PROGRAMS

    ids = {"uuid": DEPLOYABLE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEPLOYABLE", help="The deployable's UUID.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.api.get(_program_path(parsed_args.uuid))


class DeployableProgram(ShowCommand):
    """Load an image onto a whole deployable (API 2.6, admin).

    The host's agent loads it (an FPGA's bitstream), verifies it, and restores the
    previous image if it fails. Refused while an attach handle of its device is held
    (drain it first), while another image is being loaded, or when its driver cannot
    load the image's format.
    With --wait, wait until the program ends, showing its state: exit status 0 when
    the image is loaded, 1 when it failed. Ctrl-C stops the waiting, not the program."""

    needs = PROGRAMS
    exit_code = 0

    ids = {"uuid": DEPLOYABLE, "image": IMAGE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("uuid", metavar="DEPLOYABLE", help="The deployable's UUID.")
        parser.add_argument("image", metavar="IMAGE", help="The image's UUID or name.")
        parser.add_argument(
            "--wait",
            action="store_true",
            help="Wait until the program is done or failed, showing its state.",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            metavar="SECONDS",
            help="With --wait: give up waiting after SECONDS (the program goes on).",
        )
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        image = get_image(self.api, parsed_args.image)
        body = [{"path": "/program", "op": "replace", "value": [{"image_uuid": image["uuid"]}]}]
        program: dict[str, Any] = self.api.patch(_program_path(parsed_args.uuid), body)["program"]
        if parsed_args.wait:
            program = self._wait(parsed_args, program)
        return program

    def _wait(self, parsed_args: argparse.Namespace, program: dict[str, Any]) -> dict[str, Any]:
        stderr = self.app.stderr
        latest = [program]

        def poll() -> dict[str, Any]:
            latest[0] = self.api.get(_program_path(parsed_args.uuid))
            return latest[0]

        def describe(p: dict[str, Any]) -> str:
            state = colour(p["state"], _STATE_COLOURS.get(p["state"], "33"), stderr)
            return f"program {p['uuid']} of image {p['image_uuid']}: {state}"

        try:
            program = wait(
                poll,
                lambda p: p["uuid"] != program["uuid"] or p["state"] in ENDED,
                describe,
                Progress(stderr),
                timeout=parsed_args.timeout,
                first=program,
            )
        except WaitTimeout as timeout:
            raise CLIError(
                f"gave up waiting after {parsed_args.timeout:g} s: program {program['uuid']} "
                f"is still {timeout.last['state']} (it goes on; see `exosuit deployable "
                f"program-status {parsed_args.uuid}`)"
            ) from None
        except KeyboardInterrupt:
            # Only the waiting stops: the program is the host's desired state.
            stderr.write(
                f"stopped waiting: program {program['uuid']} goes on on its host "
                f"(`exosuit deployable program-status {parsed_args.uuid}`)\n"
            )
            self.exit_code = 130
            return latest[0]
        if program["state"] == "failed":
            self.app.LOG.error(f"program {program['uuid']} failed: {program.get('reason')}")
            self.exit_code = 1
        return program

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code
