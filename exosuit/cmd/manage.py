"""``exosuit-manage``: database create/upgrade, configuration and policy samples."""

from __future__ import annotations

import argparse
import sys

from exosuit.cmd import add_config_argument, setup_logging
from exosuit.conf import make_conf


def _db_upgrade(args) -> int:
    from exosuit.api.deploy import make_database
    from exosuit.db import migration

    conf = make_conf(args.config_file)
    db = make_database(conf)
    before = migration.current_revision(db)
    migration.upgrade(db, args.revision)
    after = migration.current_revision(db)
    print(f"database {db.url.render_as_string(hide_password=True)}: "
          f"{before or 'empty'} -> {after}")
    return 0


def _db_version(args) -> int:
    from exosuit.api.deploy import make_database
    from exosuit.db import migration

    conf = make_conf(args.config_file)
    db = make_database(conf)
    current, head = migration.current_revision(db), migration.head_revision()
    print(f"current: {current or 'none (empty database)'}\nhead: {head}")
    return 0 if current == head else 1


def _config_sample(args) -> int:
    from oslo_config import generator

    generator.main(["--namespace", "exosuit", "--namespace", "keystonemiddleware.auth_token",
                    "--namespace", "oslo.policy"] + (["--output-file", args.output]
                                                      if args.output else []))
    return 0


def _policy_sample(args) -> int:
    from oslo_policy import generator

    # oslo.policy 6 writes YAML only and refuses the old --format option.
    generator.generate_sample(["--namespace", "exosuit"]
                              + (["--output-file", args.output] if args.output else []))
    return 0


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = argparse.ArgumentParser(prog="exosuit-manage", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="Database schema.").add_subparsers(dest="db_command",
                                                                        required=True)
    upgrade = db.add_parser("upgrade", help="Create or upgrade the schema.")
    upgrade.add_argument("revision", nargs="?", default="head")
    add_config_argument(upgrade)
    upgrade.set_defaults(func=_db_upgrade)
    version = db.add_parser("version", help="Show the schema revision (exit 1 if not head).")
    add_config_argument(version)
    version.set_defaults(func=_db_version)
    sample = sub.add_parser("config-sample", help="Print a sample configuration file.")
    sample.add_argument("--output", help="Write to this file instead of standard output.")
    sample.set_defaults(func=_config_sample)
    policy = sub.add_parser("policy-sample", help="Print the default policy (YAML).")
    policy.add_argument("--output", help="Write to this file instead of standard output.")
    policy.set_defaults(func=_policy_sample)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
