"""``exosuit permission list``: which of the API's policy rules the caller passes
(``/v2/permissions``, API 2.11, doc/dashboard.md "Roles")."""

from __future__ import annotations

import argparse

from cliff.lister import Lister

from exosuit.cli.base import ApiCommand, Listed, cells

__all__ = ["PermissionList"]

_ANSWERS = {"true": True, "false": False}


class PermissionList(ApiCommand, Lister):
    """List the API's policy rules and whether you pass each (API 2.11).

    Judged by the API for your token, for objects of your own project (a rule owned per
    project, such as releasing a claim, says what you may do to your project's). The
    dashboard draws a button only for a rule you pass; the API still decides each call."""

    needs = "2.11"
    nothing = "No rules."
    columns = ("rule", "allowed")

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--allowed",
            choices=sorted(_ANSWERS),
            help="Only the rules you pass (true) or those you do not (false).",
        )
        parser.add_argument(
            "--rule",
            metavar="TEXT",
            help="Only the rules whose name holds TEXT (device, exosuit:claim:, …).",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        answer = self.api.get("/v2/permissions")
        rows = [
            {"rule": rule, "allowed": allowed}
            for rule, allowed in sorted(answer["permissions"].items())
            if (parsed_args.allowed is None or allowed is _ANSWERS[parsed_args.allowed])
            and (parsed_args.rule is None or parsed_args.rule in rule)
        ]
        return self.columns, [cells(row, self.columns, parsed_args.formatter) for row in rows]
