"""Configuration options (oslo.config), passed around explicitly, never global.

Every option has a default, so the embedded default (``exosuit serve``) needs no
file. ``exosuit-manage config-sample`` (or ``oslo-config-generator --namespace
exosuit``) prints a sample configuration file.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Sequence

from oslo_config import cfg

__all__ = [
    "driver_settings",
    "list_opts",
    "make_agent_conf",
    "make_conf",
    "register_agent_keystone_opts",
    "register_opts",
]

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
    cfg.IntOpt(
        "program_timeout",
        default=600,
        min=1,
        help="Seconds an operator's program of a deployable may take (fetch, load, verify) "
        "before the conductor fails it (doc/programming.md); a bind's program is bounded "
        "by bind_timeout.",
    ),
]

api_opts = [
    cfg.StrOpt(
        "auth_strategy",
        default="noauth",
        choices=[
            (
                "noauth",
                "Identity from X-User-Id/X-Project-Id/X-Roles/X-Service-Roles "
                "headers; none of them means an admin with the service role. "
                "For the embedded default and trusted networks only.",
            ),
            (
                "keystone",
                "Keystone tokens, validated by keystonemiddleware ([keystone_authtoken] section).",
            ),
        ],
        help="How callers are authenticated.",
    ),
    cfg.HostAddressOpt("host_ip", default="127.0.0.1", help="Address the API listens on."),
    cfg.PortOpt("port", default=6666, help="Port the API listens on."),
    cfg.StrOpt(
        "server",
        default="granian",
        choices=[
            (
                "granian",
                "granian's Rust HTTP server: worker processes with a pool of "
                "blocking threads each (the lower cost per request).",
            ),
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
    cfg.IntOpt(
        "report_cache_size",
        default=100000,
        min=0,
        help="Hosts whose last report each API process keeps, to answer their unchanged "
        "reports without a database read of their own while no process changed their "
        "snapshot or desired state (about 300 bytes each; 0: none kept).",
    ),
    cfg.FloatOpt(
        "inventory_wait",
        default=5.0,
        min=0,
        help="Seconds a changed inventory snapshot waits for its turn before 429.",
    ),
    cfg.ListOpt(
        "public_routes",
        default=[
            "/",
            "/v2",
            "/healthz",
            "/metrics",
            "/openapi.json",
            "/dashboard",
            "/dashboard/static/*",
        ],
        help="Paths answered without authentication (a trailing /* makes a whole subtree public).",
    ),
    cfg.IntOpt(
        "stale_report_after",
        default=300,
        min=1,
        help="Seconds after its last inventory report a host counts as stale in GET "
        "/v2/summary (microversion 2.5), unless the request gives ?stale_after=.",
    ),
    cfg.IntOpt(
        "max_body_size",
        default=1024 * 1024,
        min=1024,
        help="Largest request body (bytes) the API reads (image uploads excepted: [images] "
        "max_size); a larger one gets 413.",
    ),
    cfg.IntOpt(
        "max_agent_body_size",
        default=32 * 1024 * 1024,
        min=1024,
        help="Largest request body of the agent API (/agent/v1: a host's whole inventory "
        "snapshot); a larger one gets 413.",
    ),
    # Limits of what one request may ask for (doc/limits.md): 400 exosuit.limit.exceeded.
    cfg.IntOpt(
        "max_profile_groups",
        default=64,
        min=1,
        help="Most request groups a device profile may have (POST /v2/device_profiles).",
    ),
    cfg.IntOpt(
        "max_group_keys",
        default=64,
        min=1,
        help="Most keys (resources:, trait:, accel:) one device profile group may have.",
    ),
    cfg.IntOpt(
        "max_value_length",
        default=255,
        min=1,
        max=255,
        help="Longest key or value of a device profile group, and longest value of a bind's "
        "operation (PATCH /v2/accelerator_requests); at most 255, the size of the columns "
        "a bind writes.",
    ),
    cfg.IntOpt(
        "max_arqs_per_request",
        default=64,
        min=1,
        help="Most accelerator requests one POST /v2/accelerator_requests creates (the "
        "units of every group of the profile, times [accelerator_requests] "
        "attach_handles_per_unit); a device profile that would make more is refused when "
        "created, and one created before (or imported) when used.",
    ),
    cfg.IntOpt(
        "max_arqs_per_patch",
        default=256,
        min=1,
        help="Most accelerator requests one PATCH /v2/accelerator_requests binds or unbinds "
        "(Nova sends those of one instance).",
    ),
    cfg.IntOpt(
        "max_ops_per_arq",
        default=8,
        min=4,
        help="Most operations per accelerator request in a PATCH (a bind needs 3, or 4 with "
        "project_id).",
    ),
    cfg.IntOpt(
        "backlog",
        default=1024,
        min=1,
        help="Listen backlog of the API's socket (exosuit-api and exosuit serve): "
        "connections the kernel queues while every server thread is busy, instead of "
        "resetting them (a storm of binds, a boot storm of agents).",
    ),
    cfg.IntOpt(
        "shutdown_timeout",
        default=30,
        min=0,
        help="On SIGTERM, seconds the API lets requests in progress finish before it stops "
        "anyway (exosuit-api's workers and exosuit serve).",
    ),
    cfg.IntOpt(
        "program_wait",
        default=120,
        min=0,
        help="Below microversion 2.6, PATCH /v2/deployables/{uuid}/program waits this many "
        "seconds for the program to end (Cyborg's clients expect an answer when it is "
        "done); after that it answers 202 and the program goes on.",
    ),
    cfg.FloatOpt(
        "report_age_resolution",
        default=60.0,
        min=1.0,
        help="An unchanged inventory report (hash only) writes nothing, except that it "
        "moves the host's last report time when that is older than this many seconds: "
        "host report ages (GET /v2/hosts, the dashboard) are accurate to this, at one "
        "database write per host per this many seconds.",
    ),
    cfg.IntOpt(
        "discovery_rate",
        default=200,
        min=1,
        help="Hosts per second that a discovery asked of many hosts (POST /v2/discoveries) "
        "should bring to the API: each agent waits a random delay within (hosts asked / "
        "this) seconds before it discovers and reports, so that 10,000 hosts asked at once "
        "do not arrive at once (doc/devices.md).",
    ),
]

inventory_opts = [
    cfg.StrOpt(
        "new_device_activation",
        default="inactive",
        choices=[
            (
                "inactive",
                "Listed with its state, fully reserved in Placement and never bindable "
                "until an operator marks it ready (doc/devices.md).",
            ),
            ("ready", "Offered at once, as Cyborg offers every device it finds."),
        ],
        help="The activation of a device an agent reports for the first time.",
    ),
    cfg.ListOpt(
        "ready_drivers",
        default=[],
        help="Driver plug-ins (the agent's enabled_drivers names) whose new devices start "
        "ready whatever new_device_activation says (`exosuit serve` lists simulated, so "
        "that its demo works at once). A device from an agent that does not say which "
        "plug-in found it is matched by its driver_name.",
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
    cfg.IntOpt(
        "startup_wait",
        default=120,
        min=0,
        help="Seconds exosuit-api and exosuit-conductor wait at start for a database that "
        "cannot be reached (a restart during a database failover), said once in the log, "
        "before they give up with the reason.",
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
        default=[
            "pci",
            "nvidia_gpu",
            "intel_fpga",
            "xilinx_fpga",
            "intel_qat",
            "sriov_nic",
            "nvme",
        ],
        help="Drivers the agent runs (entry points of the exosuit.drivers group). "
        "`simulated` adds simulated devices.",
    ),
    cfg.IntOpt(
        "report_interval",
        default=60,
        min=1,
        help="Seconds between discoveries (and reports) when nothing changes.",
    ),
    cfg.IntOpt(
        "report_jitter",
        default=10,
        min=0,
        help="The first report waits a random time up to this many seconds, so a "
        "fleet that boots together does not report together.",
    ),
    cfg.IntOpt(
        "max_backoff",
        default=60,
        min=1,
        help="Longest wait between retries while the API is unreachable.",
    ),
    cfg.IntOpt(
        "removal_grace",
        default=120,
        min=0,
        help="Seconds a device missing from discovery is still reported (as "
        "missing) before it is dropped; 0 drops it at once.",
    ),
    cfg.StrOpt("state_dir", default="$state_path/agent", help="Directory of the agent's cache."),
    cfg.FloatOpt(
        "desired_state_interval",
        default=5.0,
        min=0.5,
        help="Seconds between two looks at the host's desired state (programs to run …): "
        "a conditional GET answered 304 while nothing changed.",
    ),
    cfg.IntOpt(
        "image_cache_size",
        default=2 * 1024**3,
        min=0,
        help="Bytes of images (bitstreams) the agent keeps, by hash, least recently used "
        "first out; the previous image of a device is kept for rollback.",
    ),
    cfg.StrOpt(
        "sysfs_root",
        default="/",
        help="Root under which the drivers read sys/ (a recorded tree in tests).",
    ),
    cfg.BoolOpt(
        "uevents", default=True, help="Discover at once on PCI add/remove/change uevents (pyudev)."
    ),
    cfg.PortOpt(
        "metrics_port",
        default=0,
        help="Port of the agent's own /metrics, for a node-local scrape of this host's "
        "devices and live figures (doc/metrics.md); 0: none.",
    ),
    cfg.StrOpt(
        "metrics_host",
        default="127.0.0.1",
        help="Address the agent's /metrics listens on (0.0.0.0 or :: for a Prometheus "
        "on another machine).",
    ),
]

cdi_opts = [
    cfg.StrOpt(
        "spec_dir",
        default="/var/run/cdi",
        help="Directory where the agent writes the CDI spec files of the devices claimed "
        "for containers (exosuit.dev-<class>_<claim>.json), which container engines read "
        "(podman, containerd and CRI-O read /etc/cdi and /var/run/cdi). `exosuit serve` "
        "uses <data dir>/cdi unless a file sets it (doc/cdi.md).",
    ),
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
    cfg.IntOpt(
        "workers",
        default=2,
        min=1,
        help="Worker threads of one exosuit-conductor process (`--workers` sets it). "
        "`exosuit serve` runs one.",
    ),
    cfg.FloatOpt(
        "poll_interval",
        default=2.0,
        min=0.05,
        help="Seconds an idle worker waits before looking for due jobs again.",
    ),
    cfg.IntOpt(
        "lease_seconds",
        default=60,
        min=1,
        help="A claimed job belongs to its worker for this long, renewed every third "
        "of it while the job runs; a worker that dies loses its jobs to others when "
        "the lease expires.",
    ),
    cfg.IntOpt(
        "max_attempts",
        default=5,
        min=1,
        help="Failed attempts after which a job is failed for good.",
    ),
    cfg.FloatOpt(
        "backoff_base",
        default=2.0,
        min=0,
        help="Seconds before the first retry of a failed job; doubled at each "
        "further failure (with jitter).",
    ),
    cfg.FloatOpt(
        "backoff_max", default=300.0, min=0, help="Longest wait before retrying a failed job."
    ),
    cfg.IntOpt(
        "reconcile_interval",
        default=300,
        min=0,
        help="Seconds between two Placement drift repairs (the periodic "
        "placement_reconcile job, run by one conductor at a time); 0 disables it.",
    ),
    cfg.IntOpt(
        "program_sweep_interval",
        default=30,
        min=0,
        help="Seconds between two looks for programs past [DEFAULT] program_timeout (the "
        "periodic program_timeout job, which fails them); 0 disables it (a program its "
        "host never finishes then keeps its deployable reserved).",
    ),
    cfg.IntOpt(
        "claim_sweep_interval",
        default=30,
        min=0,
        help="Seconds between two looks for standalone claims past their expires_at (the "
        "periodic claim_expiry job, which releases them, and purges released claims older "
        "than [claims] retention); 0 disables it (an expired claim then holds its devices "
        "until it is released).",
    ),
    cfg.IntOpt(
        "health_sweep_interval",
        default=30,
        min=0,
        help="Seconds between two looks for devices held back as unhealthy that have been "
        "healthy for [health] recover_after (the periodic health_recovery job, which offers "
        "them again); 0 disables it (only an operator's clear then offers them again).",
    ),
    cfg.IntOpt(
        "audit_sweep_interval",
        default=3600,
        min=0,
        help="Seconds between two audit sweeps (the periodic audit_sweep job: deletes the "
        "audit records older than [audit] retention and publishes any notification still "
        "pending); 0 disables it.",
    ),
    cfg.IntOpt(
        "succeeded_retention",
        default=86400,
        min=0,
        help="Seconds a succeeded job is kept (for `exosuit-conductor status`) "
        "before it is deleted; 0 keeps succeeded jobs.",
    ),
    cfg.IntOpt(
        "failed_retention",
        default=2592000,
        min=0,
        help="Seconds a job failed for good is kept before it is deleted; 0 keeps "
        "failed jobs until an operator retries or deletes them.",
    ),
    cfg.ListOpt(
        "handler_modules",
        default=[],
        help="Extra Python modules a conductor imports at start-up: out-of-tree job "
        "handlers, services or periodic jobs.",
    ),
]

audit_opts = [
    cfg.IntOpt(
        "retention",
        default=7776000,
        min=0,
        help="Seconds an audit record is kept (90 days by default) before the conductor's "
        "audit_sweep job deletes it (never one whose notification is still to be sent); "
        "0 keeps every record.",
    ),
]

health_opts = [
    cfg.IntOpt(
        "recover_after",
        default=600,
        min=0,
        help="Seconds a device reported unhealthy must then be reported healthy (ok or "
        "warning, without a change of health) before it is offered again; the conductor's "
        "health_recovery job looks every [conductor] health_sweep_interval. 0: offered "
        "again at that job's first run after a healthy report. An operator may clear it at "
        "once "
        "(POST /v2/devices/{uuid}/health, doc/devices.md, Health).",
    ),
]

claims_opts = [
    cfg.IntOpt(
        "retention",
        default=86400,
        min=0,
        help="Seconds a released standalone claim is still shown (GET /v2/claims/{uuid}, "
        "DELETE again answers 204) before the conductor's claim_expiry job deletes it; 0 "
        "deletes it at the next sweep.",
    ),
]

placement_opts = [
    cfg.BoolOpt(
        "manage_compute_providers",
        default=False,
        help="Standalone mode: create each host's compute node provider (named after the "
        "host) when it is missing. False (a cloud): nova-compute creates it and the sync of "
        "a host waits until it exists. `exosuit serve --placement-url` sets it.",
    ),
    cfg.IntOpt(
        "retry_interval",
        default=10,
        min=1,
        help="Seconds before a host's Placement sync that could not finish (Placement "
        "unreachable, compute node provider not there yet, removal waiting for "
        "allocations to go) runs again; doubled at each further try.",
    ),
    cfg.IntOpt(
        "max_retry_interval",
        default=300,
        min=1,
        help="Longest wait between two tries of a host's Placement sync.",
    ),
]


def _keystoneauth_opts(service_type: str) -> list:
    """keystoneauth's session, auth (auth_type, auth_section; the plugin's own options
    are read when the client is built) and adapter options, as Nova and Cyborg have."""
    from keystoneauth1 import loading as ks_loading

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
    from keystoneauth1 import loading as ks_loading

    session = ks_loading.get_session_conf_options()
    for opt in session:
        if opt.dest == "timeout":
            opt.default = 30
    return session + ks_loading.get_auth_common_conf_options()


images_opts = [
    cfg.ListOpt(
        "sources",
        default=["exosuit"],
        help="Where program and bind requests look an image up, in this order: exosuit "
        "(the catalogue, /v2/images) and/or glance.",
    ),
    cfg.StrOpt(
        "data_dir",
        default="$state_path/images",
        help="Directory of the catalogue's image data (one file per image).",
    ),
    cfg.StrOpt(
        "cache_dir",
        default="$state_path/image-cache",
        help="Directory where the API keeps the data of Glance images it served to agents, "
        "by hash.",
    ),
    cfg.IntOpt(
        "cache_size",
        default=8 * 1024**3,
        min=0,
        help="Bytes the API's cache of Glance image data may hold (least recently used first out).",
    ),
    cfg.IntOpt(
        "max_size",
        default=4 * 1024**3,
        min=1,
        help="Largest image (bytes) the catalogue accepts: a larger upload gets 413.",
    ),
    cfg.DictOpt(
        "trusted_keys",
        default={},
        help="Public keys that sign images: key_id:/path/to/key.pem, … (PEM, RSA or EC). An "
        "image's signature must verify with the key it names. A Glance image names its "
        "key by img_signature_certificate_uuid.",
    ),
    cfg.BoolOpt(
        "require_signature",
        default=False,
        help="Refuse images without a signature by a trusted key (catalogue uploads, "
        "Glance images, programs).",
    ),
]

service_user_opts = [
    cfg.BoolOpt(
        "send_service_user_token",
        default=False,
        help="Send a service token (from this section's credentials) with the calls Exosuit "
        "makes to Nova, as Nova does with its own [service_user] section.",
    ),
]


@functools.cache
def _groups() -> dict[str | None, Sequence[cfg.Opt]]:
    """Options by group (None: [DEFAULT]). Built once, when first asked: keystoneauth's
    options need keystoneauth, which an agent without Keystone never imports
    (``make_agent_conf``)."""
    from keystoneauth1 import loading as ks_loading

    return {
        None: default_opts,
        "api": api_opts,
        "accelerator_requests": arq_opts,
        # How the devices an agent reports for the first time start (doc/devices.md).
        "inventory": inventory_opts,
        "database": database_opts,
        # The agent's credentials and TLS; `timeout` bounds each inventory report.
        "agent": agent_opts + _session_and_auth_opts(),
        # Where the agent writes CDI spec files (doc/cdi.md).
        "cdi": cdi_opts,
        "serve": serve_opts,
        "conductor": conductor_opts,
        # Standalone claims (doc/standalone.md).
        "claims": claims_opts,
        "audit": audit_opts,
        # Device health: the server's recovery (the agent's thresholds join them,
        # _health_groups).
        "health": health_opts,
        "placement": placement_opts + _keystoneauth_opts("placement"),
        # The service credentials Exosuit notifies Nova with (os-server-external-events).
        "nova": _keystoneauth_opts("compute"),
        "images": images_opts,
        # Glance (images' source): with an auth plugin the service user reads them;
        # without one, the caller's token is used (keystonemiddleware's), as Cyborg does.
        "glance": _keystoneauth_opts("image"),
        "service_user": service_user_opts
        + ks_loading.get_session_conf_options()
        + ks_loading.get_auth_common_conf_options(),
    }


def _driver_groups() -> dict[str | None, list[cfg.Opt]]:
    """Each installed driver's options, in the group named after the driver (keyed as
    ``_GROUPS`` is, so that the two merge)."""
    from exosuit.drivers import available_drivers, driver_class

    groups: dict[str | None, list[cfg.Opt]] = {}
    for name in available_drivers():
        options = getattr(driver_class(name), "OPTIONS", None)
        if options:
            groups[name] = list(options)
    return groups


def _notification_groups() -> dict[str | None, list[cfg.Opt]]:
    """oslo.messaging's ``[oslo_messaging_notifications]`` (driver, transport_url, topics,
    retry): the server processes' (API, conductor, ``exosuit serve``, exosuit-manage), so
    that ``driver = messagingv2`` and a ``transport_url`` turn the audit trail's
    notifications on (doc/audit.md). Not the agent's (``make_agent_conf``): oslo.messaging
    is a heavy import an agent never needs."""
    from exosuit import notifications

    return {notifications.GROUP: notifications.options()}


def _health_groups() -> dict[str | None, list[cfg.Opt]]:
    """``[health]``: the server's recovery and the thresholds the agent hands its drivers
    (exosuit/drivers/health.py), one group (``exosuit serve`` runs both)."""
    from exosuit.drivers import health

    return {"health": health_opts + list(health.OPTIONS)}


def register_opts(conf: cfg.ConfigOpts) -> None:
    groups = {**_groups(), **_notification_groups(), **_driver_groups(), **_health_groups()}
    for group, opts in groups.items():
        conf.register_opts(opts, group=group)


def driver_settings(conf: cfg.ConfigOpts, name: str) -> dict:
    """The values of a driver's configuration group, as a plain dict (its options
    registered first if the configuration does not have them yet: the agent's registers
    only the drivers it loads)."""
    if name not in conf:
        _register_driver_opts(conf, name)
    if name not in conf:
        return {}
    group = conf[name]
    return {opt: group[opt] for opt in group}


def _register_driver_opts(conf: cfg.ConfigOpts, name: str) -> None:
    """Register the options of the installed driver ``name`` (that driver alone is
    imported); nothing for a driver that is not installed or has none."""
    from exosuit.drivers import driver_class

    try:
        options = getattr(driver_class(name), "OPTIONS", None)
    except LookupError:
        return
    if options:
        conf.register_opts(list(options), group=name)


def list_opts():
    """The oslo-config-generator hook (namespace ``exosuit``)."""
    groups = {**_groups(), **_notification_groups(), **_driver_groups(), **_health_groups()}
    return list(groups.items())


# [agent] keys that need keystoneauth's options (Keystone, TLS); ``auth_plugin`` is
# auth_type's deprecated name.
_KEYSTONE_KEYS = frozenset(
    {"auth_type", "auth_plugin", "auth_section", "cafile", "certfile", "keyfile", "insecure"}
)
# The one keystoneauth session option an agent without Keystone reads: each request's
# bound, as keystoneauth's (exosuit's default: 30 s).
_AGENT_TIMEOUT = cfg.FloatOpt(
    "timeout", default=30, help="Timeout value for http requests to the API, in seconds."
)


def register_agent_keystone_opts(conf: cfg.ConfigOpts) -> None:
    """keystoneauth's session and auth options in [agent] (imports keystoneauth)."""
    conf.register_opts(_session_and_auth_opts(), group="agent")


