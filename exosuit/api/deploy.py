"""Build the WSGI application: the middleware pipeline is composed here, once.

Order (outermost first) and why:

1. ``RequestIdMiddleware`` - every response, even an auth failure, carries
   ``x-openstack-request-id``.
2. ``LatencyMiddleware`` - times every request (auth failures included) into the
   request latency histogram of /metrics, by route template, method and status class.
3. authentication - keystonemiddleware (``auth_strategy = keystone``) or the
   noauth shim; public routes (``/``, ``/v2``, ``/healthz``) bypass it, as
   Cyborg's ``acl_public_routes`` do, since Nova discovers versions without a token
   (``/metrics`` authenticates a caller who offers credentials: ``PublicRoutes``).
4. ``UnchangedReports`` - an agent's unchanged report that this process's cache
   answers, answered without webob or routing (the same checks and policy, after
   authentication); and ``CachedLists``: a ``GET /v2/deployables`` that the response
   cache answers, likewise. Any other request goes on.
5. ``Application`` - routing, microversions, context, policy, handlers, and the
   fault barrier that turns any unexpected exception into a JSON 500.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from oslo_config import cfg

from exosuit import exceptions
from exosuit.api import microversion, router, wsgi
from exosuit.api.admission import Admission
from exosuit.api.handlers import agent, deployables
from exosuit.api.policies import make_enforcer
from exosuit.api.policies.cache import DecisionCache
from exosuit.api.report_cache import ReportCache, Version
from exosuit.api.response_cache import ResponseCache
from exosuit.conf import ApiSettings
from exosuit.context import RequestContext
from exosuit.db import audit, changes
from exosuit.db.api import Database
from exosuit.db.group_commit import GroupCommit
from exosuit.db.inventory import HostReport
from exosuit.metrics import RequestLatency

LOG = logging.getLogger(__name__)

__all__ = ["Application", "actor_of", "loadapp", "make_database"]

# What a WSGI server passes start_response after an error (PEP 3333's exc_info).
_ExcInfo = tuple[type[BaseException], BaseException, TracebackType] | tuple[None, None, None]

_NOAUTH_HEADERS = ("HTTP_X_USER_ID", "HTTP_X_PROJECT_ID", "HTTP_X_ROLES", "HTTP_X_SERVICE_ROLES")


def make_database(conf: cfg.ConfigOpts) -> Database:
    return Database.from_conf(conf)


# Names (hosts, projects, users, path arguments) are at most this long: the columns
# that hold them are.
MAX_NAME_LENGTH = 255
_IDENTITY_HEADERS = ("HTTP_X_USER_ID", "HTTP_X_PROJECT_ID", "HTTP_X_DOMAIN_ID")


def _raw_path(environ: WSGIEnvironment) -> str:
    """The path as the server received it (for logs: it may not be UTF-8)."""
    return repr(environ.get("PATH_INFO", ""))[1:-1]


def _routable_path(req: wsgi.Request) -> str:
    """The path to route. 400 when the path or the query is not UTF-8 or holds a NUL
    (no resource has such a name, and no database takes it); 404 for a request target
    that is not a path (``OPTIONS *``)."""
    try:
        path = req.path_info
        query = req.GET  # parsed here, once: every handler reads it
    except UnicodeDecodeError:
        raise wsgi.ApiError(
            400, "The request's path and query must be UTF-8.", "exosuit.request.encoding"
        ) from None
    if not path.startswith("/"):
        raise _not_found(req)
    if "\x00" in path or any("\x00" in k or "\x00" in v for k, v in query.items()):
        raise wsgi.ApiError(
            400, "The request's path and query must not contain NUL.", "exosuit.request.nul"
        )
    return router.normalize_path(path)


def _check_transfer_encoding(environ: WSGIEnvironment) -> None:
    """501 for a body in a transfer coding other than chunked (gzip, deflate …), which no
    server decodes for the application (exosuit serve's refuses it before:
    exosuit/api/http_server.py, in the same words)."""
    codings = environ.get("HTTP_TRANSFER_ENCODING")
    if codings is not None and any(
        c.strip().lower() not in ("chunked", "") for c in codings.split(",")
    ):
        raise wsgi.ApiError(501, *wsgi.UNSUPPORTED_TRANSFER_CODING)


def _not_found(req: wsgi.Request) -> wsgi.ApiError:
    return wsgi.ApiError(
        404, f"The resource {req.path_info} could not be found.", "exosuit.not_found"
    )


class Application:
    """The API proper: one instance per configuration and database."""

    def __init__(self, conf: cfg.ConfigOpts, db: Database) -> None:
        self.conf = conf
        self.db = db
        self.enforcer = make_enforcer(conf)
        self.policy = DecisionCache(self.enforcer)
        # Bodies of lists kept while their data's version is unchanged (deployables).
        self.responses = ResponseCache()
        # The list's version as the cache compares it: one read for the threads that
        # ask at once (exosuit/db/changes.py).
        self.deployables_version = changes.SharedRead(changes.HeldReader(db, changes.DEPLOYABLES))
        self.router = router.Router()
        # This process's request latency histogram (LatencyMiddleware fills it).
        self.latency = RequestLatency()
        roles = {"service"}
        if "keystone_authtoken" in conf and "service_token_roles" in conf.keystone_authtoken:
            roles = set(conf.keystone_authtoken.service_token_roles)
        self.service_token_roles = frozenset(roles)
        # What unchanged agent reports are answered from, while no process changed it.
        api = ApiSettings.from_conf(conf)
        self.host_reports: ReportCache[HostReport] = ReportCache(
            Version(changes.CounterReader(db, changes.HOST_REPORTS)),
            api.report_cache_size,
        )
        self.inventory_admission = Admission(
            api.inventory_concurrency,
            api.inventory_wait,
            message="The API is applying other hosts' inventories; retry later.",
            code="exosuit.inventory.busy",
        )
        # Snapshots and report times written, several hosts' in one transaction.
        self.inventory_writes = GroupCommit(db, self.inventory_admission)

    def authorize(self, req: wsgi.Caller, rule: str, target: dict[str, Any] | None = None) -> None:
        """Raise 403 unless the caller may do ``rule`` on ``target``."""
        context = req.context
        if context.project_id is None and not context.system_scope:
            # NOTE: oslo.policy calls a caller with neither project nor domain
            # project-scoped, and "project_id:%(project_id)s" matches None to None:
            # such a caller would pass the project rules and, not being an admin, be
            # limited to "no project", that is see every project's ARQs. Every rule
            # is project-scoped, so a project is required.
            raise wsgi.ApiError(
                403, f"Policy {rule} requires a project-scoped token.", "exosuit.policy.scope"
            )
        if target is None:
            target = {"project_id": context.project_id, "user_id": context.user_id}
        self.policy.authorize(rule, target, context)

    def allowed(self, req: wsgi.Caller, rule: str) -> bool:
        """Whether the caller passes ``rule`` for an object of its own project (what
        ``authorize`` with no target checks); a caller without a project passes none."""
        context = req.context
        if context.project_id is None and not context.system_scope:
            return False
        target = {"project_id": context.project_id, "user_id": context.user_id}
        return self.policy.allowed(rule, target, context)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        req = wsgi.Request(environ)
        req.app = self
        version = None
        versioned = False
        try:
            _check_transfer_encoding(environ)
            path = _routable_path(req)
            found = self.router.match(path)
            if found is None:
                raise _not_found(req)
            route, args = found
            environ["exosuit.route"] = route.template  # the latency's label
            if any(len(value) > MAX_NAME_LENGTH for value in args.values()):
                raise _not_found(req)  # no resource has so long a name
            versioned = route.versioned
            if versioned:
                try:
                    version = microversion.parse(req.headers)
                except microversion.VersionNotAcceptable as error:
                    raise wsgi.ApiError(406, str(error), "exosuit.microversion") from None
                since = route.since_for(req.method)
                if since is not None and not version.matches(since):
                    versioned = False  # answered exactly as an unknown path
                    raise _not_found(req)
            handler = route.methods.get(req.method)
            if handler is None:
                raise wsgi.ApiError(
                    405,
                    f"The method {req.method} is not allowed for {req.path_info}.",
                    "exosuit.method_not_allowed",
                    headers=[("Allow", route.allow)],
                )
            if version is not None:
                req.version = version
                if req.method == "GET" and version.matches(router.STRICT_QUERIES):
                    unknown = route.unknown_query(req.method, req.GET.keys())
                    if unknown is not None:
                        raise wsgi.ApiError(400, unknown, "exosuit.query.unknown")
            req.route_path = path
            req.route_args = args
            req.context = self.context(environ)
            # Who the changes this request makes are recorded as (exosuit/db/audit.py).
            with audit.acting(actor_of(route.template, args, req.context)):
                response = handler(req)
        except Exception as error:  # the fault barrier
            api_error = wsgi.from_exception(error)
            if api_error is None:
                LOG.exception("unexpected error in %s %s", req.method, _raw_path(environ))
                api_error = wsgi.ApiError(
                    500,
                    "An unexpected error occurred; the server log has the details.",
                    "exosuit.internal",
                )
            elif isinstance(error, exceptions.ExosuitError) or api_error.status >= 500:
                # One line per refusal, even when the database's words span several (a
                # PostgreSQL outage's do): a log reader greps lines.
                message = " ".join(api_error.message.split())
                LOG.info("%s %s: %s", req.method, _raw_path(environ), message)
            response = wsgi.error_response(api_error)
        if versioned:
            response.headerlist.extend(microversion.response_headers(version))
        answer: Iterable[bytes] = response(environ, start_response)
        return answer

    def context(self, environ: WSGIEnvironment) -> RequestContext:
        """The caller's context from the identity headers: 400 for a malformed one."""
        for header in _IDENTITY_HEADERS:
            value = environ.get(header)
            if value is not None and (len(value) > MAX_NAME_LENGTH or "\x00" in value):
                name = header[len("HTTP_") :].replace("_", "-").title()
                raise wsgi.ApiError(
                    400,
                    f"{name} must be at most {MAX_NAME_LENGTH} characters, without NUL.",
                    "exosuit.request.identity",
                )
        context = RequestContext.from_environ(environ)
        context.service_token_roles = self.service_token_roles
        return context


