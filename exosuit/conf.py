"""Configuration options (oslo.config), passed around explicitly, never global.

Every option has a default, so the embedded default (``exosuit serve``) needs no
file. ``exosuit-manage config-sample`` (or ``oslo-config-generator --namespace
exosuit``) prints a sample configuration file.
"""

from __future__ import annotations

import os
import socket

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

__all__ = ["list_opts", "make_conf", "register_opts"]

default_opts = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<this machine's host name>",
        help="The name of this host: the one name used by the agent, the database, "
        "Placement and Nova's nodename. Also the name of the simulated host of "
        "`exosuit serve`.",
    ),
    cfg.StrOpt(
        "state_path",
        default=".exosuit",
        help="Directory for Exosuit's local state (the SQLite database of the embedded "
        "default, agent cache). `exosuit serve --data-dir` sets it.",
    ),
    cfg.BoolOpt("debug", default=False, help="Log at DEBUG level."),
    cfg.IntOpt(
        "bind_timeout",
        default=60,
        min=1,
        help="Seconds a bind that needs work on its host (programming, mdev creation) may "
        "stay BindStarted waiting for the agent's report; then it is BindFailed and Nova "
        "gets a failed event. As Cyborg's option of that name.",
    ),
]

api_opts = [
    cfg.StrOpt(
        "auth_strategy",
        default="noauth",
        choices=[
            ("noauth", "Identity from X-User-Id/X-Project-Id/X-Roles/X-Service-Roles "
             "headers; none of them means an admin with the service role. "
             "For the embedded default and trusted networks only."),
            ("keystone", "Keystone tokens, validated by keystonemiddleware "
             "([keystone_authtoken] section)."),
        ],
        help="How callers are authenticated.",
    ),
    cfg.HostAddressOpt("host_ip", default="127.0.0.1", help="Address the API listens on."),
    cfg.PortOpt("port", default=6666, help="Port the API listens on."),
    cfg.StrOpt(
        "server",
        default="granian",
        choices=[
            ("granian", "granian's Rust HTTP server: worker processes with a pool of "
             "blocking threads each (the lower cost per request)."),
            ("gunicorn", "gunicorn with gthread workers."),
        ],
        help="The HTTP server exosuit-api runs the WSGI application in.",
    ),
    cfg.IntOpt(
        "workers",
        default=0,
        min=0,
        help="Number of API worker processes for exosuit-api; 0 means one per CPU.",
    ),
    cfg.IntOpt(
        "threads",
        default=4,
        min=1,
        help="Threads per API worker process.",
    ),
    cfg.StrOpt(
        "public_endpoint",
        help="Base URL used in links (for example https://cloud.example.com/accelerator). "
        "By default the URL the request arrived at.",
    ),
    cfg.IntOpt(
        "max_limit",
        default=1000,
        min=1,
        help="Largest page a list returns at microversion 2.4 and later; also the "
        "default page size there.",
    ),
    cfg.IntOpt(
        "inventory_concurrency",
        default=2,
        min=1,
        help="Inventory snapshots one API process applies at the same time; further "
        "changed snapshots wait for their turn (up to inventory_wait), then get 429 with "
        "Retry-After (agents retry), so a boot storm is absorbed instead of piling up on "
        "the database. Unchanged reports never wait.",
    ),
    cfg.FloatOpt(
        "inventory_wait",
        default=5.0,
        min=0,
        help="Seconds a changed inventory snapshot waits for its turn before 429.",
    ),
    cfg.ListOpt(
        "public_routes",
        default=["/", "/v2", "/healthz", "/metrics"],
        help="Paths answered without authentication.",
    ),
]

arq_opts = [
    cfg.DictOpt(
        "attach_handles_per_unit",
        default={"CUSTOM_FPGA_XILINX": "2"},
        help="TRAIT:N pairs. A device profile group that requires TRAIT gets N "
        "accelerator requests per unit of resource, as Cyborg does for Xilinx "
        "cards (management and user functions).",
    ),
]