def make_agent_conf(config_files: list[str] | None = None) -> cfg.ConfigOpts:
    """The configuration of ``exosuit-agent run``: [DEFAULT], [agent] and [cdi] only,
    each driver's section registered when the agent loads that driver. keystoneauth's
    [agent] options (and so keystoneauth) only when the agent needs them: ``api_url`` is
    not plain ``http://`` (the catalog, or TLS), or the files set a Keystone or TLS key
    in [agent]; otherwise [agent] ``timeout`` alone, as keystoneauth declares it."""
    conf = cfg.ConfigOpts()
    conf.register_opts(default_opts)
    conf.register_opts(agent_opts, group="agent")
    conf.register_opts(cdi_opts, group="cdi")
    files = _existing(config_files)
    sections: dict[str, dict[str, list[str]]] = {}
    for f in files:
        cfg.ConfigParser(f, sections).parse()
    agent = sections.get("agent", {})
    url = (agent.get("api_url") or [""])[-1].strip()
    if not url.startswith("http://") or _KEYSTONE_KEYS & set(agent):
        register_agent_keystone_opts(conf)
    else:
        conf.register_opt(_AGENT_TIMEOUT, group="agent")
    conf([], project="exosuit", default_config_files=files, validate_default_values=True)
    return conf


def _existing(config_files: list[str] | None) -> list[str]:
    files = [os.path.abspath(f) for f in (config_files or [])]
    for f in files:
        if not os.path.exists(f):
            raise SystemExit(f"config file {f} does not exist")
    return files


def make_conf(config_files: list[str] | None = None, **overrides) -> cfg.ConfigOpts:
    """A fresh ConfigOpts with Exosuit's options, read from ``config_files``.

    ``overrides`` are ``"group.option"`` (or ``"option"`` for DEFAULT) keys
    set after parsing; they come from command-line flags such as ``--port``.
    """
    conf = cfg.ConfigOpts()
    register_opts(conf)
    files = _existing(config_files)
    conf([], project="exosuit", default_config_files=files, validate_default_values=True)
    for key, value in overrides.items():
        group, _, name = key.rpartition(".")
        conf.set_override(name, value, group=group or None)
    return conf