def actor_of(template: str, args: dict[str, str], context: RequestContext) -> audit.Actor:
    """Who a request acts as, for the audit trail: the host's agent on its agent API
    (``host:<name>``), a service that sent its service token (Nova: ``service:<user>``),
    else the caller (``user:<user>``); with the caller's user, project and request id."""
    if template.startswith("/agent/") and "hostname" in args:
        name = f"host:{args['hostname']}"
    elif context.has_service_token:
        name = f"service:{context.user_id}"
    else:
        name = f"user:{context.user_id}"
    return audit.Actor(name, context.user_id, context.project_id, context.request_id)


class UnchangedReports:
    """Answer an unchanged agent report from the cache of host reports before the
    application's webob, routing and microversion work (the largest share of such a
    report's cost): ``agent.unchanged_answer`` holds the rules. Every other request,
    or one it cannot answer (it raised), goes to ``app``, which answers as always."""

    def __init__(self, app: WSGIApplication, application: Application) -> None:
        self.app = app
        self.application = application
        self.answered = 0  # reports answered here (for tests: not exact across threads)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "PUT":
            try:
                data = agent.unchanged_answer(self.application, environ)
            except Exception:  # noqa: BLE001 - the full path answers it, errors included
                LOG.debug("unchanged report left to the full path", exc_info=True)
                data = None
            if data is not None:
                self.answered += 1
                environ["exosuit.route"] = agent.INVENTORY_ROUTE  # the latency's label
                start_response(
                    "200 OK",
                    [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
                )
                return [data]
        return self.app(environ, start_response)


class CachedLists:
    """Answer ``GET /v2/deployables`` from the response cache before the application's
    webob, routing and microversion work, when the cache holds the list at the version
    the database holds now: ``deployables.cached_answer`` holds the rules. Every other
    request, or one it cannot answer, goes to ``app``, which answers as always."""

    def __init__(self, app: WSGIApplication, application: Application) -> None:
        self.app = app
        self.application = application
        self.answered = 0  # lists answered here (for tests: not exact across threads)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "GET":
            try:
                found = deployables.cached_answer(self.application, environ)
            except Exception:  # noqa: BLE001 - the full path answers it, errors included
                LOG.debug("cached list left to the full path", exc_info=True)
                found = None
            if found is not None:
                self.answered += 1
                body, headers = found
                environ["exosuit.route"] = deployables.LIST_ROUTE  # the latency's label
                start_response("200 OK", headers)
                return [body]
        return self.app(environ, start_response)


class NoAuthMiddleware:
    """Identity from keystonemiddleware's headers, without a token (embedded default).

    With none of X-User-Id, X-Project-Id, X-Roles or X-Service-Roles the caller is
    an admin that also holds the service role and a service token.
    """

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if not any(h in environ for h in _NOAUTH_HEADERS):
            environ["HTTP_X_USER_ID"] = "admin"
            environ["HTTP_X_PROJECT_ID"] = "admin"
            environ["HTTP_X_ROLES"] = "admin,manager,member,reader,service"
            environ["HTTP_X_SERVICE_ROLES"] = "service"
        environ.setdefault("HTTP_X_IDENTITY_STATUS", "Confirmed")
        return self.app(environ, start_response)


# Public routes that still authenticate a caller who offers credentials, because what
# they answer depends on who asks (/metrics: the per-device series only to an admin,
# doc/metrics.md "Who sees what").
AUTHENTICATE_IF_OFFERED = frozenset({"/metrics"})
# What offers credentials: a token (Prometheus sends ``Authorization: Bearer``), or the
# identity headers noauth trusts (keystonemiddleware removes those of a caller it did not
# authenticate, so under Keystone they only get the caller a 401).
_CREDENTIALS = ("HTTP_X_AUTH_TOKEN", "HTTP_AUTHORIZATION", *_NOAUTH_HEADERS)


class PublicRoutes:
    """Send public routes to ``public`` (no authentication), the rest to ``protected``.

    A path ending in ``/*`` makes everything under it public (the dashboard's files). A
    public path of ``AUTHENTICATE_IF_OFFERED`` goes to ``protected`` when the request
    offers credentials (``Authorization: Bearer <token>`` is passed on as
    ``X-Auth-Token``, which keystonemiddleware reads). A request answered without
    authentication is marked ``exosuit.anonymous`` (under noauth, ``public`` is the
    noauth shim, which makes everyone an admin: the mark tells the handler who did not
    identify at all).
    """

    def __init__(
        self, protected: WSGIApplication, public: WSGIApplication, paths: Iterable[str]
    ) -> None:
        self.protected = protected
        self.public = public
        self.paths = {p.rstrip("/") or "/" for p in paths if not p.endswith("/*")}
        self.prefixes = tuple(p[:-1] for p in paths if p.endswith("/*"))

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        path = path.rstrip("/") or "/"
        if path in self.paths or path.startswith(self.prefixes):
            if path in AUTHENTICATE_IF_OFFERED and any(h in environ for h in _CREDENTIALS):
                scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
                if scheme.lower() == "bearer" and "HTTP_X_AUTH_TOKEN" not in environ:
                    environ["HTTP_X_AUTH_TOKEN"] = token.strip()
                return self.protected(environ, start_response)
            environ["exosuit.anonymous"] = True
            return self.public(environ, start_response)
        return self.protected(environ, start_response)


class RequestIdMiddleware:
    application: Application  # set by loadapp: the app at the end of the pipeline
    unchanged_reports: UnchangedReports  # set by loadapp too
    cached_lists: CachedLists  # and this

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request_id = "req-" + str(uuid.uuid4())
        environ["openstack.request_id"] = request_id

        def _start(
            status: str, headers: list[tuple[str, str]], exc_info: _ExcInfo | None = None
        ) -> Callable[[bytes], object]:
            headers.append(("x-openstack-request-id", request_id))
            return start_response(status, headers, exc_info)

        return self.app(environ, _start)


# Methods the latency histogram names; any other is counted as "other".
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class LatencyMiddleware:
    """Time each request, from its arrival until its body is sent (the server closes the
    body's iterator), into ``application.latency``, labelled with bounded values only:
    the route template the application matched (or the one the path names, for a request
    refused before routing: keystonemiddleware's 401; else ``unmatched``), the method
    (``other`` if unknown) and the status class (``2xx`` …; ``5xx`` if the app raised)."""

    def __init__(self, app: WSGIApplication, application: Application) -> None:
        self.app = app
        self.application = application

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        began = time.perf_counter()
        status: list[str] = []

        def _start(
            line: str, headers: list[tuple[str, str]], exc_info: _ExcInfo | None = None
        ) -> Callable[[bytes], object]:
            status[:] = [line]
            return start_response(line, headers, exc_info)

        try:
            body = self.app(environ, _start)
        except BaseException:
            self._observe(environ, ["500"], began)
            raise
        if isinstance(body, list | tuple):  # sent whole (webob's bodies): done now
            self._observe(environ, status, began)
            return body
        return _Timed(body, lambda: self._observe(environ, status, began))

    def _observe(self, environ: WSGIEnvironment, status: list[str], began: float) -> None:
        elapsed = time.perf_counter() - began
        route = environ.get("exosuit.route") or self._route(environ.get("PATH_INFO", "/"))
        method = environ.get("REQUEST_METHOD", "")
        method = method if method in _METHODS else "other"
        status_class = status[0][:1] + "xx" if status else "5xx"
        self.application.latency.observe(route, method, status_class, elapsed)

    def _route(self, path: str) -> str:
        if not path.startswith("/"):  # a request target that is not a path: OPTIONS *
            return "unmatched"
        found = self.application.router.match(router.normalize_path(path))
        return found[0].template if found is not None else "unmatched"


class _Timed:
    """A streamed body that calls ``done`` once the server closes it."""

    def __init__(self, body: Iterable[bytes], done: Callable[[], None]) -> None:
        self.body = body
        self.done = done

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.done()


def loadapp(conf: cfg.ConfigOpts, db: Database | None = None) -> RequestIdMiddleware:
    """The WSGI application for ``conf`` (and ``db``, made from conf if not given)."""
    app = Application(conf, db or make_database(conf))
    lists = CachedLists(app, app)
    fast = UnchangedReports(lists, app)
    api = ApiSettings.from_conf(conf)
    public: WSGIApplication
    if api.auth_strategy == "keystone":
        from keystonemiddleware import auth_token

        protected = auth_token.AuthProtocol(fast, {"oslo_config_config": conf})
        # keystonemiddleware registered [keystone_authtoken] now; re-read the roles.
        app.service_token_roles = frozenset(conf.keystone_authtoken.service_token_roles)
        public = app
    else:
        protected = NoAuthMiddleware(fast)
        public = protected
    routes = PublicRoutes(protected, public, api.public_routes)
    pipeline = RequestIdMiddleware(LatencyMiddleware(routes, app))
    pipeline.application = app  # for tests and `exosuit serve`
    pipeline.unchanged_reports = fast
    pipeline.cached_lists = lists
    return pipeline
