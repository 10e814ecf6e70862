"""The HTTP client of the ``exosuit`` command line.

One keystoneauth1 session (no auth for ``--os-endpoint``/``EXOSUIT_URL``, Keystone
through openstacksdk's configuration loader for ``--os-cloud``/``OS_*``), the
microversion negotiated once from ``GET /v2`` (the highest both sides speak),
lists paged through their ``next`` links, and every failure turned into a
``CLIError`` whose message is one line. The tree::

    CLIError                 anything the command line reports (exit status 1)
    ├── ApiError             the API answered an error: its message, status and code
    ├── ConnectionFailed     no answer from the endpoint
    └── VersionUnsupported   the API is older than the command needs
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from keystoneauth1 import exceptions as ksa_exceptions
from keystoneauth1 import session as ksa_session

from exosuit import __version__

if TYPE_CHECKING:
    import requests

__all__ = [
    "CLIENT_MAX_VERSION",
    "DEFAULT_URL",
    "ApiClient",
    "ApiError",
    "CLIError",
    "ConnectionFailed",
    "VersionUnsupported",
    "connect",
    "root_url",
]

DEFAULT_URL = "http://127.0.0.1:6666"
SERVICE_TYPE = "accelerator"
# The newest microversion this command line knows; it asks for
# min(this, the server's maximum).
CLIENT_MAX_VERSION = "2.11"
TIMEOUT = 60.0

Version = tuple[int, int]


class CLIError(Exception):
    """An error reported on one line, exit status 1."""


class ApiError(CLIError):
    """The API answered with an error status."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        self.status = status
        self.message = message
        self.code = code
        suffix = f", {code}" if code else ""
        super().__init__(f"{message} (HTTP {status}{suffix})")


class ConnectionFailed(CLIError):
    """Nothing answered at the endpoint."""


class VersionUnsupported(CLIError):
    """The API's newest microversion is older than the one a command needs."""


def parse_version(value: str) -> Version:
    major, _, minor = value.strip().partition(".")
    return int(major), int(minor)


