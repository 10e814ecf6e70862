"""Build the WSGI application: the middleware pipeline is composed here, once.

Order (outermost first) and why:

1. ``RequestIdMiddleware`` - every response, even an auth failure, carries
   ``x-openstack-request-id``.
2. authentication - keystonemiddleware (``auth_strategy = keystone``) or the
   noauth shim; public routes (``/``, ``/v2``, ``/healthz``) bypass it, as
   Cyborg's ``acl_public_routes`` do, since Nova discovers versions without a token.
3. ``Application`` - routing, microversions, context, policy, handlers, and the
   fault barrier that turns any unexpected exception into a JSON 500.
"""

from __future__ import annotations

import logging
import threading
import uuid

from oslo_config import cfg

from exosuit import exceptions
from exosuit.api import microversion, router, wsgi
from exosuit.api.policies import make_enforcer
from exosuit.api.policies.cache import DecisionCache
from exosuit.context import RequestContext
from exosuit.db.api import Database

LOG = logging.getLogger(__name__)

__all__ = ["Application", "loadapp", "make_database"]

_NOAUTH_HEADERS = ("HTTP_X_USER_ID", "HTTP_X_PROJECT_ID", "HTTP_X_ROLES", "HTTP_X_SERVICE_ROLES")


def make_database(conf: cfg.ConfigOpts) -> Database:
    return Database(
        conf.database.connection,
        pool_size=conf.database.max_pool_size,
        max_overflow=conf.database.max_overflow,
        sqlite_busy_timeout=conf.database.sqlite_busy_timeout,
        max_retries=conf.database.max_retries,
    )


class Application:
    """The API proper: one instance per configuration and database."""

    def __init__(self, conf: cfg.ConfigOpts, db: Database) -> None:
        self.conf = conf
        self.db = db
        self.enforcer = make_enforcer(conf)
        self.policy = DecisionCache(self.enforcer)
        self.router = router.Router()
        roles = {"service"}
        if "keystone_authtoken" in conf and "service_token_roles" in conf.keystone_authtoken:
            roles = set(conf.keystone_authtoken.service_token_roles)
        self.service_token_roles = frozenset(roles)
        self.inventory_slots = threading.BoundedSemaphore(conf.api.inventory_concurrency)

    def authorize(self, req: wsgi.Request, rule: str, target: dict | None = None) -> None:
        """Raise 403 unless the caller may do ``rule`` on ``target``."""
        context = req.context
        if context.project_id is None and not context.system_scope:
            # NOTE: oslo.policy calls a caller with neither project nor domain
            # project-scoped, and "project_id:%(project_id)s" matches None to None:
            # such a caller would pass the project rules and, not being an admin, be
            # limited to "no project", that is see every project's ARQs. Every rule
            # is project-scoped, so a project is required.
            raise wsgi.ApiError(403, f"Policy {rule} requires a project-scoped token.",
                                "exosuit.policy.scope")
        if target is None:
            target = {"project_id": context.project_id, "user_id": context.user_id}
        self.policy.authorize(rule, target, context)

    def __call__(self, environ, start_response):
        req = wsgi.Request(environ)
        req.app = self
        path = router.normalize_path(req.path_info)
        found = self.router.match(path)
        version = None
        versioned = False
        try:
            if found is None:
                raise wsgi.ApiError(404, f"The resource {req.path_info} could not be found.",
                                    "exosuit.not_found")
            route, args = found
            versioned = route.versioned
            if versioned:
                try:
                    version = microversion.parse(req.headers)
                except microversion.VersionNotAcceptable as error:
                    raise wsgi.ApiError(406, str(error), "exosuit.microversion") from None
            handler = route.methods.get(req.method)
            if handler is None:
                raise wsgi.ApiError(
                    405,
                    f"The method {req.method} is not allowed for {req.path_info}.",
                    "exosuit.method_not_allowed",
                    headers=[("Allow", route.allow)],
                )
            req.version = version
            req.route_args = args
            req.context = self._context(environ)
            response = handler(req)
        except Exception as error:  # the fault barrier
            api_error = wsgi.from_exception(error)
            if api_error is None:
                LOG.exception("unexpected error in %s %s", req.method, req.path_info)
                api_error = wsgi.ApiError(
                    500, "An unexpected error occurred; the server log has the details.",
                    "exosuit.internal",
                )
            elif isinstance(error, exceptions.ExosuitError) or api_error.status >= 500:
                LOG.info("%s %s: %s", req.method, req.path_info, api_error.message)
            response = wsgi.error_response(api_error)
        if versioned:
            response.headerlist.extend(microversion.response_headers(version))
        return response(environ, start_response)

    def _context(self, environ) -> RequestContext:
        context = RequestContext.from_environ(environ)
        context.service_token_roles = self.service_token_roles
        return context


class NoAuthMiddleware:
    """Identity from keystonemiddleware's headers, without a token (embedded default).

    With none of X-User-Id, X-Project-Id, X-Roles or X-Service-Roles the caller is
    an admin that also holds the service role and a service token.
    """

    def __init__(self, app) -> None:
        self.app = app

    def __call__(self, environ, start_response):
        if not any(h in environ for h in _NOAUTH_HEADERS):
            environ["HTTP_X_USER_ID"] = "admin"
            environ["HTTP_X_PROJECT_ID"] = "admin"
            environ["HTTP_X_ROLES"] = "admin,manager,member,reader,service"
            environ["HTTP_X_SERVICE_ROLES"] = "service"
        environ.setdefault("HTTP_X_IDENTITY_STATUS", "Confirmed")
        return self.app(environ, start_response)


class PublicRoutes:
    """Send public routes to ``public`` (no authentication), the rest to ``protected``."""

    def __init__(self, protected, public, paths) -> None:
        self.protected = protected
        self.public = public
        self.paths = {p.rstrip("/") or "/" for p in paths}

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "/")
        path = path.rstrip("/") or "/"
        if path in self.paths:
            return self.public(environ, start_response)
        return self.protected(environ, start_response)


class RequestIdMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    def __call__(self, environ, start_response):
        request_id = "req-" + str(uuid.uuid4())
        environ["openstack.request_id"] = request_id

        def _start(status, headers, exc_info=None):
            headers.append(("x-openstack-request-id", request_id))
            return start_response(status, headers, exc_info)

        return self.app(environ, _start)


def loadapp(conf: cfg.ConfigOpts, db: Database | None = None):
    """The WSGI application for ``conf`` (and ``db``, made from conf if not given)."""
    app = Application(conf, db or make_database(conf))
    if conf.api.auth_strategy == "keystone":
        from keystonemiddleware import auth_token

        protected = auth_token.AuthProtocol(app, {"oslo_config_config": conf})
        # keystonemiddleware registered [keystone_authtoken] now; re-read the roles.
        app.service_token_roles = frozenset(conf.keystone_authtoken.service_token_roles)
        public = app
    else:
        protected = NoAuthMiddleware(app)
        public = protected
    pipeline = PublicRoutes(protected, public, conf.api.public_routes)
    pipeline = RequestIdMiddleware(pipeline)
    pipeline.application = app  # for tests and `exosuit serve`
    return pipeline
