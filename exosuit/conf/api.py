"""[api]: how the API listens and serves, and the limits of what one request may ask
(doc/limits.md)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf._values import optional_text, texts

__all__ = ["ApiSettings", "GROUP", "OPTIONS", "options"]

GROUP = "api"

OPTIONS: list[cfg.Opt] = [
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
        help="Inventory transactions one API process runs at the same time; each applies "
        "the changed snapshots and report times queued in the process meanwhile, up to 32, "
        "together (group commit: each in a savepoint of its own, each answered after the "
        "commit). A write that no transaction takes within inventory_wait gets 429 with "
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
    # Slow and greedy clients (doc/limits.md, "Slow clients").
    cfg.FloatOpt(
        "header_timeout",
        default=10.0,
        min=1.0,
        help="Seconds a request's line and headers may take to arrive, from its first "
        "byte; a slower one is answered 408 and its connection closed (exosuit serve; "
        "granian's header read timeout in exosuit-api; gunicorn does not bound it).",
    ),
    cfg.FloatOpt(
        "body_timeout",
        default=60.0,
        min=1.0,
        help="Seconds a request's body may take to arrive, from its headers, and again for "
        "each further max_body_size bytes of a larger one (an image upload); a slower one "
        "is cut off (408, connection closed), so that it holds a server thread no longer "
        "(exosuit serve, and exosuit-api under granian).",
    ),
    cfg.IntOpt(
        "max_connections",
        default=1000,
        min=1,
        help="Open connections exosuit serve keeps at most; one more is answered 503 and "
        "closed. Below the process's open files limit.",
    ),
    cfg.StrOpt(
        "granian_interface",
        default="asgi",
        choices=[
            (
                "asgi",
                "Each request's body is read by granian's event loop before a thread runs "
                "the application (exosuit/api/asgi_bridge.py): a slow client holds no "
                "thread.",
            ),
            (
                "wsgi",
                "granian's WSGI interface: somewhat cheaper per request, but a request "
                "holds a thread while its body arrives. Behind a proxy that buffers "
                "requests (nginx, HAProxy) only.",
            ),
        ],
        help="How exosuit-api's granian runs the WSGI application ([api] server = granian).",
    ),
    cfg.IntOpt(
        "max_client_connections",
        default=100,
        min=1,
        help="Open connections exosuit serve keeps at most from one client address; one "
        "more is answered 503 and closed. Behind a proxy every client has its address: "
        "raise it there.",
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


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class ApiSettings:
    """The ``[api]`` options."""

    auth_strategy: str
    host_ip: str
    port: int
    server: str
    workers: int
    threads: int
    public_endpoint: str | None
    max_limit: int
    inventory_concurrency: int
    report_cache_size: int
    inventory_wait: float
    public_routes: tuple[str, ...]
    stale_report_after: int
    max_body_size: int
    max_agent_body_size: int
    max_profile_groups: int
    max_group_keys: int
    max_value_length: int
    max_arqs_per_request: int
    max_arqs_per_patch: int
    max_ops_per_arq: int
    backlog: int
    shutdown_timeout: int
    header_timeout: float
    body_timeout: float
    max_connections: int
    granian_interface: str
    max_client_connections: int
    program_wait: int
    report_age_resolution: float
    discovery_rate: int

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ApiSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.api
        return cls(
            auth_strategy=str(group.auth_strategy),
            host_ip=str(group.host_ip),
            port=int(group.port),
            server=str(group.server),
            workers=int(group.workers),
            threads=int(group.threads),
            public_endpoint=optional_text(group.public_endpoint),
            max_limit=int(group.max_limit),
            inventory_concurrency=int(group.inventory_concurrency),
            report_cache_size=int(group.report_cache_size),
            inventory_wait=float(group.inventory_wait),
            public_routes=texts(group.public_routes),
            stale_report_after=int(group.stale_report_after),
            max_body_size=int(group.max_body_size),
            max_agent_body_size=int(group.max_agent_body_size),
            max_profile_groups=int(group.max_profile_groups),
            max_group_keys=int(group.max_group_keys),
            max_value_length=int(group.max_value_length),
            max_arqs_per_request=int(group.max_arqs_per_request),
            max_arqs_per_patch=int(group.max_arqs_per_patch),
            max_ops_per_arq=int(group.max_ops_per_arq),
            backlog=int(group.backlog),
            shutdown_timeout=int(group.shutdown_timeout),
            header_timeout=float(group.header_timeout),
            body_timeout=float(group.body_timeout),
            max_connections=int(group.max_connections),
            granian_interface=str(group.granian_interface),
            max_client_connections=int(group.max_client_connections),
            program_wait=int(group.program_wait),
            report_age_resolution=float(group.report_age_resolution),
            discovery_rate=int(group.discovery_rate),
        )