def format_version(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def root_url(endpoint: str) -> str:
    """The API's root from an endpoint given with or without ``/v2`` (as the
    ``openstack`` client and Keystone catalogs give it)."""
    url = endpoint.strip().rstrip("/")
    if url.endswith("/v2"):
        url = url[: -len("/v2")]
    return url


# A body that is not the API's error (a proxy's page …) is cut here; the API's own
# messages never are: an operator needs all of "… Release them first."
_FOREIGN_BODY_LIMIT = 1000


def _one_line(text: str, limit: int | None = None) -> str:
    """``text`` on one line (its whitespace folded), whole unless ``limit`` says."""
    line = " ".join(text.split())
    if limit is None or len(line) <= limit:
        return line
    return f"{line[: limit - 1]}… ({len(line) - limit + 1} more characters)"


def _error_from(response: requests.Response) -> ApiError:
    """The API's message and code from Cyborg's envelope
    ``{"error_message": "<JSON: faultstring, code>"}``; the body's text otherwise."""
    message, code = "", None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error_message" in body:
        fault = body["error_message"]
        if isinstance(fault, str):
            try:
                fault = json.loads(fault)
            except ValueError:
                fault = {"faultstring": fault}
        if isinstance(fault, dict):
            message = str(fault.get("faultstring") or "")
            code = fault.get("code")
    if not message:
        message = response.reason or "error"
        text = response.text.strip() if response.text else ""
        if text and not text.lstrip().startswith("<"):
            message = f"{message}: {_one_line(text, _FOREIGN_BODY_LIMIT)}"
    return ApiError(response.status_code, _one_line(message), code)


class ApiClient:
    """Requests to one Exosuit (or Cyborg) API at one negotiated microversion."""

    def __init__(
        self, session: ksa_session.Session, url: str, requested_version: str | None = None
    ) -> None:
        self.session = session
        self.url = root_url(url)
        self._requested = requested_version
        self._version: Version | None = None
        self.server_max: Version | None = None

    # -- the microversion -------------------------------------------------------------------

    @property
    def version(self) -> Version:
        """The microversion every request carries, negotiated on first use."""
        if self._version is None:
            self._version = self._negotiate()
        return self._version

    def _negotiate(self) -> Version:
        document = _json(self._request("GET", f"{self.url}/v2", versioned=False))
        try:
            lowest = parse_version(document["min_version"])
            highest = parse_version(document["max_version"])
        except (KeyError, TypeError, ValueError):
            raise CLIError(
                f"{self.url}/v2 is not the version document of an Exosuit or Cyborg API"
            ) from None
        self.server_max = highest
        if self._requested is not None:
            wanted = parse_version(self._requested)
            if not lowest <= wanted <= highest:
                raise VersionUnsupported(
                    f"the API at {self.url} supports {format_version(lowest)} to "
                    f"{format_version(highest)}, not {self._requested}"
                )
            return wanted
        return min(highest, parse_version(CLIENT_MAX_VERSION))

    def supports(self, version: str) -> bool:
        return self.version >= parse_version(version)

    def require(self, version: str, what: str = "this command") -> None:
        """VersionUnsupported unless the negotiated version is at least ``version``."""
        if self.supports(version):
            return
        if self.server_max is not None and self.server_max >= parse_version(version):
            raise VersionUnsupported(
                f"{what} needs API {version}; --os-accelerator-api-version asks for "
                f"{format_version(self.version)}"
            )
        highest = self.server_max or self.version
        raise VersionUnsupported(
            f"the API at {self.url} supports up to {format_version(highest)}; "
            f"{what} needs {version}"
        )

    # -- requests ---------------------------------------------------------------------------

    def _request(
        self, method: str, url: str, *, versioned: bool = True, **kwargs: Any
    ) -> requests.Response:
        if versioned:
            kwargs["microversion"] = format_version(self.version)
            kwargs["microversion_service_type"] = SERVICE_TYPE
        try:
            response = self.session.request(
                url,
                method,
                raise_exc=False,
                headers={"Accept": "application/json", **kwargs.pop("headers", {})},
                **kwargs,
            )
        except ksa_exceptions.ConnectFailure as error:
            if self.url not in str(error):  # Keystone, while authenticating
                raise ConnectionFailed(_one_line(str(error))) from error
            raise ConnectionFailed(
                f"cannot connect to the Exosuit API at {self.url}: {_reason(error)} "
                "(is `exosuit serve` running? Point at it with --os-endpoint or EXOSUIT_URL.)"
            ) from error
        except ksa_exceptions.ConnectionError as error:
            raise ConnectionFailed(f"{method} {url}: {_one_line(str(error))}") from error
        except ksa_exceptions.ClientException as error:
            raise _keystone_error(error) from error
        if response.status_code >= 400:
            raise _error_from(response)
        return response

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        """The JSON object a GET answers (every resource of the API is one)."""
        body: dict[str, Any] = _json(self._request("GET", self.url + path, params=params))
        return body

    def post(self, path: str, body: Any = None) -> Any:
        kwargs = {} if body is None else {"json": body}
        response = self._request("POST", self.url + path, **kwargs)
        return _json(response) if response.content else None

    def put(self, path: str, body: Any) -> Any:
        response = self._request("PUT", self.url + path, json=body)
        return _json(response) if response.content else None

    def patch(self, path: str, body: Any) -> Any:
        response = self._request("PATCH", self.url + path, json=body)
        return _json(response) if response.content else None

    def delete(self, path: str, params: dict[str, str] | None = None) -> None:
        self._request("DELETE", self.url + path, params=params)

    def put_data(self, path: str, data: Any, length: int) -> None:
        """PUT ``length`` bytes read from ``data`` (a file-like object), streamed: never
        held in memory."""
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(length)}
        self._request("PUT", self.url + path, data=data, headers=headers)

    def list(
        self,
        path: str,
        key: str,
        params: Mapping[str, str | list[str]] | None = None,
        *,
        limit: int | None = None,
        keep: Callable[[dict[str, Any]], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Every item of a list (following ``next`` from 2.4), or the first ``limit``
        that ``keep`` accepts. Without ``keep`` the API is asked for ``limit`` items
        per page, so a short list costs one request."""
        params = dict(params or {})
        if limit is not None and keep is None and self.supports("2.4"):
            params["limit"] = str(limit)
        body = _json(self._request("GET", self.url + path, params=params))
        items: list[dict[str, Any]] = []
        while True:
            for item in body.get(key, []):
                if keep is None or keep(item):
                    items.append(item)
                    if limit is not None and len(items) >= limit:
                        return items
            following = body.get("next")
            if not following:
                return items
            body = _json(self._request("GET", following))


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise CLIError(
            f"{response.request.method} {response.url} answered {response.status_code} "
            "without JSON: is it an Exosuit or Cyborg API?"
        ) from None


def _keystone_error(error: Exception) -> CLIError:
    """An error of keystoneauth: an HTTP error comes from Keystone itself (our own
    requests never raise one: raise_exc=False)."""
    prefix = "Keystone: " if isinstance(error, ksa_exceptions.HttpError) else ""
    return CLIError(prefix + _one_line(str(error)))


def _reason(error: Exception) -> str:
    text = str(error)
    for marker in ("Connection refused", "Name or service not known", "timed out"):
        if marker in text:
            return marker.lower()
    return _one_line(text, 120)


# -- where to connect -----------------------------------------------------------------------

# Global options handed to openstacksdk's configuration loader (it also reads every
# OS_* variable and clouds.yaml itself).
KEYSTONE_OPTIONS = (
    "os_cloud",
    "os_auth_type",
    "os_auth_url",
    "os_username",
    "os_user_id",
    "os_password",
    "os_project_name",
    "os_project_id",
    "os_user_domain_name",
    "os_user_domain_id",
    "os_project_domain_name",
    "os_project_domain_id",
    "os_token",
    "os_application_credential_id",
    "os_application_credential_secret",
    "os_region_name",
    "os_interface",
    "os_cacert",
    "insecure",
)


def uses_keystone(options: argparse.Namespace) -> bool:
    """Keystone when a cloud, an auth URL or an auth type other than ``none`` is
    configured (options or OS_* variables), as the ``openstack`` client decides."""
    auth_type = options.os_auth_type or os.environ.get("OS_AUTH_TYPE")
    if auth_type:
        return auth_type != "none"
    return bool(
        options.os_cloud
        or os.environ.get("OS_CLOUD")
        or options.os_auth_url
        or os.environ.get("OS_AUTH_URL")
    )


def endpoint_from(options: argparse.Namespace) -> str | None:
    return (
        options.os_endpoint
        or os.environ.get("EXOSUIT_URL")
        or os.environ.get("OS_ENDPOINT")
        or None
    )


def connect(options: argparse.Namespace) -> ApiClient:
    """The client the global options describe (nothing is sent yet)."""
    version = options.os_accelerator_api_version
    if not uses_keystone(options):
        session = ksa_session.Session(timeout=TIMEOUT, app_name="exosuit", app_version=__version__)
        return ApiClient(session, endpoint_from(options) or DEFAULT_URL, version)
    return _keystone_client(options, version)


def _keystone_client(options: argparse.Namespace, version: str | None) -> ApiClient:
    # Imported here: openstacksdk takes longer to import than the rest of a command.
    from openstack import exceptions as sdk_exceptions
    from openstack.config import loader

    args = argparse.Namespace(**{name: getattr(options, name) for name in KEYSTONE_OPTIONS})
    try:
        region = loader.OpenStackConfig().get_one(argparse=args)
        session = region.get_session()
        session.additional_user_agent.append(("exosuit", __version__))
        endpoint = endpoint_from(options) or region.get_session_endpoint(SERVICE_TYPE)
    except sdk_exceptions.SDKException as error:
        raise CLIError(_one_line(str(error))) from error
    except ksa_exceptions.ClientException as error:
        raise _keystone_error(error) from error
    if not endpoint:
        raise CLIError(
            f"no {SERVICE_TYPE} endpoint in the Keystone catalog "
            f"(region {region.get_region_name(SERVICE_TYPE)!r}); give --os-endpoint"
        )
    return ApiClient(session, endpoint, version)
