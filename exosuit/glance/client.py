"""The Glance (Image API v2) calls Exosuit makes, over a keystoneauth session.

``GlanceClient`` takes its keystoneauth ``Adapter`` as a parameter. ``make_adapter``
builds it from ``[glance]``: with an auth plugin there, Exosuit's service user reads
images (any keystoneauth plugin, the catalog or ``endpoint_override``); without one,
the caller's own token is used (keystonemiddleware's ``X-Auth-Token``), as Cyborg
does, against ``[glance] endpoint_override``. Tests hand it a real Glance on
loopback. keystoneauth's and Glance's errors are translated here, at one boundary:
404 is ``ImageNotFound``; unreachable, timed out, 5xx, 401 and 403 are
``GlanceUnavailable``; anything else ``GlanceError``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from keystoneauth1 import adapter as ksa_adapter
from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import token_endpoint

from exosuit import exceptions
from exosuit.images import verify

__all__ = ["GlanceClient", "make_adapter", "uses_service_user"]

LOG = logging.getLogger(__name__)

GROUP = "glance"


class GlanceClient:
    """Glance's images: show, list by property, members, and the data (streamed)."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    # -- the one boundary ------------------------------------------------------------
    def request(
        self,
        method: str,
        url: str,
        *,
        expected: tuple[int, ...] = (200,),
        image: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Send one request; the keystoneauth response when its status is expected.

        ``image``: the uuid a 404 is about (ImageNotFound). Raises GlanceUnavailable
        (unreachable, timeout, 5xx, 401/403, no endpoint) or GlanceError.
        """
        try:
            response = self.adapter.request(url, method, raise_exc=False, **kwargs)
        except ksa_exc.ClientException as error:
            raise exceptions.GlanceUnavailable(
                method=method, url=url, status=None, detail=f"{type(error).__name__}: {error}"
            ) from error
        status = response.status_code
        if status in expected:
            return response
        detail = " ".join((response.text or "").split())[:500]
        response.close()
        if status == 404 and image is not None:
            raise exceptions.ImageNotFound(uuid=image)
        kind = exceptions.GlanceError
        if status in (401, 403) or status >= 500:
            kind = exceptions.GlanceUnavailable
        raise kind(method=method, url=url, status=status, detail=detail)

    # -- images ----------------------------------------------------------------------
    def get_image(self, uuid: str) -> dict[str, Any]:
        """The image's record (its properties at the top level); ImageNotFound."""
        body: dict[str, Any] = self.request("GET", f"/v2/images/{uuid}", image=uuid).json()
        return body

    def list_images(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        """The images matching ``filters`` (Glance filters on any property), every page."""
        images: list[dict[str, Any]] = []
        url: str | None = "/v2/images"
        params: dict[str, Any] | None = dict(filters)
        while url is not None:
            body = self.request("GET", url, params=params).json()
            images.extend(body.get("images", []))
            url = body.get("next")  # already carries the query
            params = None
        return images

    def is_member(self, uuid: str, project_id: str) -> bool:
        """Whether ``project_id`` is an accepted member of shared image ``uuid``."""
        response = self.request(
            "GET", f"/v2/images/{uuid}/members/{project_id}", expected=(200, 404)
        )
        if response.status_code == 404:
            return False
        return bool(response.json().get("status") == "accepted")

    def data(self, uuid: str, *, offset: int = 0) -> Iterator[bytes]:
        """The image's data from byte ``offset`` on, streamed in chunks.

        ImageNotFound; GlanceError when Glance has no data for it (204) or ignores
        the range asked for."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        response = self.request(
            "GET",
            f"/v2/images/{uuid}/file",
            expected=(200, 204, 206),
            image=uuid,
            headers=headers,
            stream=True,
        )
        if response.status_code == 204 or (offset and response.status_code != 206):
            response.close()
            raise exceptions.GlanceError(
                method="GET",
                url=f"/v2/images/{uuid}/file",
                status=response.status_code,
                detail="no data" if response.status_code == 204 else "range not honoured",
            )
        return _chunks(response)


def _chunks(response: Any) -> Iterator[bytes]:
    try:
        yield from response.iter_content(chunk_size=verify.CHUNK_SIZE)
    except (OSError, ksa_exc.ClientException, ValueError) as error:
        # requests raises its own ConnectionError (an OSError) mid-stream.
        raise exceptions.GlanceUnavailable(
            method="GET", url=response.url, status=None, detail=f"download cut: {error}"
        ) from error
    finally:
        response.close()


# -- adapters from [glance] ------------------------------------------------------------------

_SESSIONS: dict[int, tuple[weakref.ref[Any], Any, Any]] = {}
_LOCK = threading.Lock()


def uses_service_user(conf: Any) -> bool:
    """Whether ``[glance]`` names an auth plugin: Exosuit's service user reads Glance."""
    return bool(conf[GROUP].auth_type)


def _service(conf: Any) -> tuple[Any, Any]:
    """The (session, service auth or None) of ``conf``'s ``[glance]``, made once per
    conf: the service user's token is fetched once and reused until it expires."""
    with _LOCK:
        found = _SESSIONS.get(id(conf))
        if found is not None and found[0]() is conf:
            return found[1], found[2]
        auth = None
        if uses_service_user(conf):
            auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
        session = ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)
        _SESSIONS[id(conf)] = (weakref.ref(conf), session, auth)
        return session, auth


def make_adapter(conf: Any, token: str | None = None) -> Any:
    """A keystoneauth Adapter for Glance from ``[glance]``: as the service user when an
    auth plugin is configured there, else with ``token`` (the caller's) against
    ``[glance] endpoint_override``. GlanceUnavailable when neither is possible."""
    session, auth = _service(conf)
    if auth is None:
        endpoint = conf[GROUP].endpoint_override
        if not token or not endpoint:
            raise exceptions.GlanceUnavailable(
                method="GET",
                url="/v2/images",
                status=None,
                detail="configure a service user in [glance] (auth_type …), or "
                "[glance] endpoint_override to read Glance with the caller's token"
                + ("" if token else " (this request carries no token)"),
            )
        auth = token_endpoint.Token(endpoint, token)
    adapter: ksa_adapter.Adapter = ks_loading.load_adapter_from_conf_options(
        conf, GROUP, session=session, auth=auth
    )
    return adapter
