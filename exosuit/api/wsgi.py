"""Request, responses and errors of the API.

Errors use Cyborg's envelope: ``{"error_message": "<JSON fault>"}``, where the
inner JSON holds ``faultstring`` (the message), ``faultcode`` (Client/Server),
``debuginfo`` and, an Exosuit addition, ``code``: a stable ``exosuit.*`` code
clients can branch on. Domain exceptions are mapped to a status here, once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import uuid as uuidlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import fastjsonschema
import jsonschema
import webob
from oslo_policy import policy as oslo_policy
from webob import Response
from webob.request import BaseRequest

from exosuit import exceptions
from exosuit.api import microversion
from exosuit.context import RequestContext
from exosuit.schemas import JSONObject, names

# Named in App's annotations only: imported at run time, they would load SQLAlchemy and
# prometheus-client with every module that imports this one.
if TYPE_CHECKING:
    from oslo_config import cfg

    from exosuit.api.report_cache import ReportCache
    from exosuit.api.response_cache import ResponseCache
    from exosuit.db.api import Database
    from exosuit.db.group_commit import GroupCommit
    from exosuit.db.inventory import HostReport
    from exosuit.metrics import RequestLatency

LOG = logging.getLogger(__name__)

__all__ = [
    "ApiError",
    "Headers",
    "Request",
    "Response",
    "encode_json",
    "encoded_json_response",
    "error_body",
    "error_response",
    "excerpt",
    "extract_json",
    "format_time",
    "json_response",
]

_STATUS_BY_EXCEPTION: list[tuple[type[Exception], int]] = [
    (exceptions.NotFound, 404),
    (exceptions.Conflict, 409),
    (exceptions.Invalid, 400),
    (exceptions.ImageInvalid, 400),
    (exceptions.ImageTooLarge, 413),
    (exceptions.ServiceTokenRequired, 403),
    (exceptions.ARQUnresolved, 423),
    (exceptions.DatabaseUnavailable, 503),
    (exceptions.GlanceUnavailable, 503),
    (exceptions.GlanceError, 502),
]


class ApiError(Exception):
    """An HTTP error raised by a handler: status, message and stable code."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str = "exosuit.error",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or []