database_opts = [
    cfg.StrOpt(
        "connection",
        default="sqlite:///$state_path/exosuit.sqlite",
        secret=True,
        help="SQLAlchemy URL of the database: sqlite:///path, "
        "postgresql+psycopg2://user@host/db or mysql+pymysql://user@host/db.",
    ),
    cfg.IntOpt("max_pool_size", default=10, min=1, help="Connections kept per process."),
    cfg.IntOpt("max_overflow", default=20, min=0, help="Extra connections under load."),
    cfg.IntOpt(
        "sqlite_busy_timeout",
        default=30,
        min=1,
        help="Seconds a SQLite writer waits for the database lock.",
    ),
    cfg.IntOpt(
        "max_retries",
        default=10,
        min=0,
        help="Times a transaction is retried after a deadlock or serialization failure.",
    ),
]

agent_opts = [
    # A StrOpt, not a URIOpt: the empty value (use the catalog) must be accepted.
    cfg.StrOpt(
        "api_url",
        default="http://127.0.0.1:6666",
        help="Base URL of exosuit-api (without /v2). Empty: the `accelerator` endpoint "
        "of the Keystone catalog (its /v2 suffix removed).",
    ),
    cfg.ListOpt(
        "enabled_drivers",
        default=["pci", "nvidia_gpu", "intel_fpga", "xilinx_fpga", "intel_qat", "sriov_nic",
                 "nvme"],
        help="Drivers the agent runs (entry points of the exosuit.drivers group). "
        "`simulated` adds simulated devices.",
    ),
    cfg.IntOpt("report_interval", default=60, min=1,
               help="Seconds between discoveries (and reports) when nothing changes."),
    cfg.IntOpt("report_jitter", default=10, min=0,
               help="The first report waits a random time up to this many seconds, so a "
               "fleet that boots together does not report together."),
    cfg.IntOpt("max_backoff", default=60, min=1,
               help="Longest wait between retries while the API is unreachable."),
    cfg.IntOpt("removal_grace", default=120, min=0,
               help="Seconds a device missing from discovery is still reported (as "
               "missing) before it is dropped; 0 drops it at once."),
    cfg.StrOpt("state_dir", default="$state_path/agent",
               help="Directory of the agent's cache."),
    cfg.StrOpt("sysfs_root", default="/",
               help="Root under which the drivers read sys/ (a recorded tree in tests)."),
    cfg.BoolOpt("uevents", default=True,
                help="Discover at once on PCI add/remove/change uevents (pyudev)."),
]

serve_opts = [
    cfg.IntOpt(
        "report_interval",
        default=60,
        min=1,
        help="Seconds between inventory reports of the simulated host of `exosuit serve`.",
    ),
]

conductor_opts = [
    cfg.IntOpt("workers", default=2, min=1,
               help="Worker threads of one exosuit-conductor process (`--workers` sets it). "
               "`exosuit serve` runs one."),
    cfg.FloatOpt("poll_interval", default=2.0, min=0.05,
                 help="Seconds an idle worker waits before looking for due jobs again."),
    cfg.IntOpt("lease_seconds", default=60, min=1,
               help="A claimed job belongs to its worker for this long, renewed every third "
               "of it while the job runs; a worker that dies loses its jobs to others when "
               "the lease expires."),
    cfg.IntOpt("max_attempts", default=5, min=1,
               help="Failed attempts after which a job is failed for good."),
    cfg.FloatOpt("backoff_base", default=2.0, min=0,
                 help="Seconds before the first retry of a failed job; doubled at each "
                 "further failure (with jitter)."),
    cfg.FloatOpt("backoff_max", default=300.0, min=0,
                 help="Longest wait before retrying a failed job."),
    cfg.IntOpt("reconcile_interval", default=300, min=0,
               help="Seconds between two Placement drift repairs (the periodic "
               "placement_reconcile job, run by one conductor at a time); 0 disables it."),
    cfg.IntOpt("succeeded_retention", default=86400, min=0,
               help="Seconds a succeeded job is kept (for `exosuit-conductor status`) "
               "before it is deleted; 0 keeps succeeded jobs."),
    cfg.IntOpt("failed_retention", default=2592000, min=0,
               help="Seconds a job failed for good is kept before it is deleted; 0 keeps "
               "failed jobs until an operator retries or deletes them."),
    cfg.ListOpt("handler_modules", default=[],
                help="Extra Python modules a conductor imports at start-up: out-of-tree job "
                "handlers, services or periodic jobs."),
]

