"""``exosuit-agent``: discovers this host's devices and reports them to the API."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from exosuit.agent.plugins import DriverSet, installed_plugins
from exosuit.agent.snapshot import discover, make_snapshot
from exosuit.cmd import add_config_argument
from exosuit.conf import AgentSettings, DefaultSettings, make_conf
from exosuit.schemas import JSONObject
from exosuit.stopping import stop_while_starting


def _discover(args: argparse.Namespace) -> int:
    conf = make_conf(args.config_file)
    hostname = args.hostname or DefaultSettings.from_conf(conf).host
    root = args.sysfs_root or AgentSettings.from_conf(conf).sysfs_root
    # The agent's own assembly: on a recorded tree, tools answer from its commands.json.
    plugins = DriverSet.from_conf(conf, hostname, root, args.driver or None)
    found = discover(plugins.drivers, usage=args.usage)
    snapshot = make_snapshot(hostname, found, plugins.report(found.found, found.failed))
    if args.usage:
        snapshot["usage"] = found.usage
    if args.format == "json":
        json.dump(snapshot, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        _print_table(snapshot, [d.name for d in plugins.drivers], root)
    # A failed driver is an error worth a non-zero status (its devices are missing).
    return 1 if snapshot["driver_errors"] else 0


_COLUMNS = (
    "PCI ADDRESS",
    "TYPE",
    "VENDOR",
    "MODEL",
    "DRIVER",
    "RC",
    "ACCEL",
    "HANDLES",
    "DEPLOYABLE",
)


_SERVICE_COLUMNS = ("PCI ADDRESS", "SERVICE", "NAME", "STATE", "DETAILS")
_DRIVER_COLUMNS = ("DRIVER", "VERSION", "ENABLED", "FOUND", "CONFIG DIGEST", "ERROR")


def _print_table(snapshot: JSONObject, driver_names: list[str], root: str) -> None:
    """One line per deployable; one per service of each device (what it offers now,
    or could offer once configured); one per installed driver; then what was found (or
    why nothing was)."""
    rows, services = [], []
    for device in snapshot["devices"]:
        address = device["pci_address"] or "-"
        for deployable in device["deployables"]:
            attrs = {a["key"]: a["value"] for a in deployable["attributes"]}
            rows.append(
                (
                    address,
                    device["type"],
                    device["vendor"],
                    device["model"],
                    device["driver_name"],
                    attrs.get("rc", "-"),
                    str(deployable["num_accelerators"]),
                    str(len(deployable["attach_handles"])),
                    deployable["name"],
                )
            )
        for service in device.get("services", ()):
            details = service.get("details") or {}
            services.append(
                (
                    address,
                    service["kind"],
                    service["name"],
                    "enabled" if service["enabled"] else "available",
                    ", ".join(f"{k}={v}" for k, v in sorted(details.items())) or "-",
                )
            )
    _print_rows(_COLUMNS, rows)
    _print_rows(_SERVICE_COLUMNS, services)
    _print_rows(
        _DRIVER_COLUMNS,
        [
            (
                d["name"],
                d["version"] or "-",
                "yes" if d["enabled"] else "no",
                str(d["found"]) if d["enabled"] else "-",
                # As the agent's log names a hash: enough to compare two hosts.
                d["config_digest"][:19] if d["config_digest"] else "-",
                d["error"].splitlines()[0][:80] if d["error"] else "-",
            )
            for d in snapshot.get("drivers") or ()
        ],
    )
    devices = len(snapshot["devices"])
    print(
        f"host {snapshot['hostname']}: {devices} device(s), {len(rows)} deployable(s) "
        f"found by {', '.join(driver_names) or 'no driver'} under {root}"
    )
    if not devices and not snapshot["driver_errors"]:
        print(
            "no accelerator found: check [agent] enabled_drivers, the drivers' sections "
            "(e.g. [pci] device_spec) and --sysfs-root"
        )
    for error in snapshot["driver_errors"]:
        print(f"driver {error['driver']} failed: {error['error']}")


def _print_rows(columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """An aligned table with its header, then a blank line; nothing without rows."""
    if not rows:
        return
    widths = [max(len(r[i]) for r in (columns, *rows)) for i in range(len(columns))]
    for row in (columns, *rows):
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    print()


def _record(args: argparse.Namespace) -> int:
    from exosuit.agent.record import record

    try:
        summary = record(args.sysfs_root, args.output)
    except (FileExistsError, FileNotFoundError) as error:
        print(f"exosuit-agent record: {error}", file=sys.stderr)
        return 2
    print(
        f"recorded {summary.files} files and {summary.links} links into {args.output} "
        f"({len(summary.skipped)} unreadable or binary attributes skipped)"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from exosuit.agent.main import run_agent
    from exosuit.cmd import setup_logging
    from exosuit.conf import make_agent_conf

    # The agent's own options only (keystoneauth's when it needs Keystone or TLS, each
    # driver's when it loads it): an agent imports what it runs, nothing of the server.
    conf = make_agent_conf(args.config_file)
    setup_logging(DefaultSettings.from_conf(conf).debug)
    return run_agent(conf)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="exosuit-agent", description=__doc__)
    add_config_argument(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="Discover and report periodically (the agent service).")
    add_config_argument(run, subcommand=True)
    run.set_defaults(func=_run)
    discover = sub.add_parser("discover", help="Print the snapshot the agent would send.")
    add_config_argument(discover, subcommand=True)
    discover.add_argument("--hostname", help="Host name (default [DEFAULT] host).")
    discover.add_argument("--format", choices=["json", "table"], default="table")
    discover.add_argument(
        "--sysfs-root",
        help="Read sys/ under this root, e.g. a recorded tree (default [agent] sysfs_root).",
    )
    discover.add_argument(
        "--driver",
        action="append",
        metavar="NAME",
        help="Run this driver (repeatable; default [agent] enabled_drivers). "
        f"Installed: {', '.join(installed_plugins())}.",
    )
    discover.add_argument(
        "--usage",
        action="store_true",
        help="Also read the devices' live figures (usage) from the drivers that can.",
    )
    discover.set_defaults(func=_discover)
    record = sub.add_parser(
        "record",
        help="Copy the parts of sysfs the drivers read into a fixture tree (doc/recording.md).",
    )
    record.add_argument("--output", required=True, help="Directory to create (must be empty).")
    record.add_argument("--sysfs-root", default="/", help="Root to record (default /).")
    record.set_defaults(func=_record)
    args = parser.parse_args(argv)
    with stop_while_starting():  # until the agent's own handlers take over
        return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