def from_exception(error: Exception) -> ApiError | None:
    """The ApiError for a domain or policy exception, or None if it is unexpected."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, oslo_policy.InvalidScope):
        return ApiError(403, str(error), "exosuit.policy.scope")
    if isinstance(error, oslo_policy.PolicyNotAuthorized):
        return ApiError(403, str(error), "exosuit.policy.forbidden")
    if isinstance(error, exceptions.ExosuitError):
        for cls, status in _STATUS_BY_EXCEPTION:
            if isinstance(error, cls):
                headers = [("Retry-After", "2")] if status == 503 else None
                return ApiError(status, error.message, error.code, headers)
    return None


class Caller(Protocol):
    """What ``App.authorize`` reads of a request: its context."""

    @property
    def context(self) -> RequestContext: ...


class RouteInfo(Protocol):
    """What is read of a route outside the router (exosuit/api/router.py's Route)."""

    template: str
    methods: dict[str, Callable[..., Any]]
    versioned: bool

    def since_for(self, method: str) -> tuple[int, int] | None: ...


class RouteTable(Protocol):
    @property
    def routes(self) -> Sequence[RouteInfo]: ...


class Slots(Protocol):
    def slot(self) -> contextlib.AbstractContextManager[None]: ...


class App(Protocol):
    """What a handler reaches through ``req.app``: exosuit/api/deploy.py's Application
    (which imports the handlers, so this module names it by what it offers)."""

    @property
    def conf(self) -> cfg.ConfigOpts: ...
    @property
    def db(self) -> Database: ...
    @property
    def deployables_version(self) -> Callable[[], int]: ...
    @property
    def host_reports(self) -> ReportCache[HostReport]: ...
    @property
    def inventory_admission(self) -> Slots: ...
    @property
    def inventory_writes(self) -> GroupCommit: ...
    @property
    def latency(self) -> RequestLatency: ...
    @property
    def responses(self) -> ResponseCache: ...
    @property
    def router(self) -> RouteTable: ...

    def authorize(self, req: Caller, rule: str, target: dict[str, Any] | None = None) -> None:
        """Raise 403 unless the caller may do ``rule`` on ``target``."""

    def allowed(self, req: Caller, rule: str) -> bool:
        """Whether the caller passes ``rule`` for an object of its own project."""

    def context(self, environ: dict[str, Any]) -> RequestContext:
        """The caller's context from the identity headers."""


class Request(BaseRequest):
    """A webob request plus what the router found: app, context, version, args.

    The application sets ``app`` first, then, once the route is found, the others: a
    handler finds them set (``version`` on a versioned route only: the root document,
    /healthz, /metrics and the dashboard's files have none)."""

    app: App
    context: RequestContext
    version: microversion.Version
    # The path as routed (without a trailing slash, under /v2) and its arguments.
    route_path: str = ""
    route_args: dict[str, str] = {}

    def arg(self, name: str) -> str:
        value = self.route_args[name]
        # UUIDs are case-insensitive (RFC 4122) and stored in lower case: without
        # this only MariaDB's case-insensitive collation found an upper-case one.
        return value.lower() if name == "uuid" else value

    @property
    def base_url(self) -> str:
        # Computed once per request: every link of a list needs it.
        url: str | None = self.environ.get("exosuit.base_url")
        if url is None:
            app: App | None = getattr(self, "app", None)
            public = app.conf.api.public_endpoint if app else None
            url = self.environ["exosuit.base_url"] = (public or self.application_url).rstrip("/")
        return url

    def link(self, resource: str, ident: str, rel: str = "self") -> dict[str, str]:
        return {"href": f"{self.base_url}/v2/{resource}/{ident}", "rel": rel}


def format_time(value: dt.datetime | None) -> str | None:
    """Timestamps as Cyborg shows them: ISO 8601, seconds, UTC offset."""
    if value is None:
        return None
    return value.replace(microsecond=0, tzinfo=dt.UTC).isoformat()


def encode_json(body: Any) -> bytes:
    """A JSON body as every response writes it (compact)."""
    return json.dumps(body, separators=(",", ":")).encode()


# Response headers as webob takes them: (name, value) pairs.
Headers = Iterable[tuple[str, str]]


def json_response(status: int, body: Any = None, headers: Headers | None = None) -> webob.Response:
    if body is not None:
        return encoded_json_response(status, encode_json(body), headers)
    response = webob.Response(status=status, headerlist=list(headers or []))
    if status in (204, 304):
        response.headerlist = [h for h in response.headerlist if h[0] != "Content-Type"]
    return response


def encoded_json_response(
    status: int, data: bytes, headers: Headers | None = None
) -> webob.Response:
    """A response whose JSON body is already encoded (``encode_json``)."""
    # The headers are written out: webob's property setters cost more than the rest.
    return webob.Response(
        body=data,
        status=status,
        headerlist=[
            *(headers or []),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
        ],
    )


def error_response(error: ApiError) -> webob.Response:
    return encoded_json_response(
        error.status, error_body(error.status, error.message, error.code), error.headers
    )


def error_body(status: int, message: str, code: str) -> bytes:
    """The encoded body of an error: Cyborg's envelope holding the JSON fault. The message
    is cut to ``MAX_MESSAGE`` characters (marked): an error never repeats a whole request
    (exosuit serve's HTTP server writes its own refusals with it too)."""
    fault = {
        "faultstring": excerpt(message, MAX_MESSAGE),
        "faultcode": "Server" if status >= 500 else "Client",
        "debuginfo": None,
        "code": code,
    }
    return encode_json({"error_message": json.dumps(fault)})


# A body in a transfer coding no server decodes for the application (gzip …): 501.
UNSUPPORTED_TRANSFER_CODING = (
    "The request's Transfer-Encoding is not supported: only chunked is.",
    "exosuit.request.transfer_encoding",
)

# The longest message an error carries (a backstop: Exosuit's own messages name every
# object they refuse, e.g. each ARQ of a batch bind that found no free handle, and are
# kept whole up to it), the longest explanation of a JSON Schema failure, and the longest
# excerpt of a value a message quotes.
MAX_MESSAGE = 65536
MAX_SCHEMA_MESSAGE = 1024
MAX_QUOTE = 200


def excerpt(text: str, limit: int = MAX_QUOTE) -> str:
    """``text`` itself when at most ``limit`` characters, else its start and a mark saying
    how long the whole was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text)} characters in all]"


def extract_json(req: BaseRequest, schema: JSONObject | None = None) -> Any:
    """The request's JSON body, validated against ``schema``: 400 on failure.

    The body is read once from the input stream: ``req.body`` would first make it
    seekable, spooling a large one to a temporary file nobody closes.
    """
    body = _read_body(req)
    if not body:
        raise ApiError(400, "Request body is required.", "exosuit.body.missing")
    try:
        data = json.loads(body, parse_constant=not_json)
    except RecursionError:
        raise ApiError(400, "The request body is nested too deeply.", "exosuit.body.json") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(
            400, f"Malformed JSON in request body: {error}", "exosuit.body.json"
        ) from None
    if suspect_escape(body) and not _clean_strings(data):
        raise ApiError(
            400,
            "Strings in the request body must be valid Unicode without NUL characters "
            "(no lone surrogate, no \\u0000).",
            "exosuit.body.string",
        )
    if schema is not None:
        validate(data, schema)
    return data


def not_json(constant: str) -> Any:
    """NaN, Infinity and -Infinity: Python's parser takes them, JSON has no such number."""
    raise ValueError(f"{constant} is not a JSON number")


# Escapes that decode to what no database stores: NUL, and surrogates (a lone one is not
# Unicode; a pair decodes to one character, and passes).
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def suspect_escape(body: bytes) -> bool:
    """Whether a JSON body holds an escape whose strings must be checked (NUL, surrogate)."""
    return _SUSPECT_ESCAPE.search(body) is not None


def _read_body(req: BaseRequest) -> bytes:
    """The body, at most ``[api] max_body_size`` bytes (``max_agent_body_size`` for the
    agent API): 413 above, 400 when it cannot be read (a malformed chunked body)."""
    conf = getattr(getattr(req, "app", None), "conf", None)
    limit = _DEFAULT_BODY_LIMIT
    if conf is not None:
        agent = getattr(req, "route_path", "").startswith("/agent/")
        limit = conf.api.max_agent_body_size if agent else conf.api.max_body_size
    length = req.content_length
    if length is not None and length > limit:
        raise _too_large(limit)
    if length == 0:
        return b""
    try:
        body = req.body_file.read() if length is not None else req.body_file.read(limit + 1)
    except (ValueError, OSError) as error:
        raise ApiError(
            400, f"The request body could not be read: {error}", "exosuit.body.unreadable"
        ) from None
    if len(body) > limit:
        raise _too_large(limit)
    return body


_DEFAULT_BODY_LIMIT = 1024 * 1024


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413, f"The request body is larger than {limit} bytes.", "exosuit.body.too_large"
    )


