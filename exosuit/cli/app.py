"""The ``exosuit`` application: its global options, its logging, and ``COMMANDS``,
the whole command line on one screen (name → class)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, TextIO

from cliff.app import App
from cliff.command import Command
from cliff.commandmanager import CommandManager

from exosuit import __version__
from exosuit.cli import (
    arqs,
    audit,
    claims,
    complete,
    deployables,
    devices,
    discoveries,
    drivers,
    hosts,
    images,
    jobs,
    partitions,
    permissions,
    profiles,
    serve,
    servers,
    services,
)
from exosuit.cli.base import ApiCommand
from exosuit.cli.client import DEFAULT_URL, ApiClient, connect
from exosuit.cli.progress import colour

__all__ = ["COMMANDS", "ExosuitApp", "main"]

COMMANDS: dict[str, type[Command]] = {
    "arq bind": arqs.ArqBind,
    "arq create": arqs.ArqCreate,
    "arq delete": arqs.ArqDelete,
    "arq list": arqs.ArqList,
    "arq show": arqs.ArqShow,
    "arq unbind": arqs.ArqUnbind,
    "audit list": audit.AuditList,
    "audit show": audit.AuditShow,
    "claim create": claims.ClaimCreate,
    "claim list": claims.ClaimList,
    "claim release": claims.ClaimRelease,
    "claim renew": claims.ClaimRenew,
    "claim show": claims.ClaimShow,
    "deployable list": deployables.DeployableList,
    "deployable program": deployables.DeployableProgram,
    "deployable program-status": deployables.DeployableProgramStatus,
    "deployable show": deployables.DeployableShow,
    "device delete": devices.DeviceDelete,
    "device disable": devices.DeviceDisable,
    "device drain": devices.DeviceDrain,
    "device enable": devices.DeviceEnable,
    "device health": devices.DeviceHealth,
    "device inactive": devices.DeviceInactive,
    "device list": devices.DeviceList,
    "device ready": devices.DeviceReady,
    "device set": devices.DeviceSet,
    "device show": devices.DeviceShow,
    "device undrain": devices.DeviceUndrain,
    "device unset": devices.DeviceUnset,
    "discover-services": discoveries.DiscoverServices,
    "driver install": drivers.DriverInstall,
    "driver list": drivers.DriverList,
    "driver uninstall": drivers.DriverUninstall,
    "driver update": drivers.DriverUpdate,
    "host drain": hosts.HostDrain,
    "host list": hosts.HostList,
    "host show": hosts.HostShow,
    "host undrain": hosts.HostUndrain,
    "image delete": images.ImageDelete,
    "image list": images.ImageList,
    "image show": images.ImageShow,
    "image upload": images.ImageUpload,
    "job list": jobs.JobList,
    "job retry": jobs.JobRetry,
    "job show": jobs.JobShow,
    "partition set": partitions.PartitionSet,
    "partition show": partitions.PartitionShow,
    "permission list": permissions.PermissionList,
    "profile create": profiles.ProfileCreate,
    "profile delete": profiles.ProfileDelete,
    "profile list": profiles.ProfileList,
    "profile show": profiles.ProfileShow,
    "serve": serve.Serve,
    "server attach": servers.ServerAttach,
    "server detach": servers.ServerDetach,
    "service list": services.ServiceList,
}

DESCRIPTION = (
    "Exosuit's command line: hosts, devices (and their activation), drivers, services, "
    "deployables, device profiles, accelerator requests, claims, jobs and the audit trail "
    "of an Exosuit (or Cyborg) API, and `exosuit serve`."
)


class _Commands(CommandManager):
    """The commands of COMMANDS (cliff adds `help` and `complete`); no entry points."""

    def __init__(self, commands: dict[str, type[Command]]) -> None:
        super().__init__("exosuit.cli")
        for name, command in commands.items():
            self.add_command(name, command)

    def load_commands(self, namespace: str) -> None:
        """Nothing to load: every command is listed in COMMANDS."""


class _ErrorFormatter(logging.Formatter):
    """``error: <message>`` (red on a terminal); tracebacks only under --debug."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__("%(message)s")
        self.stream = stream

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.ERROR:
            return colour("error:", "31", self.stream) + " " + text
        return text


