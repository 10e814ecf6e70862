"""``exosuit audit list|show``: the audit trail (``/v2/audit_events``, API 2.9, admins):
who changed which device, deployable, profile, ARQ, claim, driver or image, and when
(doc/audit.md)."""

from __future__ import annotations

import argparse
from typing import Any

from exosuit.cli.base import Filter, ListCommand, ShowCommand, segment

__all__ = ["AuditList", "AuditShow"]


class AuditList(ListCommand):
    """List the audit trail's records, newest first (API 2.9, admin).

    Every record matching the filters comes, fetched page by page; --limit N stops
    after N. doc/audit.md says what is recorded."""

    needs = "2.9"
    path = "/v2/audit_events"
    key = "audit_events"
    nothing = "No audit events."
    columns = ("id", "time", "actor", "action", "object_type", "object_uuid", "host")
    long_columns = ("user_id", "project_id", "request_id", "before", "after")
    sort_keys = ("id", "created_at")
    filters = (
        Filter(
            "--object-type",
            "object_type",
            "Only records of this object type (device, deployable, device_profile, arq, "
            "claim, driver, image, host).",
            "TYPE",
        ),
        Filter(
            "--object",
            "object_uuid",
            "Only records of this object (its uuid; a driver's or host's name).",
            "UUID",
        ),
        Filter("--host", "host", "Only records of objects on this host.", "HOSTNAME"),
        Filter(
            "--actor",
            "actor",
            "Only records of this actor (user:<id>, service:<id>, host:<name>, conductor, system).",
            "ACTOR",
        ),
        Filter("--user", "user_id", "Only records of this user's requests.", "USER_ID"),
        Filter("--project", "project_id", "Only records of this project's requests.", "PROJECT_ID"),
        Filter("--action", "action", "Only this action (create, drain, bind.end …).", "ACTION"),
        Filter("--request-id", "request_id", "Only the records of this request.", "REQUEST_ID"),
        Filter(
            "--since",
            "since",
            "Only records made at or after this ISO 8601 time (UTC without an offset).",
            "TIME",
        ),
        Filter("--until", "until", "Only records made before this ISO 8601 time.", "TIME"),
    )


class AuditShow(ShowCommand):
    """Show one audit record, every field (API 2.9, admin)."""

    needs = "2.9"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", metavar="ID", help="The record's id.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.api.get(f"/v2/audit_events/{segment(str(parsed_args.id))}")