def _clean_strings(data: Any) -> bool:
    """Whether every string (keys too) is valid Unicode and free of NUL."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return False
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


# A schema's two validators: fastjsonschema's compiled function, jsonschema's validator.
_Validators = tuple[Callable[[Any], Any], jsonschema.Draft202012Validator]
_VALIDATORS: dict[int, _Validators] = {}


def _validators(schema: JSONObject) -> _Validators:
    found = _VALIDATORS.get(id(schema))
    if found is None:
        # fastjsonschema compiles the schema to Python (25x faster on a host's
        # snapshot); jsonschema explains a failure best. The schemas use only
        # keywords both read alike.
        fast = fastjsonschema.compile({k: v for k, v in schema.items() if k != "$schema"})
        found = _VALIDATORS[id(schema)] = (fast, jsonschema.Draft202012Validator(schema))
    return found


def validate(data: Any, schema: JSONObject) -> None:
    """400 naming where ``data`` breaks ``schema`` and how, quoting at most an excerpt of
    the value (a refusal costs little and says little more than why)."""
    fast, validator = _validators(schema)
    try:
        fast(data)
        return
    except fastjsonschema.JsonSchemaValueException as fast_error:
        # NOTE: jsonschema explains best, but it writes the whole failing value into each
        # error (a repr) and best_match reads every error: on a 30 MiB array that took
        # minutes. A large body gets fastjsonschema's words (which never quote a value).
        error = None
        if _small(data):
            error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is None:  # a large body, or the two disagree: the first failure found
            where = "/".join(str(p) for p in fast_error.path[1:]) or "(body)"
            how = fast_error.message.removeprefix(f"{fast_error.name} ")
            raise ApiError(
                400, f"Invalid request body at {where}: {excerpt(how)}", "exosuit.body.invalid"
            ) from None
    where = "/".join(str(p) for p in error.absolute_path) or "(body)"
    if error.validator == "pattern" and error.validator_value == names.PATTERN:
        raise ApiError(
            400,
            f"Invalid request body at {where}: {error.instance!r} is not a name: {names.RULE}.",
            names.CODE,
        )
    raise ApiError(
        400,
        f"Invalid request body at {where}: {_quoting_excerpt(error)}",
        "exosuit.body.invalid",
    )


# A body jsonschema explains: at most this many values, and this many characters of strings.
_SMALL_VALUES = 20000
_SMALL_CHARACTERS = 256 * 1024


def _small(data: Any) -> bool:
    """Whether ``data`` is small enough for jsonschema's explanations (a walk that stops
    at the bounds)."""
    stack = [data]
    values = characters = 0
    while stack:
        item = stack.pop()
        values += 1
        if isinstance(item, str):
            characters += len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        if values > _SMALL_VALUES or characters > _SMALL_CHARACTERS:
            return False
    return True


def _quoting_excerpt(error: jsonschema.exceptions.ValidationError) -> str:
    """jsonschema's message, the value it quotes cut to an excerpt."""
    message = error.message
    if len(message) <= MAX_QUOTE:
        return message
    quoted = repr(error.instance)
    if len(quoted) > MAX_QUOTE and quoted in message:
        message = message.replace(quoted, excerpt(quoted))
    return excerpt(message, MAX_SCHEMA_MESSAGE)


def is_uuid_like(value: str) -> bool:
    try:
        return str(uuidlib.UUID(value)) == value.lower()
    except (TypeError, ValueError, AttributeError):
        return False


def query_list(req: BaseRequest, name: str) -> list[str] | None:
    """A comma-separated query parameter as a list (None if absent)."""
    value = req.GET.get(name)
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]
