"""``exosuit-manage``: database create/upgrade, Cyborg import, configuration and policy samples."""

from __future__ import annotations

import argparse
import sys

from exosuit.cmd import add_config_argument, setup_logging
from exosuit.conf import make_conf


def _db_upgrade(args: argparse.Namespace) -> int:
    from exosuit.db import migration
    from exosuit.db.api import Database

    conf = make_conf(args.config_file)
    db = Database.from_conf(conf)
    before = migration.current_revision(db)
    migration.upgrade(db, args.revision)
    after = migration.current_revision(db)
    print(f"database {db.url.render_as_string(hide_password=True)}: {before or 'empty'} -> {after}")
    return 0


def _db_version(args: argparse.Namespace) -> int:
    from exosuit.db import migration
    from exosuit.db.api import Database

    conf = make_conf(args.config_file)
    db = Database.from_conf(conf)
    current, head = migration.current_revision(db), migration.head_revision()
    print(f"current: {current or 'none (empty database)'}\nhead: {head}")
    return 0 if current == head else 1


def _import_cyborg(args: argparse.Namespace) -> int:
    from exosuit.db import cyborg_import
    from exosuit.db.api import Database

    conf = make_conf(args.config_file)
    try:
        source = cyborg_import.read_source(args.source)
    except cyborg_import.SourceUnreadable as error:
        print(f"exosuit-manage import-cyborg: {error}", file=sys.stderr)
        return 2
    db = Database.from_conf(conf)
    try:
        if args.apply:
            report = db.write(cyborg_import.import_into, source, apply=True, merge=args.merge)
        else:
            report = db.read(cyborg_import.import_into, source, apply=False, merge=args.merge)
    except cyborg_import.ImportRefused as error:
        # TargetNotEmpty, UnmappedInUse, ImportFailed: the transaction was rolled back.
        print(f"exosuit-manage import-cyborg: nothing written: {error}", file=sys.stderr)
        return 1
    finally:
        db.dispose()
    target = db.url.render_as_string(hide_password=True)
    print("\n".join(report.lines()))
    if args.apply:
        print(f"written to {target} in one transaction")
    else:
        print(f"dry run: {target} unchanged; --apply writes it")
    return 0


def _config_sample(args: argparse.Namespace) -> int:
    from oslo_config import generator

    generator.main(
        [
            "--namespace",
            "exosuit",
            "--namespace",
            "keystonemiddleware.auth_token",
            "--namespace",
            "oslo.policy",
        ]
        + (["--output-file", args.output] if args.output else [])
    )
    return 0


def _policy_sample(args: argparse.Namespace) -> int:
    from oslo_policy import generator

    # oslo.policy 6 writes YAML only and refuses the old --format option.
    generator.generate_sample(
        ["--namespace", "exosuit"] + (["--output-file", args.output] if args.output else [])
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = argparse.ArgumentParser(prog="exosuit-manage", description=__doc__)
    add_config_argument(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    db_parser = sub.add_parser("db", help="Database schema.")
    add_config_argument(db_parser, subcommand=True)
    db = db_parser.add_subparsers(dest="db_command", required=True)
    upgrade = db.add_parser("upgrade", help="Create or upgrade the schema.")
    upgrade.add_argument("revision", nargs="?", default="head")
    add_config_argument(upgrade, subcommand=True)
    upgrade.set_defaults(func=_db_upgrade)
    version = db.add_parser("version", help="Show the schema revision (exit 1 if not head).")
    add_config_argument(version, subcommand=True)
    version.set_defaults(func=_db_version)
    imports = sub.add_parser(
        "import-cyborg",
        help="Bring a Cyborg database over (dry run unless --apply).",
        description="Read Cyborg's database (read only) and import its devices, "
        "deployables, attach handles, device profiles and accelerator requests into "
        "[database] connection, keeping every UUID. Without --apply, only report.",
    )
    imports.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="URL",
        help="SQLAlchemy URL of Cyborg's database (e.g. mysql+pymysql://user:pw@host/cyborg).",
    )
    imports.add_argument("--apply", action="store_true", help="Write the import (one transaction).")
    imports.add_argument(
        "--merge",
        action="store_true",
        help="Import into a database that already holds devices, profiles or ARQs.",
    )
    add_config_argument(imports, subcommand=True)
    imports.set_defaults(func=_import_cyborg)
    sample = sub.add_parser("config-sample", help="Print a sample configuration file.")
    sample.add_argument("--output", help="Write to this file instead of standard output.")
    sample.set_defaults(func=_config_sample)
    policy = sub.add_parser("policy-sample", help="Print the default policy (YAML).")
    policy.add_argument("--output", help="Write to this file instead of standard output.")
    policy.set_defaults(func=_policy_sample)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