placement_opts = [
    cfg.BoolOpt(
        "manage_compute_providers",
        default=False,
        help="Standalone mode: create each host's compute node provider (named after the "
        "host) when it is missing. False (a cloud): nova-compute creates it and the sync of "
        "a host waits until it exists. `exosuit serve --placement-url` sets it.",
    ),
    cfg.IntOpt("retry_interval", default=10, min=1,
               help="Seconds before a host's Placement sync that could not finish (Placement "
               "unreachable, compute node provider not there yet, removal waiting for "
               "allocations to go) runs again; doubled at each further try."),
    cfg.IntOpt("max_retry_interval", default=300, min=1,
               help="Longest wait between two tries of a host's Placement sync."),
]


def _keystoneauth_opts(service_type: str) -> list:
    """keystoneauth's session, auth (auth_type, auth_section; the plugin's own options
    are read when the client is built) and adapter options, as Nova and Cyborg have."""
    adapter = ks_loading.get_adapter_conf_options(include_deprecated=False)
    for opt in adapter:
        if opt.dest == "service_type":
            opt.default = service_type
        elif opt.dest == "valid_interfaces":
            opt.default = ["internal", "public"]
    return _session_and_auth_opts() + adapter


def _session_and_auth_opts() -> list:
    """keystoneauth's session options (a 30 s timeout by default, not forever) and its
    auth_type/auth_section."""
    session = ks_loading.get_session_conf_options()
    for opt in session:
        if opt.dest == "timeout":
            opt.default = 30
    return session + ks_loading.get_auth_common_conf_options()


service_user_opts = [
    cfg.BoolOpt(
        "send_service_user_token",
        default=False,
        help="Send a service token (from this section's credentials) with the calls Exosuit "
        "makes to Nova, as Nova does with its own [service_user] section.",
    ),
]

_GROUPS = {
    None: default_opts,
    "api": api_opts,
    "accelerator_requests": arq_opts,
    "database": database_opts,
    # The agent's credentials and TLS; `timeout` bounds each inventory report.
    "agent": agent_opts + _session_and_auth_opts(),
    "serve": serve_opts,
    "conductor": conductor_opts,
    "placement": placement_opts + _keystoneauth_opts("placement"),
    # The service credentials Exosuit notifies Nova with (os-server-external-events).
    "nova": _keystoneauth_opts("compute"),
    "service_user": service_user_opts + ks_loading.get_session_conf_options()
    + ks_loading.get_auth_common_conf_options(),
}


def _driver_groups() -> dict[str, list]:
    """Each installed driver's options, in the group named after the driver."""
    from exosuit.drivers import available_drivers, driver_class

    groups = {}
    for name in available_drivers():
        options = getattr(driver_class(name), "OPTIONS", None)
        if options:
            groups[name] = list(options)
    return groups


def register_opts(conf: cfg.ConfigOpts) -> None:
    for group, opts in {**_GROUPS, **_driver_groups()}.items():
        conf.register_opts(opts, group=group)


def driver_settings(conf: cfg.ConfigOpts, name: str) -> dict:
    """The values of a driver's configuration group, as a plain dict."""
    if name not in conf:
        return {}
    group = conf[name]
    return {opt: group[opt] for opt in group}


def list_opts():
    """The oslo-config-generator hook (namespace ``exosuit``)."""
    return list({**_GROUPS, **_driver_groups()}.items())


def make_conf(config_files: list[str] | None = None, **overrides) -> cfg.ConfigOpts:
    """A fresh ConfigOpts with Exosuit's options, read from ``config_files``.

    ``overrides`` are ``"group.option"`` (or ``"option"`` for DEFAULT) keys
    set after parsing; they come from command-line flags such as ``--port``.
    """
    conf = cfg.ConfigOpts()
    register_opts(conf)
    files = [os.path.abspath(f) for f in (config_files or [])]
    for f in files:
        if not os.path.exists(f):
            raise SystemExit(f"config file {f} does not exist")
    conf([], project="exosuit", default_config_files=files, validate_default_values=True)
    for key, value in overrides.items():
        group, _, name = key.rpartition(".")
        conf.set_override(name, value, group=group or None)
    return conf