class ExosuitApp(App):
    NAME = "exosuit"
    LOG = logging.getLogger("exosuit.cli")

    def __init__(
        self,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        commands: dict[str, type[Command]] | None = None,
    ) -> None:
        super().__init__(
            description=DESCRIPTION,
            version=__version__,
            command_manager=_Commands(COMMANDS if commands is None else commands),
            stdout=stdout,
            stderr=stderr,
            deferred_help=True,
        )
        # cliff's `complete` with a zsh script added (exosuit/cli/complete.py).
        self.command_manager.add_command("complete", complete.Complete)
        self._api: ApiClient | None = None

    def build_option_parser(
        self,
        description: str | None,
        version: str | None,
        argparse_kwargs: dict[str, Any] | None = None,
    ) -> argparse.ArgumentParser:
        # allow_abbrev=False: global options are taken anywhere on the line (cliff parses
        # them first); an abbreviation would take a command's option for a global one.
        parser = super().build_option_parser(
            description, version, {"allow_abbrev": False, "prog": self.NAME}
        )
        for action in parser._actions:
            if action.dest == "debug":
                action.help = "Show the HTTP requests and responses, and tracebacks on errors."
        add_connection_options(parser)
        serve.add_config_file(parser)
        return parser

    def configure_logging(self) -> None:
        """Errors on stderr (our logger only: `exosuit serve` sets up its own logging)."""
        handler = logging.StreamHandler(self.stderr)
        handler.setFormatter(_ErrorFormatter(self.stderr))
        self.LOG.handlers[:] = [handler]
        self.LOG.setLevel(logging.DEBUG if self.options.debug else logging.INFO)
        self.LOG.propagate = False
        if self.options.log_file:
            file_handler = logging.FileHandler(self.options.log_file)
            file_handler.setFormatter(logging.Formatter(self.LOG_FILE_MESSAGE_FORMAT))
            self.LOG.addHandler(file_handler)

    def prepare_to_run_command(self, cmd: Command) -> None:
        if isinstance(cmd, ApiCommand) and self.options.debug:
            # keystoneauth logs each request and response (headers, body) at DEBUG.
            requests_log = logging.getLogger("keystoneauth")
            requests_log.handlers[:] = list(self.LOG.handlers)
            requests_log.setLevel(logging.DEBUG)
            requests_log.propagate = False

    def run_subcommand(self, argv: list[str]) -> int:
        try:
            self.command_manager.find_command(argv)
        except ValueError:
            # cliff writes "is not an exosuit command … Did you mean" to stdout: keep
            # stdout for output only.
            stdout, self.stdout = self.stdout, self.stderr
            try:
                return super().run_subcommand(argv)
            finally:
                self.stdout = stdout
        return super().run_subcommand(argv)

    def interact(self) -> None:
        """No command: the help, exit status 2 (no interactive shell)."""
        self.parser.print_usage(self.stderr)
        self.stderr.write(f"{self.NAME}: a command is required; see `{self.NAME} --help`\n")
        raise SystemExit(2)

    @property
    def api(self) -> ApiClient:
        """The API client of the global options, made on first use."""
        if self._api is None:
            self._api = connect(self.options)
        return self._api


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """Where to connect: an endpoint with no auth, or Keystone (``openstack``'s options
    and OS_* variables, clouds.yaml)."""
    group = parser.add_argument_group(
        "connection",
        f"No auth: --os-endpoint, else $EXOSUIT_URL, else {DEFAULT_URL}. Keystone "
        "when --os-cloud/$OS_CLOUD, --os-auth-url/$OS_AUTH_URL or an auth type other "
        "than none is given: every OS_* variable and clouds.yaml are read as by "
        "`openstack`, and --os-endpoint overrides the catalog.",
    )
    group.add_argument(
        "--os-endpoint",
        metavar="URL",
        help="The API's URL, with or without /v2 ($EXOSUIT_URL, $OS_ENDPOINT).",
    )
    group.add_argument(
        "--os-accelerator-api-version",
        metavar="X.Y",
        default=os.environ.get("OS_ACCELERATOR_API_VERSION"),
        help="Ask for this microversion (default: the highest both sides speak).",
    )
    keystone: list[tuple[str, str, str]] = [
        ("--os-cloud", "NAME", "Cloud of clouds.yaml ($OS_CLOUD)."),
        ("--os-auth-type", "TYPE", "Auth plugin: password, token, none, … ($OS_AUTH_TYPE)."),
        ("--os-auth-url", "URL", "Keystone's URL ($OS_AUTH_URL)."),
        ("--os-username", "NAME", "($OS_USERNAME)"),
        ("--os-user-id", "ID", "($OS_USER_ID)"),
        ("--os-password", "PASSWORD", "($OS_PASSWORD)"),
        ("--os-project-name", "NAME", "($OS_PROJECT_NAME)"),
        ("--os-project-id", "ID", "($OS_PROJECT_ID)"),
        ("--os-user-domain-name", "NAME", "($OS_USER_DOMAIN_NAME)"),
        ("--os-user-domain-id", "ID", "($OS_USER_DOMAIN_ID)"),
        ("--os-project-domain-name", "NAME", "($OS_PROJECT_DOMAIN_NAME)"),
        ("--os-project-domain-id", "ID", "($OS_PROJECT_DOMAIN_ID)"),
        ("--os-token", "TOKEN", "($OS_TOKEN)"),
        ("--os-application-credential-id", "ID", "($OS_APPLICATION_CREDENTIAL_ID)"),
        ("--os-application-credential-secret", "SECRET", "($OS_APPLICATION_CREDENTIAL_SECRET)"),
        ("--os-region-name", "NAME", "($OS_REGION_NAME)"),
        ("--os-interface", "INTERFACE", "public, internal or admin ($OS_INTERFACE)."),
        ("--os-cacert", "PATH", "CA bundle to verify TLS ($OS_CACERT)."),
    ]
    for option, metavar, text in keystone:
        group.add_argument(option, metavar=metavar, help=text)
    group.add_argument(
        "--insecure",
        action="store_const",
        const=True,
        help="Do not verify the server's TLS certificate.",
    )


def main(argv: list[str] | None = None, **kwargs: Any) -> int:
    return ExosuitApp(**kwargs).run(sys.argv[1:] if argv is None else list(argv))
