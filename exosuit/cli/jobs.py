"""``exosuit job list|show|retry``: the conductor's durable jobs (``/v2/jobs``, API 2.5):
Placement syncs, Nova notifications, work on hosts."""

from __future__ import annotations

import argparse
from typing import Any

from exosuit.cli.base import Filter, ListCommand, ShowCommand, segment
from exosuit.cli.client import CLIError
from exosuit.cli.progress import Progress, WaitTimeout, colour, wait

__all__ = ["JobList", "JobRetry", "JobShow"]

UNFINISHED = ("pending", "running")
_STATE_COLOURS = {"succeeded": "32", "failed": "31", "running": "33", "pending": "33"}


class JobList(ListCommand):
    """List the conductor's jobs, newest first (API 2.5)."""

    needs = "2.5"
    path = "/v2/jobs"
    key = "jobs"
    nothing = "No jobs."
    columns = ("id", "kind", "key", "state", "attempts", "run_after", "last_error")
    long_columns = ("lease_expires_at", "worker", "payload", "created_at", "updated_at")
    sort_keys = ("id", "run_after", "created_at", "updated_at")
    filters = (
        Filter(
            "--state",
            "state",
            "Only jobs in these states (comma-separated: pending, running, succeeded, failed).",
            "STATES",
        ),
        Filter("--kind", "kind", "Only jobs of this kind (placement_sync, …).", "KIND"),
    )


class _JobCommand(ShowCommand):
    needs = "2.5"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("id", metavar="JOB", help="The job's id.")
        return parser

    def get_job(self, ident: int | str) -> dict[str, Any]:
        return self.api.get(f"/v2/jobs/{segment(str(ident))}")


class JobShow(_JobCommand):
    """Show one job, every field (API 2.5)."""

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return self.get_job(parsed_args.id)


class JobRetry(_JobCommand):
    """Run a failed job again (API 2.5, admin).

    With --wait, wait until it has run: exit status 0 if it succeeded, 1 if it
    failed again. Ctrl-C stops the waiting, not the job."""

    exit_code = 0

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--wait",
            action="store_true",
            help="Wait until the job is no longer pending or running, showing its state.",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            metavar="SECONDS",
            help="With --wait: give up waiting after SECONDS (the job goes on).",
        )
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        job: dict[str, Any] = self.api.post(f"/v2/jobs/{segment(parsed_args.id)}/retry")
        if not parsed_args.wait:
            return job
        stderr = self.app.stderr
        latest = [job]

        def poll() -> dict[str, Any]:
            latest[0] = self.get_job(job["id"])
            return latest[0]

        try:
            job = wait(
                poll,
                lambda j: j["state"] not in UNFINISHED,
                lambda j: (
                    f"job {j['id']} {j['kind']}: "
                    + colour(j["state"], _STATE_COLOURS.get(j["state"], "0"), stderr)
                    + f" (attempt {j['attempts']})"
                ),
                Progress(stderr),
                timeout=parsed_args.timeout,
                first=job,
            )
        except WaitTimeout as timeout:
            raise CLIError(
                f"gave up waiting after {parsed_args.timeout:g} s: job {job['id']} is "
                f"still {timeout.last['state']} (it goes on; see `exosuit job show {job['id']}`)"
            ) from None
        except KeyboardInterrupt:
            # Only the waiting stops: the retry was accepted and the job goes on.
            stderr.write(
                f"stopped waiting: job {job['id']} goes on on the server "
                f"(`exosuit job show {job['id']}`)\n"
            )
            self.exit_code = 130
            return latest[0]
        if job["state"] == "failed":
            self.app.LOG.error(f"job {job['id']} failed again: {job.get('last_error')}")
            self.exit_code = 1
        return job

    def run(self, parsed_args: argparse.Namespace) -> int:
        super().run(parsed_args)
        return self.exit_code
